package sessionfile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service/servicetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// piContextLines renders pi's expected context (testdata/pi/context.json,
// written by pi's own buildSessionContext and convertToLlm) one message a
// line: role, then text and thinking, tool calls and results.
func piContextLines(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "context.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ctx struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(data, &ctx); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ctx.Messages {
		var parts []string
		blocks, _ := piBlocks(m["content"])
		for _, b := range blocks {
			parts = append(parts, blockLine(b))
		}
		line := str(m, "role") + ": " + strings.Join(parts, " + ")
		if m["role"] == "toolResult" {
			line = fmt.Sprintf("toolResult %s %s: %s", str(m, "toolCallId"), str(m, "toolName"), strings.Join(parts, " + "))
		}
		out = append(out, line)
	}
	return out
}

func blockLine(b *agentdv1.ContentBlock) string {
	switch x := b.GetBlock().(type) {
	case *agentdv1.ContentBlock_Text:
		return "text " + x.Text.GetText()
	case *agentdv1.ContentBlock_Thinking:
		// Replay to another model turns reasoning into text; the words
		// are what must survive.
		return "text " + x.Thinking.GetThinking()
	case *agentdv1.ContentBlock_ToolCall:
		args, _ := x.ToolCall.GetArguments().MarshalJSON()
		var v any
		_ = json.Unmarshal(args, &v)
		canon, _ := json.Marshal(v)
		return fmt.Sprintf("call %s %s %s", x.ToolCall.GetId(), x.ToolCall.GetName(), canon)
	case *agentdv1.ContentBlock_Image:
		return "image " + x.Image.GetMimeType()
	}
	return "?"
}

func agentdContextLines(c *agentdv1.Context) []string {
	var out []string
	for _, m := range c.GetMessages() {
		var parts []string
		var blocks []*agentdv1.ContentBlock
		var line string
		switch r := m.GetRole().(type) {
		case *agentdv1.Message_User:
			blocks, line = r.User.GetContent(), "user: "
		case *agentdv1.Message_Assistant:
			blocks, line = r.Assistant.GetContent(), "assistant: "
		case *agentdv1.Message_ToolResult:
			blocks, line = r.ToolResult.GetContent(), fmt.Sprintf("toolResult %s %s: ", r.ToolResult.GetToolCallId(), r.ToolResult.GetToolName())
		}
		for _, b := range blocks {
			parts = append(parts, blockLine(b))
		}
		out = append(out, line+strings.Join(parts, " + "))
	}
	return out
}

// TestImportPiSession imports the session file pi 0.73 wrote (testdata,
// see gen.mjs) into a real agentd: the tree keeps pi's ids, the label
// and the branch, and GetContext holds what pi's buildSessionContext gives
// for the file, message for message.
func TestImportPiSession(t *testing.T) {
	c := client(t)
	id := importFile(t, c, filepath.Join("testdata", "session.jsonl"))
	got, err := c.GetContext(context.Background(), &agentdv1.GetContextRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	want := piContextLines(t)
	have := agentdContextLines(got.GetContext())
	if strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Fatalf("GetContext of the imported pi session:\n%s\n\npi's buildSessionContext:\n%s", strings.Join(have, "\n"), strings.Join(want, "\n"))
	}
	sess, err := c.GetSession(context.Background(), &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil || sess.GetSession().GetLabels()[LabelPiCWD] != "/work/project" {
		t.Fatalf("session: %v %v", sess, err)
	}
	tree, err := c.GetTree(context.Background(), &agentdv1.GetTreeRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(mustRead(t, filepath.Join("testdata", "session.jsonl")))), "\n")
	if len(tree.GetNodes()) != len(lines)-1 {
		t.Fatalf("%d nodes for %d pi entries", len(tree.GetNodes()), len(lines)-1)
	}
	var first map[string]any
	_ = json.Unmarshal([]byte(lines[1]), &first)
	if n := tree.GetNodes()[0]; n.GetId() != first["id"] || n.GetLabel() != "start" {
		t.Fatalf("first node %v; want pi's id %v with its label", n, first["id"])
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// piLinesNormalized reads a pi session file as JSON values, with content
// given as a string turned into its one text block (pi writes either).
func piLinesNormalized(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		for _, holder := range []map[string]any{m, asMap(m["message"])} {
			if s, ok := holder["content"].(string); ok {
				holder["content"] = []any{map[string]any{"type": "text", "text": s}}
			}
		}
		out = append(out, m)
	}
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	if m == nil {
		return map[string]any{}
	}
	return m
}

// TestPiRoundTrip: the file pi wrote, imported and exported back with
// --format pi, has every line with every field it had.
func TestPiRoundTrip(t *testing.T) {
	c := client(t)
	src := filepath.Join("testdata", "session.jsonl")
	id := importFile(t, c, src)
	var back bytes.Buffer
	if err := Export(context.Background(), c, id, Pi, &back); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "back.jsonl")
	if err := os.WriteFile(out, back.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	want := piLinesNormalized(t, mustRead(t, src))
	got := piLinesNormalized(t, back.Bytes())
	if len(got) != len(want) {
		t.Fatalf("%d lines back, %d in pi's file", len(got), len(want))
	}
	for i := range want {
		w, _ := json.Marshal(want[i])
		g, _ := json.Marshal(got[i])
		if string(w) != string(g) {
			t.Errorf("line %d:\n got  %s\n want %s", i+1, g, w)
		}
	}
	// And the pi file imports again to the same context.
	again := importFile(t, c, out)
	a, err := c.GetContext(context.Background(), &agentdv1.GetContextRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.GetContext(context.Background(), &agentdv1.GetContextRequest{SessionId: again})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(agentdContextLines(a.GetContext()), "\n") != strings.Join(agentdContextLines(b.GetContext()), "\n") {
		t.Fatal("the re-imported pi file gives another context")
	}
}

// Files of pi's older versions migrate as pi migrates them: version 1 had
// no ids (each entry follows the one before; a compaction named its first
// kept entry by index), version 2 called custom messages "hookMessage".
func TestPiMigration(t *testing.T) {
	v1 := `{"type":"session","id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}
{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}
{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"hookMessage","customType":"note","content":"n","display":true,"timestamp":2}}
{"type":"compaction","timestamp":"2025-01-01T00:00:03.000Z","summary":"s","firstKeptEntryIndex":2,"tokensBefore":10}
`
	recs, err := ReadPi(strings.NewReader(v1))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || recs[0].GetHeader().GetLeafEntryId() != "v1-3" {
		t.Fatalf("records %v", recs)
	}
	e1, e2, e3 := recs[1].GetEntry(), recs[2].GetEntry(), recs[3].GetEntry()
	if e1.GetId() != "v1-1" || e1.GetParentId() != "" || e2.GetParentId() != "v1-1" || e3.GetParentId() != "v1-2" {
		t.Fatalf("ids and parents: %v %v %v", e1, e2, e3)
	}
	if c := e2.GetMessage().GetCustom(); c.GetCustomType() != "note" || !c.GetVisibleInUi() {
		t.Fatalf("a hookMessage becomes a custom message: %v", e2)
	}
	if s := e3.GetMessage().GetCompactionSummary(); s.GetFirstKeptEntryId() != "v1-2" {
		t.Fatalf("firstKeptEntryIndex 2 names the second entry: %v", s)
	}
	if _, err := ReadPi(strings.NewReader(`{"type":"message"}`)); err == nil {
		t.Fatal("a file without a session header was read")
	}
}

// client connects to a real agentd started for the test.
func client(t *testing.T) agentdv1.AgentServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(servicetest.Start(t, agent.Options{}), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentdv1.NewAgentServiceClient(conn)
}

// importFile imports a session file and returns the new session's id.
func importFile(t *testing.T, c agentdv1.AgentServiceClient, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sess, err := Import(context.Background(), c, f)
	if err != nil {
		t.Fatalf("import %s: %v", path, err)
	}
	return sess.GetId()
}

// An MCP tools snapshot, which pi has no kind for, is exported as a custom
// entry holding it.
func TestPiLineOfMCPSnapshot(t *testing.T) {
	e := &agentdv1.Entry{Id: "s1", ParentId: "p", Payload: &agentdv1.Entry_McpTools{McpTools: &agentdv1.McpToolsSnapshot{
		Server: "fs", Tools: []*agentdv1.McpTool{{Name: "read_file", Description: "Reads."}}}}}
	line, err := piLine(e)
	if err != nil {
		t.Fatal(err)
	}
	b, err := line.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	data, _ := got["data"].(map[string]any)
	tools, _ := data["tools"].([]any)
	if got["type"] != "custom" || got["customType"] != "agentd.mcp_tools" || got["parentId"] != "p" || data["server"] != "fs" || len(tools) != 1 {
		t.Fatalf("line %s", b)
	}
}
