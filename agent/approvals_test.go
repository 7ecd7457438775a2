package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// jotTool is a mutating server tool (it asks by default) with a typed
// argument; it sends each text it jots on wrote.
func jotTool(t testing.TB, wrote chan<- string) agentloop.Tool {
	return agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "jot", Description: "Jot a text down.", Parameters: mustStruct(t, map[string]any{
			"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}})},
		Fn: func(_ context.Context, call agentloop.Call) (agentloop.Result, error) {
			wrote <- call.Args.GetFields()["text"].GetStringValue()
			return agentloop.Result{Content: texts("jotted")}, nil
		},
	}
}

// ResolveApproval reaching the replica that does not run the session is
// relayed with its scope, edited arguments and rule: a refusal of the
// edit comes back naming the field, the rule stored by the owner comes
// back in the answer, and it decides the run's next call there.
func TestReplicasRelayApprovalScopes(t *testing.T) {
	wrote := make(chan string, 8)
	r := newReplicas(t, jotTool(t, wrote))
	cfg := script(toolCall(t, "c1", "jot", map[string]any{"text": "model"}), toolCall(t, "c2", "jot", map[string]any{"text": "again"}), text("done"))
	cfg.Tools = []*agentdv1.Tool{{Name: "jot"}}
	id := r.session(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runID, err := r.a.Start(ctx, agent.StartRequest{SessionID: id, Prompt: user("go")})
	if err != nil {
		t.Fatal(err)
	}
	var rule *agentdv1.ApprovalRule
	asked := 0
	err = r.b.Follow(ctx, id, runID, 0, agent.FollowOptions{}, func(e agent.Event) error {
		ev, err := e.Decode()
		if err != nil || ev.GetApprovalRequested() == nil {
			return err
		}
		asked++
		_, err = r.b.ResolveApproval(ctx, id, "c1", agent.Approval{Allowed: true, Arguments: mustStruct(t, map[string]any{"text": []any{"not", "a", "string"}})})
		wantField(t, err, "arguments.text")
		_, err = r.b.ResolveApproval(ctx, id, "c1", agent.Approval{Allowed: true, Scope: agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION,
			Rule: &agentdv1.ApprovalRule{ToolName: "other"}})
		wantField(t, err, "rule.tool_name")
		rule, err = r.b.ResolveApproval(ctx, id, "c1", agent.Approval{Allowed: true, Scope: agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION,
			Arguments: mustStruct(t, map[string]any{"text": "edited"}), DecidedBy: "bob"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if asked != 1 {
		t.Fatalf("asked %d times, want once (the rule decides c2)", asked)
	}
	if rule.GetId() == "" || rule.GetToolName() != "jot" || rule.GetCreatedBy() != "bob" {
		t.Fatalf("rule relayed back %v", rule)
	}
	close(wrote)
	var jotted []string
	for s := range wrote {
		jotted = append(jotted, s)
	}
	if len(jotted) != 2 || jotted[0] != "edited" || jotted[1] != "again" {
		t.Fatalf("jotted %q, want the edit, then the model's second text", jotted)
	}
	rules, err := r.b.ListApprovalRules(ctx, id)
	if err != nil || len(rules) != 1 || rules[0].GetId() != rule.GetId() {
		t.Fatalf("rules %v, %v", rules, err)
	}
	path, err := r.store.Path(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var edited bool
	for _, e := range path {
		if n := e.GetMessage().GetApprovalNotice(); n.GetToolCallId() == "c1" {
			edited = n.GetArgumentsEdited() && n.GetRule().GetId() == rule.GetId() && n.GetScope() == agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION
		}
	}
	if !edited {
		t.Fatal("the notice of c1 does not record the edit, the rule and the scope")
	}
}
