package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/benchenv"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
	"github.com/agentd/agentd/tools/sandbox"
	"github.com/agentd/agentd/tools/sandbox/sandboxtest"
)

// BenchmarkBashCall measures what the sandbox adds to one bash call with
// the agentd binary itself as the helper: a prompt whose answer calls
// bash `true` 20 times one after the other, on an agentd confining bash
// and on one run with --sandbox=off, alternating in one run. It reports
// each one's time per call, their ratio and the milliseconds confinement
// adds to a call (target ≤ 15).
func BenchmarkBashCall(b *testing.B) {
	sandboxtest.New(b, sandbox.Options{})
	const calls = 20
	ws := b.TempDir()
	args, _ := structpb.NewStruct(map[string]any{"command": "true"})
	var content []*agentdv1.ContentBlock
	for i := range calls {
		content = append(content, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{
			Id: "c" + strconv.Itoa(i), Name: "bash", Arguments: args}}})
	}
	cfg := &agentdv1.SessionConfig{
		WorkspaceRoot: ws,
		ToolExecution: agentdv1.ToolExecutionMode_TOOL_EXECUTION_MODE_SEQUENTIAL,
		Tools:         []*agentdv1.Tool{{Name: "bash", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW}},
		Faux:          &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{{Content: content}, {Content: texts("done")}}},
	}
	run := func(p *proc) time.Duration {
		c := p.client()
		id := createSession(b, c, cfg)
		start := time.Now()
		evs, err := drain(c.Prompt(testCtx(b), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")}))
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		for _, ev := range evs {
			if r := ev.GetToolExecutionEnd().GetResult(); r != nil && r.GetIsError() {
				b.Fatalf("a call failed: %v", r)
			}
		}
		return d
	}
	dbs := b.TempDir()
	confined := startProc(b, filepath.Join(dbs, "on.db"))
	bare := startProc(b, filepath.Join(dbs, "off.db"), "--sandbox=off")
	run(confined) // warm both
	run(bare)
	var on, off time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			on += run(confined)
			off += run(bare)
		} else {
			off += run(bare)
			on += run(confined)
		}
	}
	n := float64(b.N * calls)
	b.ReportMetric(float64(on.Microseconds())/n, "µs/call-confined")
	b.ReportMetric(float64(off.Microseconds())/n, "µs/call-unconfined")
	b.ReportMetric(float64(on)/float64(off), "confined/unconfined")
	b.ReportMetric(float64((on-off).Microseconds())/n/1000, "ms-added/call")
}

// BenchmarkReplicas runs AGENTD_BENCH_SESSIONS sessions (default 1000)
// on each of three deployments of agentd on PostgreSQL (pgtest: skipped
// without a server outside CI) — 1, 2 and 3 replicas, each on its own
// database — AGENTD_BENCH_CONCURRENCY prompts at a time (default 64).
// Session i of a deployment is created and prompted on its replica i mod
// n; its faux model lists the workspace with ls in three turns and then
// answers. The deployments take turns, a round of at most 100 sessions
// each in a rotating order, so a shared machine's load falls on all
// three alike. For each it reports the events its clients received per
// second of prompting, runs per second, and the 50th and 99th percentile
// of the time from a Prompt call to its first event (agent_start), which
// includes claiming the run and storing the prompt. Run it with
// -benchtime 1x: an iteration is the whole batch.
func BenchmarkReplicas(b *testing.B) {
	sessions := benchenv.Int(b, "SESSIONS", 1000)
	workers := benchenv.Int(b, "CONCURRENCY", 64)
	const round = 100
	ws := b.TempDir()
	for _, name := range []string{"go.mod", "main.go", "README.md"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(name), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	args, _ := structpb.NewStruct(map[string]any{"path": "."})
	var responses []*agentdv1.AssistantMessage
	for i := range 3 {
		responses = append(responses, &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_ToolCall{
			ToolCall: &agentdv1.ToolCall{Id: "call-" + strconv.Itoa(i), Name: "ls", Arguments: args}}}}})
	}
	responses = append(responses, &agentdv1.AssistantMessage{Content: texts(strings.Repeat("the workspace holds go.mod, main.go and README.md. ", 8))})
	cfg := &agentdv1.SessionConfig{
		WorkspaceRoot: ws,
		Tools:         []*agentdv1.Tool{{Name: "ls"}},
		Faux:          &agentdv1.FauxScript{Responses: responses},
	}
	// deployment is n replicas on one database, and what its runs took.
	type deployment struct {
		clients []agentdv1.AgentServiceClient
		elapsed time.Duration
		events  int
		firsts  []time.Duration
	}
	deps := make([]*deployment, 3)
	for d := range deps {
		dsn := pgtest.DSN(b)
		deps[d] = &deployment{}
		for i := range d + 1 {
			p := startProc(b, dsn, "--replica-id", fmt.Sprintf("bench-%d-of-%d", i, d+1))
			deps[d].clients = append(deps[d].clients, p.client())
		}
	}
	b.ResetTimer()
	for range b.N {
		for r, from := 0, 0; from < sessions; r, from = r+1, from+round {
			count := min(round, sessions-from)
			for k := range deps {
				dep := deps[(r+k)%len(deps)]
				b.StopTimer()
				ids := make([]string, count)
				for i := range ids {
					// Replica (from+i) mod n: the spread of the whole batch.
					ids[i] = createSession(b, dep.clients[(from+i)%len(dep.clients)], cfg)
				}
				b.StartTimer()
				start := time.Now()
				got, lat := promptAll(b, dep.clients, from, ids, workers)
				dep.elapsed += time.Since(start)
				dep.events += got
				dep.firsts = append(dep.firsts, lat...)
			}
		}
	}
	for d, dep := range deps {
		slices.Sort(dep.firsts)
		pct := func(p float64) float64 {
			return float64(dep.firsts[int(p*float64(len(dep.firsts)-1))].Microseconds()) / 1000
		}
		unit := func(what string) string { return fmt.Sprintf("%s-%dreplica", what, d+1) }
		b.ReportMetric(float64(dep.events)/dep.elapsed.Seconds(), unit("events/s"))
		b.ReportMetric(float64(len(dep.firsts))/dep.elapsed.Seconds(), unit("runs/s"))
		b.ReportMetric(pct(0.50), unit("first-event-p50-ms"))
		b.ReportMetric(pct(0.99), unit("first-event-p99-ms"))
	}
}

// promptAll prompts every session, ids[i] on replica (from+i) mod n,
// workers at a time, and returns how many events the clients received and
// each Prompt's time to its first event. Every run must complete.
func promptAll(b *testing.B, clients []agentdv1.AgentServiceClient, from int, ids []string, workers int) (int, []time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	jobs := make(chan int)
	var mu sync.Mutex
	var events int
	var firsts []time.Duration
	var failed error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				replica := (from + i) % len(clients)
				first, n, err := promptOnce(ctx, clients[replica], ids[i])
				mu.Lock()
				if err != nil && failed == nil {
					failed = fmt.Errorf("session %s on replica %d: %w", ids[i], replica, err)
					cancel()
				}
				events += n
				firsts = append(firsts, first)
				mu.Unlock()
			}
		}()
	}
	for i := range ids {
		if ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	return events, firsts
}

// promptOnce runs one Prompt to its end and returns the time to its first
// event and the number of events.
func promptOnce(ctx context.Context, c agentdv1.AgentServiceClient, id string) (time.Duration, int, error) {
	start := time.Now()
	stream, err := c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: texts("what is in the workspace?")})
	if err != nil {
		return 0, 0, err
	}
	ev, err := stream.Recv()
	if err != nil {
		return 0, 0, err
	}
	first := time.Since(start)
	rest, err := drain(stream, nil)
	if err != nil {
		return 0, 0, err
	}
	last := ev
	if len(rest) > 0 {
		last = rest[len(rest)-1]
	}
	if end := last.GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		return 0, 0, fmt.Errorf("run ended %v %q", end.GetOutcome(), end.GetErrorMessage())
	}
	return first, 1 + len(rest), nil
}
