package service_test

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

const (
	allowed = agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED
	denied  = agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED
)

func bashCall(t testing.TB, id, command string) *agentdv1.AssistantMessage {
	return toolCallAnswer(t, id, "bash", map[string]any{"command": command})
}

// bashSession is a session whose bash calls ask for approval (bash's
// default), with a faux script.
func bashSession(t *testing.T, h *harness, responses ...*agentdv1.AssistantMessage) string {
	t.Helper()
	return h.createSession(&agentdv1.SessionConfig{WorkspaceRoot: t.TempDir(), Tools: []*agentdv1.Tool{{Name: "bash"}},
		Faux: &agentdv1.FauxScript{Responses: responses}})
}

// promptResolving runs a prompt to agent_end, answering every
// approval_requested with what answer returns (its session id filled in),
// and returns the run's events.
func promptResolving(t *testing.T, h *harness, sessionID, text string, answer func(*agentdv1.ApprovalRequested) *agentdv1.ResolveApprovalRequest) []*agentdv1.AgentEvent {
	t.Helper()
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: sessionID, Content: texts(text)})
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentdv1.AgentEvent
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatalf("Prompt stream: %v (after %s)", err, kinds(evs))
		}
		evs = append(evs, ev)
		if ar := ev.GetApprovalRequested(); ar != nil {
			req := answer(ar)
			req.SessionId = sessionID
			if _, err := h.client.ResolveApproval(h.ctx(), req); err != nil {
				t.Fatalf("ResolveApproval %v: %v", req, err)
			}
		}
	}
}

// allowAs answers every request ALLOWED with scope.
func allowAs(scope agentdv1.ApprovalScope) func(*agentdv1.ApprovalRequested) *agentdv1.ResolveApprovalRequest {
	return func(ar *agentdv1.ApprovalRequested) *agentdv1.ResolveApprovalRequest {
		return &agentdv1.ResolveApprovalRequest{ToolCallId: ar.GetToolCallId(), Decision: allowed, Scope: scope, DecidedBy: "alice"}
	}
}

// asked lists the calls the events asked approval for.
func asked(evs []*agentdv1.AgentEvent) []string {
	var ids []string
	for _, ev := range evs {
		if ar := ev.GetApprovalRequested(); ar != nil {
			ids = append(ids, ar.GetToolCallId())
		}
	}
	return ids
}

// notices are the approval notices of a transcript, by tool call id.
func notices(entries []*agentdv1.Entry) map[string]*agentdv1.ApprovalNotice {
	out := map[string]*agentdv1.ApprovalNotice{}
	for _, e := range entries {
		if n := e.GetMessage().GetApprovalNotice(); n != nil {
			out[n.GetToolCallId()] = n
		}
	}
	return out
}

// resultText is the text of the result of call id.
func resultText(entries []*agentdv1.Entry, id string) string {
	for _, e := range entries {
		if tr := e.GetMessage().GetToolResult(); tr != nil && tr.GetToolCallId() == id {
			var b strings.Builder
			for _, c := range tr.GetContent() {
				b.WriteString(c.GetText().GetText())
			}
			return b.String()
		}
	}
	return ""
}

func (h *harness) rules(sessionID string) []*agentdv1.ApprovalRule {
	h.t.Helper()
	resp, err := h.client.ListApprovalRules(h.ctx(), &agentdv1.ListApprovalRulesRequest{SessionId: sessionID})
	if err != nil {
		h.t.Fatalf("ListApprovalRules: %v", err)
	}
	return resp.GetRules()
}

// Each scope over two runs of bash calls: CALL asks every call, RUN
// decides the run's later calls and asks again in the next run, SESSION
// stores a rule that decides the later runs too. The calls ran (their
// output is in the results) and each decision's notice says how it was
// taken.
func TestApprovalScopes(t *testing.T) {
	cases := []struct {
		scope agentdv1.ApprovalScope
		asked []string
		rules int
	}{
		{agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL, []string{"c1", "c2", "c3"}, 0},
		{agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN, []string{"c1", "c3"}, 0},
		{agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION, []string{"c1"}, 1},
	}
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	for _, tc := range cases {
		t.Run(tc.scope.String(), func(t *testing.T) {
			id := bashSession(t, h, bashCall(t, "c1", "echo one"), bashCall(t, "c2", "echo two"), textAnswer("done"),
				bashCall(t, "c3", "echo three"), textAnswer("done again"))
			var got []string
			got = append(got, asked(promptResolving(t, h, id, "first", allowAs(tc.scope)))...)
			got = append(got, asked(promptResolving(t, h, id, "second", allowAs(tc.scope)))...)
			if !slices.Equal(got, tc.asked) {
				t.Fatalf("asked for %v, want %v", got, tc.asked)
			}
			entries := h.transcript(id)
			for call, out := range map[string]string{"c1": "one", "c2": "two", "c3": "three"} {
				if text := resultText(entries, call); !strings.Contains(text, out) {
					t.Errorf("result of %s: %q, want the output %q", call, text, out)
				}
			}
			ns := notices(entries)
			for _, call := range []string{"c1", "c2", "c3"} {
				n := ns[call]
				if n.GetDecision() != allowed {
					t.Fatalf("notice of %s: %v", call, n)
				}
				if slices.Contains(tc.asked, call) {
					if n.GetDecidedBy() != "alice" || n.GetScope() != tc.scope || (n.GetRule() != nil) != (tc.scope != agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL) {
						t.Errorf("notice of asked call %s: %v", call, n)
					}
				} else if n.GetDecidedBy() != "rule" || n.GetScope() != agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL || n.GetRule().GetToolName() != "bash" {
					t.Errorf("notice of a call the rule decided (%s): %v", call, n)
				}
			}
			rules := h.rules(id)
			if len(rules) != tc.rules {
				t.Fatalf("%d rules in force, want %d: %v", len(rules), tc.rules, rules)
			}
			if tc.rules == 1 {
				r := rules[0]
				if r.GetToolName() != "bash" || r.GetDecision() != allowed || r.GetCreatedBy() != "alice" || r.GetCreated() == nil || r.GetId() == "" {
					t.Fatalf("stored rule %v", r)
				}
				if !proto.Equal(ns["c1"].GetRule(), r) || ns["c3"].GetRule().GetId() != r.GetId() {
					t.Fatalf("notices name rule %v and %v, the rule in force is %v", ns["c1"].GetRule(), ns["c3"].GetRule(), r)
				}
			}
		})
	}
}

// The answer to a SESSION scope is the rule stored, as the transcript and
// ListApprovalRules have it; a rule's reason defaults to the decision's.
func TestResolveApprovalReturnsTheStoredRule(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := bashSession(t, h, bashCall(t, "c1", "echo one"), textAnswer("done"))
	var resp *agentdv1.ResolveApprovalResponse
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested() != nil })
	resp, err = h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c1", Decision: allowed,
		Scope: agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION, Reason: "echo is harmless",
		Rule: &agentdv1.ApprovalRule{ToolName: "bash", CommandPrefix: "echo", Id: "mine", Decision: denied}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
	r := resp.GetRule()
	if r.GetId() == "mine" || r.GetDecision() != allowed || r.GetCommandPrefix() != "echo" || r.GetReason() != "echo is harmless" || r.GetCreatedBy() != "user" {
		t.Fatalf("stored rule %v: agentd sets id, decision and created_by; reason defaults to the decision's", r)
	}
	var entry *agentdv1.Entry
	for _, e := range h.transcript(id) {
		if e.GetApprovalRule() != nil {
			entry = e
		}
	}
	if entry.GetId() != r.GetId() || !proto.Equal(entry.GetApprovalRule(), r) {
		t.Fatalf("transcript entry %v, answer %v", entry, r)
	}
	if rules := h.rules(id); len(rules) != 1 || !proto.Equal(rules[0], r) {
		t.Fatalf("rules in force %v", rules)
	}
}

// A bash rule with a command prefix decides a later matching call with no
// approval_requested event; a call that does not match, or that chains a
// second command after the prefix, still asks.
func TestApprovalRuleCommandPrefix(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := bashSession(t, h, bashCall(t, "c1", "echo first"), textAnswer("ok"),
		bashCall(t, "c2", "  echo again"), bashCall(t, "c3", "printf other"), bashCall(t, "c4", "echo x; printf chained"),
		bashCall(t, "c5", "echoes"), textAnswer("done"))
	rule := &agentdv1.ApprovalRule{ToolName: "bash", CommandPrefix: "echo"}
	promptResolving(t, h, id, "first", func(ar *agentdv1.ApprovalRequested) *agentdv1.ResolveApprovalRequest {
		if s := ar.GetSuggestedRule(); s.GetToolName() != "bash" || s.GetCommandPrefix() != "echo" {
			t.Errorf("suggested rule %v", s)
		}
		if !slices.Equal(ar.GetDecisions(), []agentdv1.ApprovalDecision{allowed, denied}) || len(ar.GetScopes()) != 3 {
			t.Errorf("decisions %v, scopes %v", ar.GetDecisions(), ar.GetScopes())
		}
		return &agentdv1.ResolveApprovalRequest{ToolCallId: ar.GetToolCallId(), Decision: allowed, Scope: agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION, Rule: rule}
	})
	evs := promptResolving(t, h, id, "second", func(ar *agentdv1.ApprovalRequested) *agentdv1.ResolveApprovalRequest {
		return &agentdv1.ResolveApprovalRequest{ToolCallId: ar.GetToolCallId(), Decision: denied, Reason: "not that"}
	})
	if got := asked(evs); !slices.Equal(got, []string{"c3", "c4", "c5"}) {
		t.Fatalf("asked for %v, want c3 c4 c5 (c2 matches the rule)", got)
	}
	entries := h.transcript(id)
	if text := resultText(entries, "c2"); !strings.Contains(text, "again") {
		t.Fatalf("c2 ran? %q", text)
	}
	if n := notices(entries)["c2"]; n.GetDecidedBy() != "rule" || n.GetRule().GetCommandPrefix() != "echo" {
		t.Fatalf("notice of c2 %v", n)
	}
}

// A DENIED rule decides a matching call without asking, and the model is
// told which rule refused it and why; it wins over an ALLOWED rule that
// matches too.
func TestApprovalDenyRuleWins(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := bashSession(t, h, bashCall(t, "c1", "rm -rf x"), bashCall(t, "c2", "echo one"), textAnswer("ok"),
		bashCall(t, "c3", "rm -f y"), bashCall(t, "c4", "echo two"), textAnswer("done"))
	promptResolving(t, h, id, "first", func(ar *agentdv1.ApprovalRequested) *agentdv1.ResolveApprovalRequest {
		if ar.GetToolCallId() == "c1" {
			return &agentdv1.ResolveApprovalRequest{ToolCallId: "c1", Decision: denied, Scope: agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION,
				Reason: "never delete", Rule: &agentdv1.ApprovalRule{ToolName: "bash", CommandPrefix: "rm"}}
		}
		// A newer rule allowing every bash call.
		return &agentdv1.ResolveApprovalRequest{ToolCallId: ar.GetToolCallId(), Decision: allowed, Scope: agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION}
	})
	evs := promptResolving(t, h, id, "second", func(ar *agentdv1.ApprovalRequested) *agentdv1.ResolveApprovalRequest {
		t.Errorf("asked for %s; the rules decide every call", ar.GetToolCallId())
		return &agentdv1.ResolveApprovalRequest{ToolCallId: ar.GetToolCallId(), Decision: denied}
	})
	if strings.Contains(kinds(evs), "approval_requested") {
		t.Fatal("the second run asked")
	}
	entries := h.transcript(id)
	ns := notices(entries)
	if n := ns["c3"]; n.GetDecision() != denied || n.GetDecidedBy() != "rule" || n.GetRule().GetCommandPrefix() != "rm" {
		t.Fatalf("notice of c3 %v", n)
	}
	if n := ns["c4"]; n.GetDecision() != allowed || n.GetDecidedBy() != "rule" || n.GetRule().GetCommandPrefix() != "" {
		t.Fatalf("notice of c4 %v", n)
	}
	if text := resultText(entries, "c3"); !strings.Contains(text, "denied by approval rule "+ns["c3"].GetRule().GetId()) || !strings.Contains(text, "never delete") {
		t.Fatalf("the model reads %q", text)
	}
	if text := resultText(entries, "c4"); !strings.Contains(text, "two") {
		t.Fatalf("c4 ran? %q", text)
	}
}

// writeSession is a session whose write_file calls ask for approval, in
// the workspace ws.
func writeSession(t *testing.T, h *harness, ws string, cfg *agentdv1.SessionConfig, responses ...*agentdv1.AssistantMessage) string {
	t.Helper()
	if cfg == nil {
		cfg = &agentdv1.SessionConfig{}
	}
	cfg.WorkspaceRoot, cfg.Tools = ws, []*agentdv1.Tool{{Name: "write_file"}}
	cfg.Faux = &agentdv1.FauxScript{Responses: responses}
	return h.createSession(cfg)
}

func writeCall(t testing.TB, id, path, content string) *agentdv1.AssistantMessage {
	return toolCallAnswer(t, id, "write_file", map[string]any{"path": path, "content": content})
}

// Edited arguments: an edit that does not fit the tool's schema is
// refused naming the field, and the call goes on waiting; the corrected
// edit is what runs (the file holds the edited text), and the notice says
// the arguments were edited.
func TestApprovalEditedArguments(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	ws := t.TempDir()
	id := writeSession(t, h, ws, nil, writeCall(t, "w1", "note.txt", "the model's text"), textAnswer("written"))
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("write")})
	if err != nil {
		t.Fatal(err)
	}
	evs := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested() != nil })
	if s := evs[len(evs)-1].GetApprovalRequested().GetSuggestedRule(); s.GetToolName() != "write_file" || s.GetPathGlob() != "*" {
		t.Fatalf("suggested rule %v, want write_file at the workspace root", s)
	}
	resolve := func(args map[string]any) error {
		_, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "w1", Decision: allowed,
			Arguments: mustStruct(t, args), DecidedBy: "editor"})
		return err
	}
	wantField(t, resolve(map[string]any{"path": "note.txt"}), "arguments.content")
	wantField(t, resolve(map[string]any{"path": "note.txt", "content": map[string]any{"nested": true}}), "arguments.content")
	if err := resolve(map[string]any{"path": "edited.txt", "content": "the editor's text"}); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "edited.txt")); err != nil || string(data) != "the editor's text" {
		t.Fatalf("edited.txt: %q, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "note.txt")); !os.IsNotExist(err) {
		t.Fatalf("the model's file was written too: %v", err)
	}
	n := notices(h.transcript(id))["w1"]
	if !n.GetArgumentsEdited() || n.GetDecidedBy() != "editor" || n.GetScope() != agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL || n.GetRule() != nil {
		t.Fatalf("notice %v", n)
	}
}

// What a ResolveApproval request can be refused for without a run is
// refused with the field named, before the session's state matters; what
// needs the waiting call is refused at the run, and the call still waits.
func TestResolveApprovalValidation(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := bashSession(t, h, bashCall(t, "c1", "echo one"), textAnswer("done"))
	session, run := agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION, agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN
	args := mustStruct(t, map[string]any{"command": "echo edited"})
	cases := []struct {
		name  string
		req   *agentdv1.ResolveApprovalRequest
		field string
	}{
		{"unknown scope", &agentdv1.ResolveApprovalRequest{Scope: 9}, "scope"},
		{"rule with scope CALL", &agentdv1.ResolveApprovalRequest{Rule: &agentdv1.ApprovalRule{ToolName: "bash"}}, "rule"},
		{"rule without tool", &agentdv1.ResolveApprovalRequest{Scope: session, Rule: &agentdv1.ApprovalRule{CommandPrefix: "ls"}}, "rule.tool_name"},
		{"bad tool name", &agentdv1.ResolveApprovalRequest{Scope: session, Rule: &agentdv1.ApprovalRule{ToolName: "no such tool"}}, "rule.tool_name"},
		{"prefix for a file tool", &agentdv1.ResolveApprovalRequest{Scope: run, Rule: &agentdv1.ApprovalRule{ToolName: "write_file", CommandPrefix: "ls"}}, "rule.command_prefix"},
		{"prefix with leading space", &agentdv1.ResolveApprovalRequest{Scope: run, Rule: &agentdv1.ApprovalRule{ToolName: "bash", CommandPrefix: " ls"}}, "rule.command_prefix"},
		{"allowing prefix with an operator", &agentdv1.ResolveApprovalRequest{Scope: run, Rule: &agentdv1.ApprovalRule{ToolName: "bash", CommandPrefix: "ls |"}}, "rule.command_prefix"},
		{"glob for bash", &agentdv1.ResolveApprovalRequest{Scope: run, Rule: &agentdv1.ApprovalRule{ToolName: "bash", PathGlob: "*"}}, "rule.path_glob"},
		{"bad glob", &agentdv1.ResolveApprovalRequest{Scope: run, Rule: &agentdv1.ApprovalRule{ToolName: "write_file", PathGlob: "src/[a"}}, "rule.path_glob"},
		{"absolute glob", &agentdv1.ResolveApprovalRequest{Scope: run, Rule: &agentdv1.ApprovalRule{ToolName: "write_file", PathGlob: "/etc/*"}}, "rule.path_glob"},
		{"unclean glob", &agentdv1.ResolveApprovalRequest{Scope: run, Rule: &agentdv1.ApprovalRule{ToolName: "read_file", PathGlob: "./src/*"}}, "rule.path_glob"},
		{"arguments with a denial", &agentdv1.ResolveApprovalRequest{Decision: denied, Arguments: args}, "arguments"},
		{"arguments with a batch", &agentdv1.ResolveApprovalRequest{Arguments: args, ToolCallIds: []string{"c2"}}, "arguments"},
		{"empty batch id", &agentdv1.ResolveApprovalRequest{ToolCallIds: []string{""}}, "tool_call_ids[0]"},
		{"batch id twice", &agentdv1.ResolveApprovalRequest{ToolCallIds: []string{"c2", "c1"}}, "tool_call_ids[1]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := proto.CloneOf(tc.req)
			req.SessionId, req.ToolCallId = id, "c1"
			if req.Decision == agentdv1.ApprovalDecision_APPROVAL_DECISION_UNSPECIFIED {
				req.Decision = allowed
			}
			_, err := h.client.ResolveApproval(h.ctx(), req)
			wantField(t, err, tc.field)
		})
	}

	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested() != nil })
	_, err = h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c1", Decision: allowed, Scope: session,
		Rule: &agentdv1.ApprovalRule{ToolName: "write_file", PathGlob: "*"}})
	wantField(t, err, "rule.tool_name")
	_, err = h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c1", Decision: allowed,
		Arguments: mustStruct(t, map[string]any{"command": "echo x", "timeout": "soon"})})
	wantField(t, err, "arguments.timeout")
	// Still waiting, and nothing was stored.
	if _, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c1", Decision: allowed}); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
	if rules := h.rules(id); len(rules) != 0 {
		t.Fatalf("refused requests left rules: %v", rules)
	}
}

// Two parallel calls waiting at once are decided by one request; a
// request naming a call that does not wait is refused whole (NOT_WAITING
// naming it) and decides neither.
func TestApprovalBatch(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	ws := t.TempDir()
	two := &agentdv1.AssistantMessage{Content: append(writeCall(t, "w1", "a.txt", "A").GetContent(), writeCall(t, "w2", "b.txt", "B").GetContent()...)}
	id := writeSession(t, h, ws, &agentdv1.SessionConfig{ToolExecution: agentdv1.ToolExecutionMode_TOOL_EXECUTION_MODE_PARALLEL}, two, textAnswer("both"))
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("write both")})
	if err != nil {
		t.Fatal(err)
	}
	waiting := 0
	recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool {
		if ev.GetApprovalRequested() != nil {
			waiting++
		}
		return waiting == 2
	})
	_, err = h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "w1", ToolCallIds: []string{"w2", "w3"}, Decision: allowed})
	wantCode(t, err, codes.NotFound, `"w3"`)
	if info := errorInfo(err); info.GetReason() != "NOT_WAITING" || info.GetMetadata()["tool_call_id"] != "w3" {
		t.Fatalf("refusal %v", info)
	}
	if _, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "w1", ToolCallIds: []string{"w2"},
		Decision: allowed, DecidedBy: "batch"}); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a.txt": "A", "b.txt": "B"} {
		if data, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(data) != want {
			t.Fatalf("%s: %q, %v", name, data, err)
		}
	}
	ns := notices(h.transcript(id))
	if ns["w1"].GetDecidedBy() != "batch" || ns["w2"].GetDecidedBy() != "batch" {
		t.Fatalf("notices %v", ns)
	}
}

// An operator's ceiling that keeps bash asking refuses ALLOWED with scope
// RUN or SESSION (CEILING_FORBIDS_RULE naming the tool) and decides
// nothing; a denying rule and a one-call approval are fine. An ALLOWED
// rule stored before the ceiling was tightened is ignored: the call asks.
func TestApprovalCeilingForbidsRule(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := bashSession(t, h, bashCall(t, "c1", "echo one"), textAnswer("ok"), bashCall(t, "c2", "echo two"), textAnswer("ok"),
		bashCall(t, "c3", "echo three"), bashCall(t, "c4", "rm x"), textAnswer("done"))
	promptResolving(t, h, id, "first", allowAs(agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION))
	if len(h.rules(id)) != 1 {
		t.Fatal("no rule stored")
	}
	if got := asked(promptResolving(t, h, id, "second", allowAs(agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL))); len(got) != 0 {
		t.Fatalf("without a ceiling the rule decides; asked %v", got)
	}

	h.opts.Ceilings = agent.Ceilings{Default: agent.Ceiling{RequireApproval: agent.Limit{Values: []string{"ba*"}, Setting: "--require-approval"}}}
	h.restart()
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("third")})
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested().GetToolCallId() == "c3" })
	for _, scope := range []agentdv1.ApprovalScope{agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN, agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION} {
		_, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c3", Decision: allowed, Scope: scope,
			Rule: &agentdv1.ApprovalRule{ToolName: "bash", CommandPrefix: "echo"}})
		wantCode(t, err, codes.PermissionDenied, "--require-approval")
		if info := errorInfo(err); info.GetReason() != "CEILING_FORBIDS_RULE" || info.GetMetadata()["tool_name"] != "bash" {
			t.Fatalf("%v: refusal %v", scope, info)
		}
	}
	if _, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c3", Decision: allowed}); err != nil {
		t.Fatalf("one call may be allowed: %v", err)
	}
	recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested().GetToolCallId() == "c4" })
	if _, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c4", Decision: denied,
		Scope: agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION, Rule: &agentdv1.ApprovalRule{ToolName: "bash", CommandPrefix: "rm"}}); err != nil {
		t.Fatalf("a denying rule is always accepted: %v", err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
	if text := resultText(h.transcript(id), "c3"); !strings.Contains(text, "three") {
		t.Fatalf("c3 ran? %q", text)
	}
	if rules := h.rules(id); len(rules) != 2 || rules[1].GetDecision() != denied {
		t.Fatalf("rules %v", rules)
	}
}

// A SESSION rule is a transcript entry: it decides after a restart (the
// same SQLite file reopened), in a fork, and in an exported and imported
// copy, with the same id; GetTree shows it as an approval_rule.
func TestApprovalRuleSurvives(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := bashSession(t, h, bashCall(t, "c1", "echo one"), textAnswer("ok"), bashCall(t, "c2", "echo two"), textAnswer("done"))
	promptResolving(t, h, id, "first", func(ar *agentdv1.ApprovalRequested) *agentdv1.ResolveApprovalRequest {
		return &agentdv1.ResolveApprovalRequest{ToolCallId: ar.GetToolCallId(), Decision: allowed, Scope: agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION,
			Rule: ar.GetSuggestedRule()}
	})
	rules := h.rules(id)
	if len(rules) != 1 || rules[0].GetCommandPrefix() != "echo" {
		t.Fatalf("rules %v", rules)
	}
	rule := rules[0]

	tree, err := h.client.GetTree(h.ctx(), &agentdv1.GetTreeRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(tree.GetNodes(), func(n *agentdv1.TreeNode) bool { return n.GetId() == rule.GetId() })
	if i < 0 || tree.GetNodes()[i].GetKind() != "approval_rule" || tree.GetNodes()[i].GetPreview() != "allow bash: echo" {
		t.Fatalf("tree nodes %v", tree.GetNodes())
	}

	h.restart()
	fork, err := h.client.ForkSession(h.ctx(), &agentdv1.ForkSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	export, err := h.client.ExportSession(h.ctx(), &agentdv1.ExportSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	up, err := h.client.ImportSession(h.ctx())
	if err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := export.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := up.Send(&agentdv1.ImportSessionRequest{Record: rec}); err != nil {
			t.Fatal(err)
		}
	}
	imported, err := up.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	for name, sid := range map[string]string{"restarted": id, "fork": fork.GetSession().GetId(), "import": imported.GetSession().GetId()} {
		t.Run(name, func(t *testing.T) {
			if got := h.rules(sid); len(got) != 1 || !proto.Equal(got[0], rule) {
				t.Fatalf("rules %v, want %v", got, rule)
			}
			evs := promptResolving(t, h, sid, "second", func(ar *agentdv1.ApprovalRequested) *agentdv1.ResolveApprovalRequest {
				t.Errorf("asked for %s", ar.GetToolCallId())
				return &agentdv1.ResolveApprovalRequest{ToolCallId: ar.GetToolCallId(), Decision: denied}
			})
			if !strings.Contains(kinds(evs), "agent_end") {
				t.Fatalf("events %s", kinds(evs))
			}
			entries := h.transcript(sid)
			if n := notices(entries)["c2"]; n.GetDecidedBy() != "rule" || n.GetRule().GetId() != rule.GetId() {
				t.Fatalf("notice of c2 %v", n)
			}
			if text := resultText(entries, "c2"); !strings.Contains(text, "two") {
				t.Fatalf("c2 ran? %q", text)
			}
		})
	}
}

// DeleteApprovalRule removes a rule in force (an ApprovalRuleRemoval entry
// at the leaf); the next call asks again. A rule not in force, unknown or
// already removed, is RULE_NOT_FOUND naming it.
func TestDeleteApprovalRule(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := bashSession(t, h, bashCall(t, "c1", "echo one"), textAnswer("ok"), bashCall(t, "c2", "echo two"), textAnswer("done"))
	promptResolving(t, h, id, "first", allowAs(agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION))
	rules := h.rules(id)
	if len(rules) != 1 {
		t.Fatalf("rules %v", rules)
	}
	_, err := h.client.DeleteApprovalRule(h.ctx(), &agentdv1.DeleteApprovalRuleRequest{SessionId: id})
	wantField(t, err, "rule_id")
	for _, unknown := range []string{"0123456789abcdef", id} {
		_, err := h.client.DeleteApprovalRule(h.ctx(), &agentdv1.DeleteApprovalRuleRequest{SessionId: id, RuleId: unknown})
		wantCode(t, err, codes.NotFound, unknown)
		if info := errorInfo(err); info.GetReason() != "RULE_NOT_FOUND" || info.GetMetadata()["rule_id"] != unknown {
			t.Fatalf("refusal %v", info)
		}
	}
	resp, err := h.client.DeleteApprovalRule(h.ctx(), &agentdv1.DeleteApprovalRuleRequest{SessionId: id, RuleId: rules[0].GetId()})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if rm := resp.GetEntry().GetApprovalRuleRemoval(); rm.GetRuleId() != rules[0].GetId() || resp.GetEntry().GetId() != sess.GetSession().GetLeafEntryId() {
		t.Fatalf("removal %v; the leaf is %q", resp.GetEntry(), sess.GetSession().GetLeafEntryId())
	}
	if got := h.rules(id); len(got) != 0 {
		t.Fatalf("rules after the removal %v", got)
	}
	_, err = h.client.DeleteApprovalRule(h.ctx(), &agentdv1.DeleteApprovalRuleRequest{SessionId: id, RuleId: rules[0].GetId()})
	wantCode(t, err, codes.NotFound, rules[0].GetId())
	if got := asked(promptResolving(t, h, id, "second", allowAs(agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL))); !slices.Equal(got, []string{"c2"}) {
		t.Fatalf("asked %v after the rule was removed, want c2", got)
	}
}

// A rule removed while a run is active stops deciding that run's next
// call: the gate reads the session's rules each time it would ask.
func TestDeleteApprovalRuleDuringARun(t *testing.T) {
	g := newGate()
	defer g.open()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{WorkspaceRoot: t.TempDir(), Tools: []*agentdv1.Tool{{Name: "bash"}, {Name: "wait"}},
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
			bashCall(t, "c1", "echo one"), toolCallAnswer(t, "w", "wait", map[string]any{}), bashCall(t, "c2", "echo two"), textAnswer("done"),
		}}})
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested() != nil })
	resp, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c1", Decision: allowed,
		Scope: agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	if _, err := h.client.DeleteApprovalRule(h.ctx(), &agentdv1.DeleteApprovalRuleRequest{SessionId: id, RuleId: resp.GetRule().GetId()}); err != nil {
		t.Fatalf("delete during a run: %v", err)
	}
	g.open()
	evs := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested() != nil })
	if ar := evs[len(evs)-1].GetApprovalRequested(); ar.GetToolCallId() != "c2" {
		t.Fatalf("asked for %v", ar)
	}
	if _, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c2", Decision: denied}); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
	// The transcript is one path: the removal sits between the run's
	// entries, and the context is whole.
	if got := h.context(id); len(got.GetMessages()) == 0 {
		t.Fatal("empty context")
	}
}

// A RUN scope with a path glob decides the run's later calls inside the
// glob only; nothing is stored.
func TestApprovalRunRuleWithPathGlob(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "src", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := writeSession(t, h, ws, nil, writeCall(t, "w1", "src/a.go", "a"), writeCall(t, "w2", filepath.Join(ws, "src/b.go"), "b"),
		writeCall(t, "w3", "src/deep/c.go", "c"), writeCall(t, "w4", "src/../d.go", "d"), textAnswer("done"))
	evs := promptResolving(t, h, id, "write", func(ar *agentdv1.ApprovalRequested) *agentdv1.ResolveApprovalRequest {
		if ar.GetToolCallId() == "w1" {
			if s := ar.GetSuggestedRule(); s.GetPathGlob() != "src/*" {
				t.Errorf("suggested %v", s)
			}
			return &agentdv1.ResolveApprovalRequest{ToolCallId: "w1", Decision: allowed, Scope: agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN, Rule: ar.GetSuggestedRule()}
		}
		return &agentdv1.ResolveApprovalRequest{ToolCallId: ar.GetToolCallId(), Decision: allowed}
	})
	if got := asked(evs); !slices.Equal(got, []string{"w1", "w3", "w4"}) {
		t.Fatalf("asked %v, want w1 w3 w4 (w2, absolute inside src/, matches)", got)
	}
	if n := notices(h.transcript(id))["w1"]; n.GetScope() != agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN || n.GetRule().GetPathGlob() != "src/*" || n.GetRule().GetId() != "" {
		t.Fatalf("notice of w1 %v", n)
	}
	if rules := h.rules(id); len(rules) != 0 {
		t.Fatalf("a RUN rule was stored: %v", rules)
	}
}
