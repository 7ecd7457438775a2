package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service/servicetest"
)

// jsonEvents parses the protojson lines of --json prompt.
func jsonEvents(t *testing.T, out string) []*agentdv1.AgentEvent {
	t.Helper()
	var events []*agentdv1.AgentEvent
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		ev := &agentdv1.AgentEvent{}
		if err := protojson.Unmarshal([]byte(line), ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		events = append(events, ev)
	}
	return events
}

// The per-run flags of prompt reach the request: agent_start and agent_end
// echo the metadata, and the run record holds every setting.
func TestPromptRunFlags(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{})
	c := policyClient(t, addr)
	resp, err := c.CreateSession(context.Background(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		Faux:  &agentdv1.FauxScript{Echo: true},
		Tools: []*agentdv1.Tool{pickTool(agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	code, out, stderr := ctl(t, addr, "--json", "prompt", id, "hello", "--metadata", "job=nightly-42", "--metadata", "ticket=4711",
		"--model", "faux/faux-1", "--thinking", "high", "--system-append", "Be brief.", "--tool", "pick",
		"--temperature", "0.5", "--max-output-tokens", "256", "--if-busy", "enqueue")
	if code != 0 {
		t.Fatalf("prompt with per-run flags: %d %q %s", code, out, stderr)
	}
	events := jsonEvents(t, out)
	want := map[string]string{"job": "nightly-42", "ticket": "4711"}
	var runID string
	var startMD, endMD map[string]string
	for _, ev := range events {
		if s := ev.GetAgentStart(); s != nil {
			startMD, runID = s.GetMetadata(), ev.GetRunId()
		}
		if e := ev.GetAgentEnd(); e != nil {
			endMD = e.GetMetadata()
		}
	}
	if !maps.Equal(startMD, want) || !maps.Equal(endMD, want) || runID == "" {
		t.Fatalf("metadata on agent_start %v, agent_end %v (run %q)", startMD, endMD, runID)
	}
	code, out, stderr = ctl(t, addr, "runs", "show", id, runID)
	if code != 0 || !strings.Contains(out, "metadata: job=nightly-42 ticket=4711") || !strings.Contains(out, "model:    faux/faux-1") {
		t.Fatalf("runs show: %d %q %s", code, out, stderr)
	}
	if code, out, _ := ctl(t, addr, "runs", "list", id, "--metadata", "ticket=4711"); code != 0 || !strings.HasPrefix(out, runID) {
		t.Fatalf("runs list --metadata ticket=4711: %d %q", code, out)
	}
	_, out, _ = ctl(t, addr, "--json", "runs", "show", id, runID)
	run := &agentdv1.Run{}
	if err := protojson.Unmarshal([]byte(out), run); err != nil {
		t.Fatalf("runs show --json %q: %v", out, err)
	}
	req := run.GetRequest()
	if req.GetThinkingLevel() != agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH || req.GetSystemPromptAppend() != "Be brief." || !slices.Equal(req.GetTools(), []string{"pick"}) ||
		req.GetModelSettings().GetTemperature() != 0.5 || req.GetModelSettings().GetMaxOutputTokens() != 256 || req.GetIfBusy() != agentdv1.BusyPolicy_BUSY_POLICY_ENQUEUE ||
		req.GetModel().GetId() != "faux-1" {
		t.Fatalf("the run's request: %v", req)
	}

	// continue takes the same flags (without --if-busy).
	if code, _, stderr := ctl(t, addr, "append", id, "appended"); code != 0 {
		t.Fatalf("append: %s", stderr)
	}
	code, out, stderr = ctl(t, addr, "--json", "continue", id, "--metadata", "job=resume", "--thinking", "off", "--tool", "pick")
	if code != 0 {
		t.Fatalf("continue with per-run flags: %d %q %s", code, out, stderr)
	}
	events = jsonEvents(t, out)
	if md := events[0].GetAgentStart().GetMetadata(); md["job"] != "resume" {
		t.Fatalf("continue's agent_start: %v", events[0])
	}
	_, out, _ = ctl(t, addr, "--json", "runs", "show", id, events[0].GetRunId())
	run = &agentdv1.Run{}
	if err := protojson.Unmarshal([]byte(out), run); err != nil || run.GetRequest().GetMethod() != "continue" ||
		run.GetRequest().GetThinkingLevel() != agentdv1.ThinkingLevel_THINKING_LEVEL_OFF {
		t.Fatalf("the continued run: %q %v", out, err)
	}
	if code, _, stderr := ctl(t, addr, "continue", id, "--if-busy", "steer"); code != 1 || !strings.Contains(stderr, "--if-busy") {
		t.Fatalf("continue --if-busy: %d %q", code, stderr)
	}
}

// --output-schema: the faux model's JSON answer validates and is printed
// as JSON after the answer; --json carries it on agent_end.
func TestPromptOutputSchema(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{})
	c := policyClient(t, addr)
	answer := func(text string) *agentdv1.AssistantMessage {
		return &agentdv1.AssistantMessage{Content: texts(text)}
	}
	resp, err := c.CreateSession(context.Background(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
			answer(`{"verdict": "ok",  "score": 7}`),
			answer(`{"verdict": "bad", "score": 1}`),
			answer(`{"score": "seven"}`),
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	schema := filepath.Join(t.TempDir(), "verdict.json")
	if err := os.WriteFile(schema, []byte(`{"type": "object", "properties": {"verdict": {"type": "string"}, "score": {"type": "integer"}},
		"required": ["verdict", "score"], "additionalProperties": false}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := ctl(t, addr, "prompt", id, "judge this", "--output-schema", schema, "--metadata", "job=judge")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 3 || lines[len(lines)-2] != `{"score":7,"verdict":"ok"}` || !strings.Contains(lines[len(lines)-1], "[COMPLETED") {
		t.Fatalf("prompt --output-schema: %d %q %s", code, out, stderr)
	}
	code, out, stderr = ctl(t, addr, "--json", "prompt", id, "again", "--output-schema", schema)
	events := jsonEvents(t, out)
	end := events[len(events)-1].GetAgentEnd()
	if code != 0 || end.GetStructuredOutput().GetFields()["verdict"].GetStringValue() != "bad" {
		t.Fatalf("prompt --json --output-schema: %d %q %s", code, out, stderr)
	}
	if code, out, _ := ctl(t, addr, "runs", "show", id, events[0].GetRunId()); code != 0 || !strings.Contains(out, "output:") {
		t.Fatalf("runs show of a run with structured output: %d %q", code, out)
	}
	// An answer that does not validate, with no corrections allowed, ends
	// the run OUTPUT_INVALID: exit 3, nothing structured printed.
	code, out, _ = ctl(t, addr, "prompt", id, "once more", "--output-schema", schema, "--max-output-retries", "0")
	if code != 3 || !strings.Contains(out, "[OUTPUT_INVALID") || strings.Contains(out, `{"score":"seven"}`) {
		t.Fatalf("prompt with an invalid answer: %d %q", code, out)
	}
}

// Flag values agentctl must parse fail before any request, naming the flag.
func TestRunFlagErrors(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{})
	_, out, _ := ctl(t, addr, "sessions", "create", "--faux-echo")
	id := strings.TrimSpace(out)
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "bad.json")
	array := filepath.Join(dir, "array.json")
	os.WriteFile(notJSON, []byte(`{"type": "object",`), 0o644)
	os.WriteFile(array, []byte(`[{"type": "object"}]`), 0o644)
	for _, tc := range []struct {
		flag string
		args []string
	}{
		{"--metadata", []string{"--metadata", "job"}},
		{"--metadata", []string{"--metadata", "=x"}},
		{"--metadata", []string{"--metadata", "a=1", "--metadata", "a=2"}},
		{"--output-schema", []string{"--output-schema", filepath.Join(dir, "missing.json")}},
		{"--output-schema", []string{"--output-schema", notJSON}},
		{"--output-schema", []string{"--output-schema", array}},
		{"--thinking", []string{"--thinking", "huge"}},
		{"--if-busy", []string{"--if-busy", "wait"}},
		{"--model", []string{"--model", "faux"}},
		{"--max-output-retries", []string{"--max-output-retries", "-1"}},
		{"--temperature", []string{"--temperature", "warm"}},
		{"--max-output-tokens", []string{"--max-output-tokens", "lots"}},
	} {
		args := append([]string{"prompt", id, "hi"}, tc.args...)
		if code, _, stderr := ctl(t, addr, args...); code != 1 || !strings.Contains(stderr, tc.flag) {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, stderr)
		}
	}
	// Nothing reached agentd: the session has no runs.
	if code, out, _ := ctl(t, addr, "runs", "list", id); code != 0 || out != "" {
		t.Fatalf("runs after refused flags: %d %q", code, out)
	}
	// What agentd validates comes back naming the request field.
	if code, _, stderr := ctl(t, addr, "prompt", id, "hi", "--tool", "nope"); code != 1 || !strings.Contains(stderr, "tools[0]") {
		t.Fatalf("an unknown --tool: %d %q", code, stderr)
	}
}
