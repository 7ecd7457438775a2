package service_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/benchenv"
	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/service"
)

// keptByCompaction is how many of a long session's newest messages its
// latest compaction keeps, in BenchmarkSessionLength: as many as the
// shortest session holds, so every length's context is the same size and
// only the session's length differs.
const keptByCompaction = 10

// BenchmarkSessionLength measures one step of a conversation in sessions
// of AGENTD_BENCH_LENGTHS messages (10, 1,000, 10,000 and 100,000) and
// reports, per step and length, its median time over
// AGENTD_BENCH_LENGTH_REPS samples and the ratio to the shortest session's
// (x-vs-shortest, target ≤ 1.2: a long session costs no more per step
// than a short one). A long session is what automatic compaction leaves:
// its latest summary keeps the newest keptByCompaction messages, so its
// context is the size of the shortest session's. The steps, each on a
// session of its own so that none measures another's additions: op=
//
//   - append-messages: AppendMessages of one message, a user's and an
//     assistant's in turn;
//   - prompt-first-event: a Prompt to its first event, with the context
//     cache off (the launch after a restart or past the cache);
//   - get-context: GetContext with a context policy and a token budget;
//   - store-append: the store's Append of one entry.
func BenchmarkSessionLength(b *testing.B) {
	benchenv.Procs(b)
	lengths := benchenv.Ints(b, "LENGTHS", 10, 1_000, 10_000, 100_000)
	reps := benchenv.Int(b, "LENGTH_REPS", 25)
	h := newHarness(b, agent.Options{ContextCacheBytes: -1}, service.ServerOptions{})
	ctx := context.Background()
	cfg := &agentdv1.SessionConfig{
		Faux: &agentdv1.FauxScript{Echo: true},
		ContextPolicy: &agentdv1.ContextPolicy{Rules: []*agentdv1.ContextRule{
			{Rule: &agentdv1.ContextRule_ElideToolResults{ElideToolResults: &agentdv1.ElideToolResultsRule{KeepTurns: 2}}},
			{Rule: &agentdv1.ContextRule_TokenBudget{TokenBudget: &agentdv1.TokenBudgetRule{MaxTokens: 50_000}}},
		}},
	}
	user := func(s string) *agentdv1.AgentMessage {
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts(s)}}}
	}
	steps := []struct {
		name string
		// run takes the step's i-th sample and returns how long it took.
		run func(b *testing.B, sessionID string, i int) time.Duration
	}{
		{"append-messages", func(b *testing.B, id string, i int) time.Duration {
			// A note, then an answer to it, as a host app records a
			// conversation it ran elsewhere.
			msg := user(fmt.Sprint("note ", i))
			if i%2 == 1 {
				msg = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{
					Content: texts(fmt.Sprint("noted ", i)), StopReason: agentdv1.StopReason_STOP_REASON_STOP}}}
			}
			start := time.Now()
			if _, err := h.client.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: id, Messages: []*agentdv1.AgentMessage{msg}}); err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		}},
		{"prompt-first-event", func(b *testing.B, id string, i int) time.Duration {
			start := time.Now()
			stream, err := h.client.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: texts(fmt.Sprint("question ", i))})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil {
				b.Fatal(err)
			}
			first := time.Since(start)
			// The rest of the run, before the next sample starts.
			for {
				ev, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				if end := ev.GetAgentEnd(); end != nil && end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
					b.Fatalf("the prompt ended %v: %s", end.GetOutcome(), end.GetErrorMessage())
				}
			}
			return first
		}},
		{"get-context", func(b *testing.B, id string, _ int) time.Duration {
			start := time.Now()
			resp, err := h.client.GetContext(ctx, &agentdv1.GetContextRequest{SessionId: id})
			elapsed := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if n := len(resp.GetContext().GetMessages()); n == 0 || n > keptByCompaction+1 {
				b.Fatalf("GetContext: %d messages, want 1 to %d", n, keptByCompaction+1)
			}
			return elapsed
		}},
		{"store-append", func(b *testing.B, id string, i int) time.Duration {
			e := &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: user(fmt.Sprint("note ", i))}}
			start := time.Now()
			if err := h.store.Append(ctx, id, e); err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		}},
	}
	// Every session is written first, then agentd restarts: each step
	// meets its session as one that has been stored for a while, not in
	// the write-ahead log of its making, and the first prompt finds no
	// cache.
	sessions := make([][]string, len(steps))
	for i := range steps {
		for _, n := range lengths {
			id := h.createSession(cfg)
			fillSession(b, h, id, n)
			sessions[i] = append(sessions[i], id)
		}
	}
	h.restart()
	for si, step := range steps {
		b.Run("op="+step.name, func(b *testing.B) {
			var shortest float64
			for li, n := range lengths {
				id := sessions[si][li]
				b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
					benchenv.Procs(b) // reported by each length
					// One untimed step first, so that no length pays for
					// the first use of a code path or a cold page.
					step.run(b, id, -1)
					samples := make([]float64, 0, reps)
					for b.Loop() {
						for i := range reps {
							samples = append(samples, float64(step.run(b, id, i).Nanoseconds())/1e3)
						}
					}
					med := median(samples)
					if shortest == 0 {
						shortest = med
					}
					b.ReportMetric(med, "µs-median")
					b.ReportMetric(med/shortest, "x-vs-shortest")
					b.ReportMetric(float64(n), "messages")
				})
			}
		})
	}
}

// fillSession appends n generated messages to the session and, past
// keptByCompaction, a compaction summary that keeps the newest
// keptByCompaction of them.
func fillSession(b *testing.B, h *harness, sessionID string, n int) {
	ctx := context.Background()
	g := transcriptgen.New(uint64(n))
	var kept string
	for done := 0; done < n; {
		batch := make([]*agentdv1.Entry, min(1_000, n-done))
		for i := range batch {
			batch[i] = g.Next()
			batch[i].RunId = ""
		}
		if err := h.store.Append(ctx, sessionID, batch...); err != nil {
			b.Fatal(err)
		}
		done += len(batch)
		if k := n - keptByCompaction; k >= done-len(batch) && k < done {
			kept = batch[k-(done-len(batch))].GetId()
		}
	}
	if n <= keptByCompaction {
		return
	}
	summary := &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_CompactionSummary{
		CompactionSummary: &agentdv1.CompactionSummary{Summary: "earlier work", FirstKeptEntryId: kept}}}}}
	if err := h.store.Append(ctx, sessionID, summary); err != nil {
		b.Fatal(err)
	}
}

// median is the middle of samples (sorted in place).
func median(samples []float64) float64 {
	slices.Sort(samples)
	return samples[len(samples)/2]
}

// BenchmarkCompactedConversation prompts one session
// AGENTD_BENCH_CONVERSATION_TURNS times (500) with automatic compaction
// on, so its context stays near the same size while its transcript grows,
// and reports the median time of a turn (prompt to agent_end) over the
// first 50 turns and over the last 50, and their ratio (last50/first50,
// target ≤ 1.3): a turn of a long conversation costs what its context
// does, not what its transcript does.
func BenchmarkCompactedConversation(b *testing.B) {
	benchenv.Procs(b)
	turns := benchenv.Int(b, "CONVERSATION_TURNS", 500)
	if turns < 100 {
		b.Fatalf("AGENTD_BENCH_CONVERSATION_TURNS=%d: at least 100, so the first and last 50 are apart", turns)
	}
	h := newHarness(b, agent.Options{}, service.ServerOptions{})
	// About 500 tokens a prompt, as many echoed: a compaction every few
	// turns, keeping about 4,000 tokens.
	cfg := &agentdv1.SessionConfig{
		Faux:       &agentdv1.FauxScript{Echo: true, ContextWindow: 16_000},
		Compaction: &agentdv1.CompactionSettings{ReserveTokens: 4_000, KeepRecentTokens: 4_000},
	}
	question := strings.Repeat("how does the session store its tree? ", 55)
	for b.Loop() {
		id := h.createSession(cfg)
		times := make([]float64, turns)
		compactions := 0
		for i := range turns {
			start := time.Now()
			evs := h.prompt(id, fmt.Sprint(i, " ", question))
			times[i] = float64(time.Since(start).Microseconds()) / 1e3
			for _, ev := range evs {
				if end := ev.GetAgentEnd(); end != nil && end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
					b.Fatalf("turn %d ended %v: %s", i, end.GetOutcome(), end.GetErrorMessage())
				}
				if ev.GetCompactionEnd().GetEntryId() != "" {
					compactions++
				}
			}
		}
		if compactions < turns/20 {
			b.Fatalf("%d compactions in %d turns: the context did not stay bounded", compactions, turns)
		}
		first, last := median(times[:50]), median(times[turns-50:])
		b.ReportMetric(first, "first50-ms-median")
		b.ReportMetric(last, "last50-ms-median")
		b.ReportMetric(last/first, "last50/first50")
		b.ReportMetric(float64(compactions), "compactions")
		b.ReportMetric(float64(turns), "turns")
	}
}
