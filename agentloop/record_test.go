package agentloop_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
)

func TestToolsEmitRecordAndFailWithDetails(t *testing.T) {
	notice := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{
		CustomType: "decision", Content: []*agentdv1.ContentBlock{faux.Text("allowed")}, IncludeInModelContext: true}}}
	exit, _ := structpb.NewValue(map[string]any{"exit_code": 2.0})
	gated := newTool(t, "gated", `{"type":"object"}`, func(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
		if err := call.Run.Emit(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ApprovalRequested{
			ApprovalRequested: &agentdv1.ApprovalRequested{ToolCallId: call.ID}}}); err != nil {
			return agentloop.Result{}, err
		}
		if err := call.Run.Record(notice); err != nil {
			return agentloop.Result{}, err
		}
		return agentloop.Result{Content: []*agentdv1.ContentBlock{faux.Text("partial output")}, IsError: true}, nil
	})
	failing := newTool(t, "failing", `{"type":"object"}`, func(context.Context, agentloop.Call) (agentloop.Result, error) {
		// A failure with details for UIs is an error result, not an error.
		return agentloop.Result{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: "command failed with exit code 2"}}}}, Details: exit, IsError: true}, nil
	})
	p := faux.New(faux.Options{},
		faux.Reply(faux.Message(faux.ToolCall("c1", "gated", nil), faux.ToolCall("c2", "failing", nil))),
		faux.Reply(faux.Message(faux.Text("done"))),
	)
	rec := &recorder{}
	state := agentloop.State{Tools: toolSet(t, gated, failing)}
	cfg := cfgFor(p)
	cfg.ToolExecution = agentdv1.ToolExecutionMode_TOOL_EXECUTION_MODE_SEQUENTIAL
	msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, state, cfg, rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	trace := rec.trace()
	start := 0
	for i, s := range trace {
		if s == "tool_start:c1" {
			start = i
		}
	}
	if rec.all()[start+1].GetApprovalRequested().GetToolCallId() != "c1" {
		t.Fatalf("the emitted event is not right after tool_start: %v", trace)
	}
	equalTrace(t, trace[start+2:start+9], []string{
		"message_start:custom", "message_end:custom", "tool_end:c1",
		"message_start:toolResult", "message_end:toolResult", "tool_start:c2", "tool_end:c2",
	})
	var roles []string
	for _, m := range msgs {
		roles = append(roles, role(m))
	}
	if got := roles; len(got) != 6 || got[2] != "custom" || got[3] != "toolResult" || got[4] != "toolResult" {
		t.Fatalf("run messages %v: the recorded message must precede the batch's results", got)
	}
	r1, r2 := msgs[3].GetToolResult(), msgs[4].GetToolResult()
	if !r1.GetIsError() || blockText(r1.GetContent()) != "partial output" {
		t.Errorf("IsError result lost its content: %v", r1)
	}
	if !r2.GetIsError() || r2.GetDetails().GetStructValue().GetFields()["exit_code"].GetNumberValue() != 2 ||
		blockText(r2.GetContent()) != "command failed with exit code 2" {
		t.Errorf("failing tool's details lost: %v", r2)
	}
	// The model saw the recorded message in its next call, after the tool
	// results, which must follow the call they answer (provider.Replay).
	second := p.Contexts()[1].GetMessages()
	if len(second) != 5 || second[2].GetToolResult() == nil || second[3].GetToolResult() == nil ||
		blockText(second[4].GetUser().GetContent()) != "allowed" {
		t.Errorf("second model call saw %v", second)
	}
}
