package agentloop_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
)

func filter(trace []string, prefixes ...string) []string {
	var out []string
	for _, s := range trace {
		for _, p := range prefixes {
			if strings.HasPrefix(s, p) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// Rule 6: parallel mode runs calls concurrently (a cannot finish before b
// ended, which would deadlock if they ran one after another), reports
// tool_execution_end in completion order and results in call order.
func TestParallelToolExecution(t *testing.T) {
	bEnded := make(chan struct{})
	rec := &recorder{}
	rec.hook = func(ev *agentdv1.AgentEvent) error {
		if describe(ev) == "tool_end:b" {
			close(bEnded)
		}
		return nil
	}
	a := newTool(t, "slow", `{"type":"object"}`, func(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
		call.Update([]*agentdv1.ContentBlock{faux.Text("waiting")}, nil)
		select {
		case <-bEnded:
		case <-ctx.Done():
			return agentloop.Result{}, ctx.Err()
		}
		return textResult("slow done"), nil
	})
	b := newTool(t, "fast", `{"type":"object"}`, func(context.Context, agentloop.Call) (agentloop.Result, error) {
		return textResult("fast done"), nil
	})
	p := faux.New(faux.Options{},
		faux.Reply(faux.Message(faux.ToolCall("a", "slow", nil), faux.ToolCall("b", "fast", nil))),
		faux.Reply(faux.Message(faux.Text("ok"))))
	if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, a, b)}, cfgFor(p), rec.sink); err != nil {
		t.Fatal(err)
	}
	tr := rec.trace()
	got := filter(tr, "tool_start", "tool_end", "message_end:toolResult", "turn_end")
	want := []string{"tool_start:a", "tool_start:b", "tool_end:b", "tool_end:a", "message_end:toolResult", "message_end:toolResult", "turn_end:2", "turn_end:0"}
	equalTrace(t, got, want)
	// a's progress update lies between its start and its end.
	pos := map[string]int{}
	for i, s := range tr {
		pos[s] = i
	}
	if u, ok := pos["tool_update:a"]; !ok || u < pos["tool_start:b"] || u > pos["tool_end:a"] {
		t.Errorf("tool_update:a misplaced in %v", tr)
	}
	res := rec.toolResults()
	if res[0].ToolCallId != "a" || res[1].ToolCallId != "b" {
		t.Errorf("results not in call order: %s, %s", res[0].ToolCallId, res[1].ToolCallId)
	}
}

// Sequential mode (by config or forced by one tool's flag) runs one call
// after another, each followed by its result message.
func TestSequentialToolExecution(t *testing.T) {
	for _, tt := range []struct {
		name      string
		mode      agentdv1.ToolExecutionMode
		seqFlagOn bool
	}{
		{"config sequential", agentdv1.ToolExecutionMode_TOOL_EXECUTION_MODE_SEQUENTIAL, false},
		{"tool forces sequential", agentdv1.ToolExecutionMode_TOOL_EXECUTION_MODE_PARALLEL, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var running, overlaps atomic.Int32
			fn := func(context.Context, agentloop.Call) (agentloop.Result, error) {
				if running.Add(1) > 1 {
					overlaps.Add(1)
				}
				defer running.Add(-1)
				return textResult("ok"), nil
			}
			a := newTool(t, "a", `{"type":"object"}`, fn)
			b := agentloop.FuncTool{Def: &agentdv1.Tool{Name: "b", Sequential: tt.seqFlagOn, Parameters: mustStruct(t, `{"type":"object"}`)}, Fn: fn}
			p := faux.New(faux.Options{},
				faux.Reply(faux.Message(faux.ToolCall("1", "a", nil), faux.ToolCall("2", "b", nil), faux.ToolCall("3", "a", nil))),
				faux.Reply(faux.Message(faux.Text("ok"))))
			cfg := cfgFor(p)
			cfg.ToolExecution = tt.mode
			rec := &recorder{}
			if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, a, b)}, cfg, rec.sink); err != nil {
				t.Fatal(err)
			}
			equalTrace(t, filter(rec.trace(), "tool_", "message_end:toolResult"), []string{
				"tool_start:1", "tool_end:1", "message_end:toolResult",
				"tool_start:2", "tool_end:2", "message_end:toolResult",
				"tool_start:3", "tool_end:3", "message_end:toolResult"})
			if overlaps.Load() != 0 {
				t.Error("tools overlapped")
			}
		})
	}
}

// Rule 7: steering pushed while tools run waits for the whole batch, then
// starts the next turn before the next model call.
func TestSteeringAfterToolBatch(t *testing.T) {
	steering := agentloop.NewQueue(agentdv1.QueueMode_QUEUE_MODE_ONE_AT_A_TIME)
	pushing := newTool(t, "a", `{"type":"object"}`, func(context.Context, agentloop.Call) (agentloop.Result, error) {
		steering.Push(userMsg("stop, use b instead"))
		return textResult("a done"), nil
	})
	second := newTool(t, "b", `{"type":"object"}`, func(context.Context, agentloop.Call) (agentloop.Result, error) {
		return textResult("b done"), nil
	})
	p := faux.New(faux.Options{},
		faux.Reply(faux.Message(faux.ToolCall("1", "a", nil), faux.ToolCall("2", "b", nil))),
		faux.Reply(faux.Message(faux.Text("ok, switching"))))
	cfg := cfgFor(p)
	cfg.Steering = steering
	rec := &recorder{}
	if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, pushing, second)}, cfg, rec.sink); err != nil {
		t.Fatal(err)
	}
	equalTrace(t, filter(rec.trace(), "message_end", "turn_", "queue_update", "agent_end"), []string{
		"turn_start", "message_end:user", "message_end:assistant",
		"message_end:toolResult", "message_end:toolResult", "turn_end:2",
		"turn_start", "queue_update", "message_end:user", "message_end:assistant", "turn_end:0", "agent_end:COMPLETED"})
	ctx2 := p.Contexts()[1]
	last := ctx2.Messages[len(ctx2.Messages)-1]
	if blockText(last.GetUser().GetContent()) != "stop, use b instead" {
		t.Errorf("second call's last message = %v", last)
	}
	if steering.Len() != 0 {
		t.Error("steering not drained")
	}
}

// Follow-ups continue a run that would otherwise stop.
func TestFollowUpContinuesRun(t *testing.T) {
	followUp := agentloop.NewQueue(agentdv1.QueueMode_QUEUE_MODE_ONE_AT_A_TIME)
	p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.Text("first"))), faux.Reply(faux.Message(faux.Text("second"))))
	cfg := cfgFor(p)
	cfg.FollowUp = followUp
	rec := &recorder{}
	pushed := false
	rec.hook = func(ev *agentdv1.AgentEvent) error {
		if !pushed && describe(ev) == "message_start:assistant" {
			pushed = true
			followUp.Push(userMsg("and then?"))
		}
		return nil
	}
	msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{}, cfg, rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	equalTrace(t, filter(rec.trace(), "message_end", "turn_", "queue_update", "agent_end"), []string{
		"turn_start", "message_end:user", "message_end:assistant", "turn_end:0",
		"turn_start", "queue_update", "message_end:user", "message_end:assistant", "turn_end:0", "agent_end:COMPLETED"})
	if len(msgs) != 4 || blockText(msgs[3].GetAssistant().Content) != "second" {
		t.Errorf("messages = %v", msgs)
	}
}

// Queue modes: one-at-a-time delivers one message per turn, all delivers
// every queued message at once.
func TestQueueModes(t *testing.T) {
	for _, tt := range []struct {
		mode       agentdv1.QueueMode
		wantCalls  int
		wantTurns  int
		firstUsers int
	}{
		{agentdv1.QueueMode_QUEUE_MODE_ONE_AT_A_TIME, 2, 2, 2},
		{agentdv1.QueueMode_QUEUE_MODE_UNSPECIFIED, 2, 2, 2},
		{agentdv1.QueueMode_QUEUE_MODE_ALL, 1, 1, 3},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			q := agentloop.NewQueue(tt.mode)
			q.Push(userMsg("s1"), userMsg("s2"))
			p := faux.New(faux.Options{Echo: true})
			cfg := cfgFor(p)
			cfg.Steering = q
			rec := &recorder{}
			if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{}, cfg, rec.sink); err != nil {
				t.Fatal(err)
			}
			if p.Calls() != tt.wantCalls {
				t.Errorf("model calls = %d, want %d", p.Calls(), tt.wantCalls)
			}
			if n := len(filter(rec.trace(), "turn_start")); n != tt.wantTurns {
				t.Errorf("turns = %d, want %d", n, tt.wantTurns)
			}
			if n := len(p.Contexts()[0].Messages); n != tt.firstUsers {
				t.Errorf("first call saw %d messages, want %d", n, tt.firstUsers)
			}
		})
	}
}

// Rule 9: Continue's preconditions and what it runs.
func TestContinue(t *testing.T) {
	assistant := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: faux.Message(faux.Text("hi"))}}
	hiddenCustom := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{CustomType: "note", VisibleInUi: true, Content: []*agentdv1.ContentBlock{faux.Text("n")}}}}
	toolResult := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{ToolCallId: "c", ToolName: "t", Content: []*agentdv1.ContentBlock{faux.Text("r")}}}}
	tests := []struct {
		name      string
		msgs      []*agentdv1.AgentMessage
		steer     bool
		followUp  bool
		wantErr   string
		wantTrace []string
	}{
		{name: "empty", wantErr: agentloop.ErrTextNoMessages},
		{name: "only invisible messages", msgs: []*agentdv1.AgentMessage{hiddenCustom}, wantErr: agentloop.ErrTextNoMessages},
		{name: "assistant last", msgs: []*agentdv1.AgentMessage{userMsg("a"), assistant}, wantErr: agentloop.ErrTextFromAssistant},
		{name: "assistant last behind a hidden custom message", msgs: []*agentdv1.AgentMessage{userMsg("a"), assistant, hiddenCustom}, wantErr: agentloop.ErrTextFromAssistant},
		{name: "user last", msgs: []*agentdv1.AgentMessage{userMsg("a")},
			wantTrace: []string{"agent_start", "turn_start", "message_start:assistant", "message_end:assistant", "turn_end:0", "agent_end:COMPLETED"}},
		{name: "tool result last", msgs: []*agentdv1.AgentMessage{userMsg("a"), toolResult},
			wantTrace: []string{"agent_start", "turn_start", "message_start:assistant", "message_end:assistant", "turn_end:0", "agent_end:COMPLETED"}},
		{name: "assistant last with steering queued", msgs: []*agentdv1.AgentMessage{userMsg("a"), assistant}, steer: true,
			wantTrace: []string{"agent_start", "turn_start", "queue_update", "message_start:user", "message_end:user", "message_start:assistant", "message_end:assistant", "turn_end:0", "agent_end:COMPLETED"}},
		{name: "assistant last with follow-up queued", msgs: []*agentdv1.AgentMessage{userMsg("a"), assistant}, followUp: true,
			wantTrace: []string{"agent_start", "turn_start", "queue_update", "message_start:user", "message_end:user", "message_start:assistant", "message_end:assistant", "turn_end:0", "agent_end:COMPLETED"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := faux.New(faux.Options{}, faux.Reply(faux.Message()))
			cfg := cfgFor(p)
			cfg.Steering, cfg.FollowUp = agentloop.NewQueue(0), agentloop.NewQueue(0)
			if tt.steer {
				cfg.Steering.Push(userMsg("steer"))
			}
			if tt.followUp {
				cfg.FollowUp.Push(userMsg("follow"))
			}
			rec := &recorder{}
			_, err := agentloop.Continue(context.Background(), agentloop.State{Messages: tt.msgs}, cfg, rec.sink)
			if tt.wantErr != "" {
				var pe *agentloop.PreconditionError
				if !errors.As(err, &pe) || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if len(rec.all()) != 0 {
					t.Errorf("events emitted on refusal: %v", rec.trace())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			equalTrace(t, rec.trace(), tt.wantTrace)
		})
	}
}

// Abort while the model streams: the message ends ABORTED with what was
// streamed, and the run ends ABORTED.
func TestAbortDuringStreaming(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := faux.New(faux.Options{MinTokenSize: 1, MaxTokenSize: 1}, faux.Reply(faux.Message(faux.Text("aaaabbbbccccdddd"))))
	rec := &recorder{}
	deltas := 0
	rec.hook = func(ev *agentdv1.AgentEvent) error {
		if ev.GetMessageUpdate().GetTextDelta() != nil {
			deltas++
			if deltas == 2 {
				cancel()
			}
		}
		return nil
	}
	state := agentloop.State{Messages: []*agentdv1.AgentMessage{userMsg("earlier")}}
	msgs, err := agentloop.Run(ctx, []*agentdv1.AgentMessage{userMsg("go")}, state, cfgFor(p), rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	a := msgs[1].GetAssistant()
	if a.StopReason != agentdv1.StopReason_STOP_REASON_ABORTED || a.ErrorMessage != "Request was aborted" || blockText(a.Content) != "aaaabbbb" {
		t.Fatalf("aborted message = %v", a)
	}
	tr := rec.trace()
	if got := strings.Join(tr[len(tr)-3:], " "); got != "message_end:assistant turn_end:0 agent_end:ABORTED" {
		t.Fatalf("tail = %v", tr)
	}
	if len(rec.agentEnds()) != 1 {
		t.Error("not exactly one agent_end")
	}
}

// Abort while tools run: running tools and a blocking BeforeToolCall get the
// cancelled context, completed messages stay, the run ends ABORTED.
func TestAbortDuringTools(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	blocking := newTool(t, "wait", `{"type":"object"}`, func(ctx context.Context, _ agentloop.Call) (agentloop.Result, error) {
		close(started)
		<-ctx.Done()
		return agentloop.Result{}, ctx.Err()
	})
	p := faux.New(faux.Options{},
		faux.Reply(faux.Message(faux.ToolCall("1", "wait", nil))),
		faux.Reply(faux.Message(faux.Text("never streamed"))))
	go func() {
		<-started
		cancel()
	}()
	rec := &recorder{}
	msgs, err := agentloop.Run(ctx, []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, blocking)}, cfgFor(p), rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	if r := msgs[2].GetToolResult(); !r.IsError || blockText(r.Content) != "context canceled" {
		t.Errorf("tool result = %v", r)
	}
	last := msgs[len(msgs)-1].GetAssistant()
	if last.StopReason != agentdv1.StopReason_STOP_REASON_ABORTED || len(last.Content) != 0 {
		t.Errorf("last = %v", last)
	}
	if ends := rec.agentEnds(); len(ends) != 1 || ends[0].Outcome != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Errorf("agent_end = %v", ends)
	}
}

func TestAbortWhileBeforeToolCallBlocks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan struct{})
	p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.ToolCall("1", "read_file", map[string]any{"path": "x"}))))
	cfg := cfgFor(p)
	cfg.BeforeToolCall = func(ctx context.Context, _ agentloop.ToolCallInfo) (agentloop.BeforeDecision, error) {
		close(waiting) // an approval gate waiting for a person
		<-ctx.Done()
		return agentloop.BeforeDecision{}, ctx.Err()
	}
	go func() {
		<-waiting
		cancel()
	}()
	rec := &recorder{}
	if _, err := agentloop.Run(ctx, []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, echoTool(t))}, cfg, rec.sink); err != nil {
		t.Fatal(err)
	}
	if r := rec.toolResults(); len(r) != 1 || blockText(r[0].Content) != "context canceled" {
		t.Errorf("results = %v", r)
	}
	if ends := rec.agentEnds(); len(ends) != 1 || ends[0].Outcome != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Errorf("agent_end = %v", ends)
	}
}

// A sink failure while tools run cancels them and still ends the run once.
func TestSinkFailureDuringParallelTools(t *testing.T) {
	rec := &recorder{}
	rec.hook = func(ev *agentdv1.AgentEvent) error {
		if describe(ev) == "tool_update:1" {
			return errors.New("store failed")
		}
		return nil
	}
	tool := newTool(t, "w", `{"type":"object"}`, func(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
		call.Update(nil, structpb.NewNumberValue(1))
		<-ctx.Done() // cancelled by the loop because the sink failed
		return agentloop.Result{}, ctx.Err()
	})
	p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.ToolCall("1", "w", nil), faux.ToolCall("2", "w", nil))))
	_, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, tool)}, cfgFor(p), rec.sink)
	if err == nil || !strings.Contains(err.Error(), "store failed") {
		t.Fatalf("err = %v", err)
	}
	tr := rec.trace()
	if tr[len(tr)-1] != "agent_end:ERROR" || len(rec.agentEnds()) != 1 {
		t.Fatalf("trace = %v", tr)
	}
}

// BeforeToolCall runs in each call's own goroutine: in parallel mode a call
// whose hook waits (for a person's approval) does not hold back the other
// calls of its batch, and the hook reports through the run's Scope.
func TestBeforeToolCallRunsPerCall(t *testing.T) {
	bDone := make(chan struct{})
	tool := newTool(t, "t", `{"type":"object"}`, func(_ context.Context, call agentloop.Call) (agentloop.Result, error) {
		if call.ID == "b" {
			close(bDone)
		}
		return textResult("ran " + call.ID), nil
	})
	p := faux.New(faux.Options{},
		faux.Reply(faux.Message(faux.ToolCall("a", "t", nil), faux.ToolCall("b", "t", nil))),
		faux.Reply(faux.Message(faux.Text("done"))))
	cfg := cfgFor(p)
	rec := &recorder{}
	cfg.BeforeToolCall = func(ctx context.Context, info agentloop.ToolCallInfo) (agentloop.BeforeDecision, error) {
		if info.ToolCall.GetId() != "a" {
			return agentloop.BeforeDecision{}, nil
		}
		if err := info.Run.Emit(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ApprovalRequested{ApprovalRequested: &agentdv1.ApprovalRequested{ToolCallId: "a"}}}); err != nil {
			return agentloop.BeforeDecision{}, err
		}
		select { // the approval of a waits until b has run
		case <-bDone:
		case <-time.After(5 * time.Second):
			return agentloop.BeforeDecision{Block: true, Reason: "b never ran while a waited"}, nil
		}
		// b's tool function has returned or is returning: wait for its
		// tool_execution_end, so the order checked below is the loop's,
		// not the scheduler's.
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(strings.Join(rec.trace(), " "), "tool_end:b"); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return agentloop.BeforeDecision{Block: true, Reason: "b's end never came while a waited"}, nil
			}
		}
		notice := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{CustomType: "approved", Content: []*agentdv1.ContentBlock{faux.Text("a approved")}}}}
		return agentloop.BeforeDecision{}, info.Run.Record(notice)
	}
	msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, tool)}, cfg, rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range msgs {
		roles = append(roles, role(m))
	}
	if got := strings.Join(roles, " "); got != "user assistant custom toolResult toolResult assistant" {
		t.Fatalf("run messages %s", got)
	}
	for i, r := range rec.toolResults() {
		if r.GetIsError() || blockText(r.GetContent()) != "ran "+[]string{"a", "b"}[i] {
			t.Fatalf("result %d: %v", i, r)
		}
	}
	trace := strings.Join(rec.trace(), " ")
	if !strings.Contains(trace, "tool_start:a tool_start:b") || !strings.Contains(trace, "message_start:custom message_end:custom tool_end:a") ||
		strings.Index(trace, "tool_end:b") > strings.Index(trace, "message_start:custom") {
		t.Fatalf("b must finish while a waits for its hook: %s", trace)
	}
}
