package agentloop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
)

func TestDefaultConvertToLLM(t *testing.T) {
	ts := timestamppb.New(time.Unix(1700000001, 0))
	code := func(n int32) *int32 { return &n }
	payload, _ := anypb.New(wrapperspb.String("app data"))
	am := func(m proto.Message) *agentdv1.AgentMessage {
		switch x := m.(type) {
		case *agentdv1.ApprovalNotice:
			return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ApprovalNotice{ApprovalNotice: x}}
		case *agentdv1.BashExecution:
			return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_BashExecution{BashExecution: x}}
		case *agentdv1.CustomMessage:
			return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: x}}
		case *agentdv1.BranchSummary:
			return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_BranchSummary{BranchSummary: x}}
		case *agentdv1.CompactionSummary:
			return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_CompactionSummary{CompactionSummary: x}}
		case *agentdv1.Extension:
			return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Extension{Extension: x}}
		}
		t.Fatalf("unexpected %T", m)
		return nil
	}
	tests := []struct {
		name string
		in   *agentdv1.AgentMessage
		want string // user text; "" means dropped
	}{
		{"approval allowed, in context", am(&agentdv1.ApprovalNotice{ToolCallId: "c1", ToolName: "edit_file", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED, IncludeInModelContext: true, Timestamp: ts}),
			"The user allowed the tool call edit_file (c1)."},
		{"approval denied with reason", am(&agentdv1.ApprovalNotice{ToolCallId: "c1", ToolName: "edit_file", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED, Reason: "not now", IncludeInModelContext: true, Timestamp: ts}),
			"The user denied the tool call edit_file (c1). Reason: not now"},
		{"approval visible in UI only", am(&agentdv1.ApprovalNotice{ToolCallId: "c1", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED, VisibleInUi: true}), ""},
		{"bash with output and exit code", am(&agentdv1.BashExecution{Command: "ls", Output: "a\nb", ExitCode: code(2), IncludeInModelContext: true, Timestamp: ts}),
			"Ran `ls`\n```\na\nb\n```\n\nCommand exited with code 2"},
		{"bash no output, exit 0, truncated", am(&agentdv1.BashExecution{Command: "true", ExitCode: code(0), Truncated: true, FullOutputPath: "/tmp/o", IncludeInModelContext: true, Timestamp: ts}),
			"Ran `true`\n(no output)\n\n[Output truncated. Full output: /tmp/o]"},
		{"bash cancelled", am(&agentdv1.BashExecution{Command: "sleep 9", Output: "x", Cancelled: true, IncludeInModelContext: true, Timestamp: ts}),
			"Ran `sleep 9`\n```\nx\n```\n\n(command cancelled)"},
		{"bash excluded", am(&agentdv1.BashExecution{Command: "ls", VisibleInUi: true}), ""},
		{"custom hidden from UI but in context", am(&agentdv1.CustomMessage{CustomType: "job", Content: []*agentdv1.ContentBlock{faux.Text("job done")}, VisibleInUi: false, IncludeInModelContext: true, Timestamp: ts}),
			"job done"},
		{"custom visible in UI, not in context", am(&agentdv1.CustomMessage{CustomType: "job", Content: []*agentdv1.ContentBlock{faux.Text("job done")}, VisibleInUi: true}), ""},
		{"extension in context", am(&agentdv1.Extension{Payload: payload, ModelContent: []*agentdv1.ContentBlock{faux.Text("ext says")}, IncludeInModelContext: true, Timestamp: ts}), "ext says"},
		{"extension not in context", am(&agentdv1.Extension{Payload: payload, ModelContent: []*agentdv1.ContentBlock{faux.Text("ext says")}, VisibleInUi: true}), ""},
		{"branch summary", am(&agentdv1.BranchSummary{Summary: "tried X", Timestamp: ts}),
			"The following is a summary of a branch that this conversation came back from:\n\n<summary>\ntried X</summary>"},
		{"compaction summary", am(&agentdv1.CompactionSummary{Summary: "we did Y", Timestamp: ts}),
			"The conversation history before this point was compacted into the following summary:\n\n<summary>\nwe did Y\n</summary>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.Clone(tt.in)
			out := agentloop.DefaultConvertToLLM([]*agentdv1.AgentMessage{tt.in})
			if !proto.Equal(before, tt.in) {
				t.Error("input mutated")
			}
			if tt.want == "" {
				if len(out) != 0 {
					t.Fatalf("want dropped, got %v", out)
				}
				return
			}
			if len(out) != 1 || out[0].GetUser() == nil {
				t.Fatalf("got %v", out)
			}
			if got := blockText(out[0].GetUser().Content); got != tt.want {
				t.Errorf("text =\n%q\nwant\n%q", got, tt.want)
			}
			if !proto.Equal(out[0].GetUser().Timestamp, ts) {
				t.Errorf("timestamp not kept: %v", out[0].GetUser().Timestamp)
			}
		})
	}
	// LLM messages pass through by identity.
	u, a := userMsg("u"), &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: faux.Message(faux.Text("a"))}}
	out := agentloop.DefaultConvertToLLM([]*agentdv1.AgentMessage{u, a})
	if out[0].GetUser() != u.GetUser() || out[1].GetAssistant() != a.GetAssistant() {
		t.Error("user/assistant not passed through")
	}
}

// A transform that tries to mutate its input cannot touch the transcript;
// what it returns is the model's view of that one request only.
func TestTransformCannotMutateTranscript(t *testing.T) {
	history := []*agentdv1.AgentMessage{userMsg("original"),
		{Kind: &agentdv1.AgentMessage_Assistant{Assistant: faux.Message(faux.Text("answer"))}}}
	snapshot := make([]*agentdv1.AgentMessage, len(history))
	for i, m := range history {
		snapshot[i] = proto.Clone(m).(*agentdv1.AgentMessage)
	}
	p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.ToolCall("1", "read_file", map[string]any{"path": "x"}))), faux.Reply(faux.Message(faux.Text("ok"))))
	cfg := cfgFor(p)
	cfg.TransformContext = func(_ context.Context, msgs []*agentdv1.AgentMessage) ([]*agentdv1.AgentMessage, error) {
		for _, m := range msgs {
			if u := m.GetUser(); u != nil {
				u.Content[0].GetText().Text = "HACKED"
			}
			if a := m.GetAssistant(); a != nil {
				a.Content = nil
			}
		}
		msgs[0] = userMsg("replaced in slice")
		return msgs[1:], nil
	}
	cfg.ConvertToLLM = func(_ context.Context, msgs []*agentdv1.AgentMessage) ([]*agentdv1.Message, error) {
		for _, m := range msgs {
			if tr := m.GetToolResult(); tr != nil {
				tr.IsError = true
				tr.Content = nil
			}
		}
		return agentloop.DefaultConvertToLLM(msgs), nil
	}
	rec := &recorder{}
	state := agentloop.State{Messages: history, Tools: toolSet(t, echoTool(t))}
	newMsgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("new prompt")}, state, cfg, rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	for i := range history {
		if !proto.Equal(history[i], snapshot[i]) {
			t.Errorf("history[%d] mutated: %v", i, history[i])
		}
	}
	if got := blockText(newMsgs[0].GetUser().Content); got != "new prompt" {
		t.Errorf("stored prompt = %q", got)
	}
	tr := newMsgs[2].GetToolResult()
	if tr.IsError || blockText(tr.Content) != "content of x" {
		t.Errorf("stored tool result mutated: %v", tr)
	}
	// ...while the model saw the transformed view.
	first := p.Contexts()[0]
	if len(first.Messages) != 2 || first.Messages[0].GetAssistant() == nil || blockText(first.Messages[1].GetUser().Content) != "HACKED" {
		t.Errorf("model view = %v", first.Messages)
	}
	for _, ev := range rec.all() {
		if ev.GetError() != nil {
			t.Errorf("unexpected error event %v", ev)
		}
	}
}

// Transform and convert failures fall back to their input and are reported
// as non-fatal error events; the run goes on.
func TestTransformFailuresFallBack(t *testing.T) {
	hidden := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{CustomType: "x", Content: []*agentdv1.ContentBlock{faux.Text("hidden")}}}}
	tests := []struct {
		name      string
		transform agentloop.TransformFunc
		convert   agentloop.ConvertFunc
		stage     string
	}{
		{name: "transform panics", stage: "transform_context",
			transform: func(context.Context, []*agentdv1.AgentMessage) ([]*agentdv1.AgentMessage, error) { panic("oops") }},
		{name: "transform errors", stage: "transform_context",
			transform: func(context.Context, []*agentdv1.AgentMessage) ([]*agentdv1.AgentMessage, error) {
				return nil, errors.New("bad")
			}},
		{name: "transform returns a nil message", stage: "transform_context",
			transform: func(context.Context, []*agentdv1.AgentMessage) ([]*agentdv1.AgentMessage, error) {
				return []*agentdv1.AgentMessage{nil}, nil
			}},
		{name: "convert panics", stage: "convert_to_llm",
			convert: func(context.Context, []*agentdv1.AgentMessage) ([]*agentdv1.Message, error) { panic("oops") }},
		{name: "convert errors", stage: "convert_to_llm",
			convert: func(context.Context, []*agentdv1.AgentMessage) ([]*agentdv1.Message, error) {
				return nil, errors.New("bad")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.Text("fine"))))
			cfg := cfgFor(p)
			cfg.TransformContext, cfg.ConvertToLLM = tt.transform, tt.convert
			rec := &recorder{}
			state := agentloop.State{Messages: []*agentdv1.AgentMessage{userMsg("a"), hidden}}
			if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("b")}, state, cfg, rec.sink); err != nil {
				t.Fatal(err)
			}
			var errs []*agentdv1.AgentError
			for _, ev := range rec.all() {
				if e := ev.GetError(); e != nil {
					errs = append(errs, e)
				}
			}
			if len(errs) != 1 || errs[0].Stage != tt.stage || errs[0].Fatal || errs[0].Message == "" {
				t.Fatalf("error events = %v", errs)
			}
			// Fallback = the untransformed input through the default conversion.
			if got := p.Contexts()[0].Messages; len(got) != 2 || blockText(got[1].GetUser().Content) != "b" {
				t.Errorf("model saw %v", got)
			}
			if ends := rec.agentEnds(); len(ends) != 1 || ends[0].Outcome != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
				t.Errorf("agent_end = %v", ends)
			}
		})
	}
}
