package service_test

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence/sqlite"
	"github.com/agentd/agentd/service"
)

// fileHolds reports whether any of the database's files holds b.
func fileHolds(t *testing.T, dbPath string, b []byte) bool {
	t.Helper()
	for _, f := range sqlite.Files(dbPath) {
		data, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(data, b) {
			return true
		}
	}
	return false
}

// RedactEntries turns a conversation holding a card number into
// tombstones: the transcript, the context, a fork and an export no longer
// hold it, the tool call still pairs with its result, the session goes on,
// a notice records who and why, and the database files no longer hold the
// bytes. Unknown ids and a busy session are refused.
func TestRedactEntries(t *testing.T) {
	const secret = "4111-1111-1111-1111"
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	ws := t.TempDir()
	id := h.createSession(&agentdv1.SessionConfig{
		WorkspaceRoot: ws,
		Tools:         []*agentdv1.Tool{{Name: "read_file"}},
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
			toolCallAnswer(t, "call_1", "read_file", map[string]any{"path": "card-" + secret + ".txt"}),
			textAnswer("I noted your card " + secret + "."),
		}},
	})
	h.prompt(id, "my card is "+secret)
	// The scripted answers held the number too: the session's model now
	// answers without it.
	if _, err := h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.faux"}},
		Config: &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{textAnswer("-"), textAnswer("-"), textAnswer("Still here.")}}}}); err != nil {
		t.Fatal(err)
	}
	before := h.transcript(id)
	if len(before) != 4 || !fileHolds(t, h.dbPath, []byte(secret)) {
		t.Fatalf("%d entries; the file holds the secret: %v (the scan must see it before)", len(before), fileHolds(t, h.dbPath, []byte(secret)))
	}
	var ids []string
	for _, e := range before {
		ids = append(ids, e.GetId())
	}

	_, err := h.client.RedactEntries(h.ctx(), &agentdv1.RedactEntriesRequest{SessionId: id, EntryIds: []string{ids[0], "nope"}, Reason: "forget"})
	wantCode(t, err, codes.NotFound, `"nope"`)
	_, err = h.client.RedactEntries(h.ctx(), &agentdv1.RedactEntriesRequest{SessionId: id, EntryIds: ids})
	wantCode(t, err, codes.InvalidArgument, "reason")
	if got := h.transcript(id); len(got) != 4 {
		t.Fatalf("a refused redaction changed the transcript: %d entries", len(got))
	}

	resp, err := h.client.RedactEntries(h.ctx(), &agentdv1.RedactEntriesRequest{SessionId: id, EntryIds: ids,
		Reason: "the user asked to be forgotten (ticket 4711)", RedactedBy: "support@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetEntries()); n != 5 || resp.GetEntries()[4].GetRedactionNotice().GetReason() != "the user asked to be forgotten (ticket 4711)" {
		t.Fatalf("the response: %d entries, last %v", n, resp.GetEntries()[n-1])
	}
	after := h.transcript(id)
	for i, e := range after {
		text := prototext.Format(e)
		if strings.Contains(text, secret) {
			t.Fatalf("entry %d still holds the secret: %s", i, text)
		}
		if i < 4 && (e.GetId() != ids[i] || e.GetRedaction().GetRedactedBy() != "support@example.com") {
			t.Fatalf("entry %d: %s", i, text)
		}
	}
	call := after[1].GetMessage().GetAssistant().GetContent()
	result := after[2].GetMessage().GetToolResult()
	if len(call) != 1 || call[0].GetToolCall().GetId() != "call_1" || result.GetToolCallId() != "call_1" ||
		result.GetContent()[0].GetText().GetText() != agent.RedactedText {
		t.Fatalf("the tool call and its result: %v / %v", call, result)
	}
	if c := prototext.Format(h.context(id)); strings.Contains(c, secret) || strings.Contains(c, "redaction_notice") {
		t.Fatalf("the context: %s", c)
	}
	fork, err := h.client.ForkSession(h.ctx(), &agentdv1.ForkSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.transcript(fork.GetSession().GetId()); len(got) != 5 || strings.Contains(prototext.Format(got[0]), secret) {
		t.Fatalf("the fork: %d entries", len(got))
	}
	st, err := h.client.ExportSession(h.ctx(), &agentdv1.ExportSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(prototext.Format(rec), secret) {
			t.Fatalf("the export holds the secret: %v", rec)
		}
	}
	evs := h.prompt(id, "are you there?")
	if k := kinds(evs); !strings.HasSuffix(k, "turn_end agent_end") {
		t.Fatalf("the session after redaction: %s", k)
	}
	deadline := time.Now().Add(30 * time.Second)
	for fileHolds(t, h.dbPath, []byte(secret)) {
		if time.Now().After(deadline) {
			t.Fatal("the database's files still hold the redacted bytes")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A session with an active run is not redacted.
func TestRedactEntriesRefusedWhileRunning(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	schema := mustStruct(t, map[string]any{"type": "object"})
	id := h.createSession(&agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{{Name: "ask", Description: "asks the user", Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT, Parameters: schema}},
		Faux:  &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{toolCallAnswer(t, "c1", "ask", map[string]any{}), textAnswer("ok")}},
	})
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("hi")})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetToolCallRequested() != nil {
			break
		}
	}
	first := h.transcript(id)[0].GetId()
	_, err = h.client.RedactEntries(h.ctx(), &agentdv1.RedactEntriesRequest{SessionId: id, EntryIds: []string{first}, Reason: "x"})
	wantCode(t, err, codes.FailedPrecondition, "RedactEntries needs an idle session")
	if _, err := h.client.SubmitToolResult(h.ctx(), &agentdv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "c1", Content: texts("done")}); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
}
