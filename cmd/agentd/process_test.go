package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// The tests in this file run agentd as a separate process (AGENTD_BIN, or
// a binary built once for the test run), so they can kill it.

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	binDir    string // removed by TestMain
)

// agentdBinary returns the agentd binary to run.
func agentdBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("AGENTD_BIN"); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "agentd-test-bin")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(binDir, "agentd")
		out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build agentd: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// proc is an agentd process.
type proc struct {
	t       testing.TB
	cmd     *exec.Cmd
	addr    string
	metrics string
	log     *lockedBuffer
	exited  chan struct{}
	err     error // the exit, once exited is closed
}

var (
	servingLine = regexp.MustCompile(`msg="agentd serving" addr=(\S+)`)
	metricsLine = regexp.MustCompile(`msg="metrics serving" addr=(\S+)`)
)

// startProc starts agentd on db and a free port and waits until it
// serves; it is killed at cleanup if still running.
func startProc(t testing.TB, db string, extra ...string) *proc {
	t.Helper()
	return startProcEnv(t, nil, db, extra...)
}

// startProcEnv is startProc with env added to agentd's environment.
func startProcEnv(t testing.TB, env []string, db string, extra ...string) *proc {
	t.Helper()
	p := launchEnv(t, env, db, extra...)
	deadline := time.Now().Add(30 * time.Second)
	for p.addr == "" {
		select {
		case <-p.exited:
			t.Fatalf("agentd exited before serving: %v\n%s", p.err, p.log.String())
		case <-time.After(10 * time.Millisecond):
		}
		if m := servingLine.FindStringSubmatch(p.log.String()); m != nil {
			p.addr = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentd did not report its address:\n%s", p.log.String())
		}
	}
	if m := metricsLine.FindStringSubmatch(p.log.String()); m != nil {
		p.metrics = m[1]
	}
	return p
}

// launch starts agentd without waiting for it.
func launch(t testing.TB, db string, extra ...string) *proc {
	t.Helper()
	return launchEnv(t, nil, db, extra...)
}

// launchEnv is launch with env added to agentd's environment.
func launchEnv(t testing.TB, env []string, db string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"--listen", "127.0.0.1:0", "--db", db}, extra...)
	p := &proc{t: t, cmd: exec.Command(agentdBinary(t), args...), log: &lockedBuffer{}, exited: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start agentd: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// kill ends agentd with SIGKILL, as a crash would.
func (p *proc) kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.exited
}

// waitExit waits for agentd to end on its own and returns how it ended.
func (p *proc) waitExit(limit time.Duration) error {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(limit):
		p.t.Fatalf("agentd still runs after %v:\n%s", limit, p.log.String())
		return nil
	}
}

func (p *proc) client() agentdv1.AgentServiceClient {
	p.t.Helper()
	return agentdv1.NewAgentServiceClient(p.conn())
}

// conn is a new connection to agentd, closed at cleanup.
func (p *proc) conn() *grpc.ClientConn {
	p.t.Helper()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(32<<20), grpc.MaxCallSendMsgSize(32<<20)))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { conn.Close() })
	return conn
}

func texts(s ...string) []*agentdv1.ContentBlock {
	out := make([]*agentdv1.ContentBlock, len(s))
	for i, t := range s {
		out[i] = &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: t}}}
	}
	return out
}

func drain(stream grpc.ServerStreamingClient[agentdv1.AgentEvent], err error) ([]*agentdv1.AgentEvent, error) {
	if err != nil {
		return nil, err
	}
	var evs []*agentdv1.AgentEvent
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createSession(t testing.TB, c agentdv1.AgentServiceClient, cfg *agentdv1.SessionConfig) string {
	t.Helper()
	resp, err := c.CreateSession(testCtx(t), &agentdv1.CreateSessionRequest{Config: cfg})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return resp.GetSession().GetId()
}

func transcript(t testing.TB, c agentdv1.AgentServiceClient, id string) []*agentdv1.Entry {
	t.Helper()
	resp, err := c.GetTranscript(testCtx(t), &agentdv1.GetTranscriptRequest{SessionId: id, PageSize: 1000})
	if err != nil {
		t.Fatalf("GetTranscript: %v", err)
	}
	return resp.GetEntries()
}

// A second agentd on the same database file exits at once with a message
// naming the file and the process that has it, while the first keeps
// serving and its transcript is untouched.
func TestSecondAgentdOnTheSameDatabaseRefuses(t *testing.T) {
	db := filepath.Join(t.TempDir(), "agentd.db")
	first := startProc(t, db)
	c := first.client()
	id := createSession(t, c, &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	if _, err := drain(c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts("ping")})); err != nil {
		t.Fatal(err)
	}
	before := transcript(t, c, id)

	second := launch(t, db)
	err := second.waitExit(15 * time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("second agentd ended with %v, want a non-zero exit\n%s", err, second.log.String())
	}
	msg := second.log.String()
	for _, want := range []string{db, "process " + strconv.Itoa(first.cmd.Process.Pid), "--db"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("the refusal does not name %q:\n%s", want, msg)
		}
	}

	if _, err := drain(c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts("still here?")})); err != nil {
		t.Fatalf("the first agentd stopped serving: %v", err)
	}
	after := transcript(t, c, id)
	if len(after) != len(before)+2 {
		t.Fatalf("transcript has %d entries after one more prompt, want %d", len(after), len(before)+2)
	}
	for i := range before {
		if !proto.Equal(before[i], after[i]) {
			t.Fatalf("entry %d changed", i)
		}
	}
}

// Attach after agentd was killed in the middle of a run delivers the run's
// events up to its last durable batch, then the agent_end of the repair;
// a retry of the same request afterwards does the same, and appends
// nothing.
func TestAttachAfterKillAndRestart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "agentd.db")
	p := startProc(t, db)
	c := p.client()
	answer := &agentdv1.AssistantMessage{Content: texts(strings.Repeat("the default port is 3000. ", 200))}
	id := createSession(t, c, &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{answer}, TokensPerSecond: 200}})
	req := &agentdv1.PromptRequest{SessionId: id, Content: texts("port?"), RequestId: "req-kill", Detach: true}
	stream, err := c.Prompt(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	var live []*agentdv1.AgentEvent
	var firstDelta time.Time
	for firstDelta.IsZero() || time.Since(firstDelta) < time.Second {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("live stream: %v", err)
		}
		live = append(live, ev)
		if firstDelta.IsZero() && ev.GetMessageUpdate().GetTextDelta() != nil {
			firstDelta = time.Now()
		}
	}
	p.kill()

	p = startProc(t, db)
	c = p.client()
	for _, attempt := range []string{"Attach", "retried Prompt"} {
		var got []*agentdv1.AgentEvent
		if attempt == "Attach" {
			got, err = drain(c.Attach(testCtx(t), &agentdv1.AttachRequest{SessionId: id, RunId: live[0].GetRunId()}))
		} else {
			got, err = drain(c.Prompt(testCtx(t), req))
		}
		if err != nil {
			t.Fatalf("%s after the restart: %v", attempt, err)
		}
		last := got[len(got)-1]
		if end := last.GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
			t.Fatalf("%s: last event %v, want agent_end INTERRUPTED", attempt, last)
		}
		durable := got[:len(got)-1]
		// The repair's agent_end follows every seq that streamed, lost
		// or not, so an Attach after the last one a client saw gets it.
		if last.GetSeq() <= live[len(live)-1].GetSeq() || last.GetRunId() != live[0].GetRunId() {
			t.Fatalf("%s: agent_end has seq %d of run %s; %d events of run %s streamed live", attempt, last.GetSeq(), last.GetRunId(), live[len(live)-1].GetSeq(), live[0].GetRunId())
		}
		firstDeltaSeq := uint64(0)
		for i, ev := range durable {
			if ev.GetSeq() != uint64(i)+1 || ev.GetRunId() != live[0].GetRunId() {
				t.Fatalf("%s: event %d has seq %d of run %s", attempt, i, ev.GetSeq(), ev.GetRunId())
			}
			if firstDeltaSeq == 0 && ev.GetMessageUpdate().GetTextDelta() != nil {
				firstDeltaSeq = ev.GetSeq()
			}
		}
		// The deltas that streamed a second before the kill were stored in
		// a batch: the log reaches past the first of them.
		if firstDeltaSeq == 0 || len(durable) < int(firstDeltaSeq) {
			t.Fatalf("%s: %d durable events, the first delta (seq %d of %d seen live) is not among them", attempt, len(durable), firstDeltaSeq, len(live))
		}
		for i := range min(len(durable), len(live)) {
			if !proto.Equal(durable[i], live[i]) {
				t.Fatalf("%s: event %d differs from the one streamed live:\n%v\n%v", attempt, i+1, durable[i], live[i])
			}
		}
	}
	entries := transcript(t, c, id)
	if len(entries) != 1 || entries[0].GetMessage().GetUser() == nil {
		t.Fatalf("transcript after the restart: %v", entries)
	}
}

// Attach of a run that finished before agentd stopped replays all of it
// after the restart, exactly as it streamed.
func TestAttachFinishedRunAfterRestart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "agentd.db")
	p := startProc(t, db)
	c := p.client()
	id := createSession(t, c, &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	live, err := drain(c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts(strings.Repeat("echo me ", 300))}))
	if err != nil {
		t.Fatal(err)
	}
	p.kill()
	p = startProc(t, db)
	got, err := drain(p.client().Attach(testCtx(t), &agentdv1.AttachRequest{SessionId: id, RunId: live[0].GetRunId()}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(live) {
		t.Fatalf("%d events replayed, %d streamed", len(got), len(live))
	}
	for i := range live {
		if !proto.Equal(got[i], live[i]) {
			t.Fatalf("event %d differs:\n%v\n%v", i+1, got[i], live[i])
		}
	}
}

// heapInUse asks agentd to collect garbage and returns its heap in use
// and resident set, from the profile and metrics endpoints.
func heapInUse(t testing.TB, metricsAddr string) (heap, rss float64) {
	t.Helper()
	get := func(path string) string {
		resp, err := http.Get("http://" + metricsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	m := regexp.MustCompile(`# HeapInuse = (\d+)`).FindStringSubmatch(get("/debug/pprof/heap?debug=1&gc=1"))
	if m == nil {
		t.Fatal("no HeapInuse in the heap profile")
	}
	heap, _ = strconv.ParseFloat(m[1], 64)
	return heap, metric(t, metricsAddr, "process_resident_memory_bytes")
}

// metric reads the value of an unlabelled metric from agentd's /metrics.
func metric(t testing.TB, metricsAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s at %s", name, metricsAddr)
	return 0
}

// After 30 runs of 100,000 deltas each, agentd's heap is where it was
// before them: a finished run holds no events in memory.
func TestHeapAfterManyLongRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 3 million events")
	}
	p := startProc(t, filepath.Join(t.TempDir(), "agentd.db"), "--metrics-listen", "127.0.0.1:0")
	c := p.client()
	// A faux chunk is 3 to 5 tokens of 4 characters: 1.6 million
	// characters in two blocks (each within the 1 MiB limit) stream as
	// about 100,000 deltas.
	half := strings.Repeat("0123456789abcdef", 50_000)
	const runs = 30
	ids := make([]string, runs+1)
	for i := range ids {
		ids[i] = createSession(t, c, &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	}
	prompt := func(id string) int {
		// Detached and dropped: the run goes on with no one reading.
		ctx, cancel := context.WithCancel(testCtx(t))
		stream, err := c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: texts(half, half), Detach: true})
		if err == nil {
			_, err = stream.Recv()
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for {
			s, err := c.GetSession(testCtx(t), &agentdv1.GetSessionRequest{SessionId: id})
			if err != nil {
				t.Fatal(err)
			}
			if s.GetSession().GetState() == agentdv1.SessionState_SESSION_STATE_IDLE {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		entries := transcript(t, c, id)
		return len(entries[len(entries)-1].GetMessage().GetAssistant().GetContent()[0].GetText().GetText())
	}
	prompt(ids[0]) // warm up: pools, caches and code paths
	before, rssBefore := heapInUse(t, p.metrics)
	for _, id := range ids[1:] {
		if n := prompt(id); n != 2*len(half)+1 {
			t.Fatalf("answer of %d characters, want %d", n, 2*len(half)+1)
		}
	}
	after, rssAfter := heapInUse(t, p.metrics)
	// The context cache keeps the paths of the sessions that ran last, up
	// to its bound: that much is held on purpose.
	cached := metric(t, p.metrics, "agentd_context_cache_bytes")
	t.Logf("heap in use %.1f MiB before %d runs of ~100,000 deltas, %.1f MiB after (%.2fx), %.1f MiB of it cached contexts; RSS %.1f MiB before, %.1f MiB after",
		before/(1<<20), runs, after/(1<<20), after/before, cached/(1<<20), rssBefore/(1<<20), rssAfter/(1<<20))
	if cached > agent.DefaultContextCacheBytes {
		t.Fatalf("the context cache holds %.1f MiB, over its %d MiB bound", cached/(1<<20), agent.DefaultContextCacheBytes>>20)
	}
	if after-cached > 1.5*before {
		t.Fatalf("heap in use grew from %.1f to %.1f MiB over %d finished runs, %.1f MiB of it cached contexts", before/(1<<20), after/(1<<20), runs, cached/(1<<20))
	}
}

// A kill -9 after a compaction is stored and before the next message is
// leaves a consistent session: after the restart the context starts with
// the summary, ends with the prompt the interrupted run was answering, and
// Continue answers it.
func TestKillBetweenCompactionAndNextMessage(t *testing.T) {
	db := filepath.Join(t.TempDir(), "agentd.db")
	p := startProc(t, db)
	c := p.client()
	id := createSession(t, c, &agentdv1.SessionConfig{
		Compaction: &agentdv1.CompactionSettings{ReserveTokens: 1000, KeepRecentTokens: 400},
		Faux:       &agentdv1.FauxScript{Echo: true, ContextWindow: 3000, TokensPerSecond: 2000},
	})
	long := strings.Repeat("lorem ipsum ", 100) // 300 tokens
	var compacted *agentdv1.CompactionEnd
	var prompt string
	for i := 0; compacted == nil; i++ {
		if i == 10 {
			t.Fatal("no compaction in 10 prompts")
		}
		prompt = fmt.Sprintf("%d %s", i, long)
		stream, err := c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts(prompt), Detach: true})
		if err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := stream.Recv()
			if err != nil {
				break
			}
			if e := ev.GetCompactionEnd(); e != nil {
				compacted = e
			}
			if compacted != nil && ev.GetMessageUpdate().GetTextDelta() != nil {
				p.kill()
				break
			}
		}
	}
	if compacted.GetEntryId() == "" {
		t.Fatalf("compaction_end %v", compacted)
	}

	p = startProc(t, db)
	c = p.client()
	entries := transcript(t, c, id)
	last := entries[len(entries)-1]
	if last.GetId() != compacted.GetEntryId() || entries[len(entries)-2].GetMessage().GetUser() == nil {
		t.Fatalf("the transcript does not end with the prompt and the summary: %v", last)
	}
	ctx, err := c.GetContext(testCtx(t), &agentdv1.GetContextRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	msgs := ctx.GetContext().GetMessages()
	if !strings.HasPrefix(msgs[0].GetUser().GetContent()[0].GetText().GetText(), "The conversation history before this point was compacted") ||
		msgs[len(msgs)-1].GetUser().GetContent()[0].GetText().GetText() != prompt {
		t.Fatalf("context after the restart: first %v, last %v", msgs[0], msgs[len(msgs)-1])
	}
	evs, err := drain(c.Continue(testCtx(t), &agentdv1.ContinueRequest{SessionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	end := evs[len(evs)-1].GetAgentEnd()
	if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("Continue after the restart: %v %s", end.GetOutcome(), end.GetErrorMessage())
	}
}

// agentdCmd runs the agentd binary with args and returns its standard
// output.
func agentdCmd(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(agentdBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agentd %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// TestExportImportRoundTrip exports a 10,000-entry session with a
// compaction and branches with "agentd export", imports it with "agentd
// import", and exports the import: the two files are the same bytes, and
// the imported session has the same tree, leaf and context.
func TestExportImportRoundTrip(t *testing.T) {
	p := startProc(t, filepath.Join(t.TempDir(), "agentd.db"))
	c := p.client()
	ctx := testCtx(t)
	id := createSession(t, c, &agentdv1.SessionConfig{SystemPrompt: "export me", Faux: &agentdv1.FauxScript{Echo: true}})
	msg := func(i int) *agentdv1.AgentMessage {
		if i%2 == 0 {
			return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts(fmt.Sprintf("question %d", i))}}}
		}
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{
			Content: texts(fmt.Sprintf("answer %d", i)), StopReason: agentdv1.StopReason_STOP_REASON_STOP, Api: "faux", Provider: "faux", Model: "faux-1"}}}
	}
	var firstBatch []*agentdv1.Entry
	for b := 0; b < 10; b++ {
		var msgs []*agentdv1.AgentMessage
		for i := range 998 {
			msgs = append(msgs, msg(b*998+i))
		}
		resp, err := c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: id, Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		if b == 0 {
			firstBatch = resp.GetEntries()
		}
	}
	cs, err := c.Compact(ctx, &agentdv1.CompactRequest{SessionId: id, Summary: "the first 9,900 messages", KeepRecentTokens: 200})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drain(cs, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Navigate(ctx, &agentdv1.NavigateRequest{SessionId: id, EntryId: firstBatch[9].GetId(), Summary: "left the long branch"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetLabel(ctx, &agentdv1.SetLabelRequest{SessionId: id, EntryId: firstBatch[0].GetId(), Label: "start"}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	first := filepath.Join(dir, "first.agentd")
	agentdCmd(t, "export", "--addr", p.addr, "-o", first, id)
	imported := strings.TrimSpace(string(agentdCmd(t, "import", "--addr", p.addr, first)))
	second := filepath.Join(dir, "second.agentd")
	agentdCmd(t, "export", "--addr", p.addr, "-o", second, imported)
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("export → import → export differs: %d and %d bytes", len(a), len(b))
	}
	orig, err := c.GetContext(ctx, &agentdv1.GetContextRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	copyCtx, err := c.GetContext(ctx, &agentdv1.GetContextRequest{SessionId: imported})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(orig.GetContext(), copyCtx.GetContext()) {
		t.Fatal("the imported session's context differs")
	}
	tree, err := c.GetTree(ctx, &agentdv1.GetTreeRequest{SessionId: imported, PageSize: 1000})
	if err != nil || tree.GetNodes()[0].GetLabel() != "start" || tree.GetNodes()[0].GetId() != firstBatch[0].GetId() {
		t.Fatalf("imported tree: %v", err)
	}
	// A file whose entry names a parent that did not come before it is
	// refused, and leaves no session behind.
	bad := filepath.Join(dir, "bad.agentd")
	f, err := os.Create(bad)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []*agentdv1.SessionRecord{
		{Record: &agentdv1.SessionRecord_Header{Header: &agentdv1.SessionHeader{}}},
		{Record: &agentdv1.SessionRecord_Entry{Entry: &agentdv1.Entry{Id: "x", ParentId: "missing", Payload: &agentdv1.Entry_Message{Message: msg(0)}}}},
	} {
		if _, err := protodelim.MarshalTo(f, rec); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	before, _ := c.ListSessions(ctx, &agentdv1.ListSessionsRequest{})
	cmd := exec.Command(agentdBinary(t), "import", "--addr", p.addr, bad)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "records[1].entry.parent_id") {
		t.Fatalf("import of a bad file: %v\n%s", err, out)
	}
	after, _ := c.ListSessions(ctx, &agentdv1.ListSessionsRequest{})
	if len(after.GetSessions()) != len(before.GetSessions()) {
		t.Fatal("a refused import left a session behind")
	}
}

// agentd --help and --version succeed and say what agentd is.
func TestHelpAndVersion(t *testing.T) {
	cmd := exec.Command(agentdBinary(t), "--help")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "agentd runs LLM agent loops behind a gRPC API") || !strings.Contains(string(out), "-listen") {
		t.Fatalf("agentd --help: %v\n%s", err, out)
	}
	if out := agentdCmd(t, "--version"); !strings.HasPrefix(string(out), "agentd ") {
		t.Fatalf("agentd --version: %q", out)
	}
}
