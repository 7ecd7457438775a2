package uistream_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/daemon"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
	"github.com/agentd/agentd/service/uistream"
)

// Tokens of two tenants.
const (
	aliceToken = "alice-token"
	bobToken   = "bob-token"
)

func grant(token, tenant string) service.TokenGrant {
	sum := sha256.Sum256([]byte(token))
	return service.TokenGrant{SHA256: hex.EncodeToString(sum[:]), Tenant: tenant, Role: service.RoleUser}
}

// fixture is an agentd with two tenants, its UI streams served over HTTP
// on loopback through the in-process connection, as cmd/agentd mounts
// them.
type fixture struct {
	t      *testing.T
	url    string
	client agentdv1.AgentServiceClient
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	auth := &service.AuthConfig{Tokens: []service.TokenGrant{grant(aliceToken, "alice"), grant(bobToken, "bob")}}
	d, err := daemon.New(context.Background(), filepath.Join(t.TempDir(), "agentd.db"), daemon.WithServerOptions(service.ServerOptions{Auth: auth}))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := d.InProcess()
	if err != nil {
		t.Fatal(err)
	}
	client := agentdv1.NewAgentServiceClient(conn)
	srv := httptest.NewServer(uistream.NewHandler(client, uistream.Options{}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		_ = conn.Close()
	})
	return &fixture{t: t, url: srv.URL, client: client}
}

func (f *fixture) ctx(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

// scriptedSession is alice's session whose faux model thinks, says a
// text, calls the client tool lookup (which needs approval), and answers
// with a text after its result.
func (f *fixture) scriptedSession() string {
	f.t.Helper()
	args, _ := structpb.NewStruct(map[string]any{"city": "Paris"})
	params, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}})
	first := &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{
		{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Thinking: "the user wants the weather"}}},
		{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: "Let me look that up."}}},
		{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: "call_1", Name: "lookup", Arguments: args}}},
	}}
	second := &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: "It is sunny in Paris."}}}}}
	resp, err := f.client.CreateSession(f.ctx(aliceToken), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		Faux:  &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{first, second}},
		Tools: []*agentdv1.Tool{{Name: "lookup", Description: "looks up the weather", Parameters: params, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT, Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK}},
	}})
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.GetSession().GetId()
}

// sseEvent is one server-sent event.
type sseEvent struct {
	ID   string
	Data string
}

// typ is the event's "type" field.
func (e sseEvent) typ() string {
	var v struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal([]byte(e.Data), &v)
	return v.Type
}

func (e sseEvent) field(name string) any {
	var v map[string]any
	_ = json.Unmarshal([]byte(e.Data), &v)
	return v[name]
}

// request sends a request with token (none when empty) and lastID as
// Last-Event-ID.
func (f *fixture) request(method, path, token, lastID, body string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

// stream sends a request that must answer with an event stream, and
// reads it to its end.
func (f *fixture) stream(method, path, token, lastID, body string) ([]sseEvent, http.Header) {
	f.t.Helper()
	resp := f.request(method, path, token, lastID, body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		f.t.Fatalf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		f.t.Fatalf("Content-Type %q", ct)
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Data != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		}
	}
	if err := sc.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out, resp.Header
}

func typesOf(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		if out[i] = e.typ(); out[i] == "" {
			out[i] = e.Data
		}
	}
	return out
}

// compact drops repeats of a type (the faux model streams in chunks of
// its own choosing), so a test can state the order of kinds.
func compact(types []string) []string { return slices.Compact(slices.Clone(types)) }

// interruptOf is the id of the interrupt a stream ended with.
func interruptOf(t *testing.T, protocol string, evs []sseEvent) string {
	t.Helper()
	last := evs[len(evs)-1]
	if protocol == "aisdk" {
		last = evs[len(evs)-2] // before [DONE]
		meta, _ := last.field("messageMetadata").(map[string]any)
		it, _ := meta["interrupt"].(map[string]any)
		id, _ := it["id"].(string)
		return id
	}
	outcome, _ := last.field("outcome").(map[string]any)
	its, _ := outcome["interrupts"].([]any)
	if len(its) != 1 {
		t.Fatalf("the stream did not end with one interrupt: %s", last.Data)
	}
	id, _ := its[0].(map[string]any)["id"].(string)
	return id
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// resumeBody answers interrupt id.
func resumeBody(session, id string, payload any) string {
	return mustJSON(map[string]any{"sessionId": session, "resume": []any{map[string]any{"interruptId": id, "status": "resolved", "payload": payload}}})
}

var (
	approve   = map[string]any{"decision": "APPROVAL_DECISION_ALLOWED"}
	toolReply = map[string]any{"content": []any{map[string]any{"text": map[string]any{"text": "sunny, 24°C"}}}}
)

// conversation runs the scripted session to its end through protocol:
// the prompt, the approval, the client tool's result. It returns the
// three streams.
func (f *fixture) conversation(protocol, session string) [3][]sseEvent {
	f.t.Helper()
	path := "/v1/ui/" + protocol
	var out [3][]sseEvent
	out[0], _ = f.stream("POST", path, aliceToken, "", mustJSON(map[string]any{"sessionId": session, "text": "weather in Paris?", "requestId": "r1"}))
	out[1], _ = f.stream("POST", path, aliceToken, "", resumeBody(session, interruptOf(f.t, protocol, out[0]), approve))
	out[2], _ = f.stream("POST", path, aliceToken, "", resumeBody(session, interruptOf(f.t, protocol, out[1]), toolReply))
	return out
}

// checkIDs checks that ids are "<seq>" or "<seq>.<n>" in stream order.
func checkIDs(t *testing.T, evs []sseEvent) {
	t.Helper()
	prev := ""
	for _, e := range evs {
		if e.ID == "" {
			continue
		}
		if prev != "" && !idLess(prev, e.ID) {
			t.Errorf("id %s after %s", e.ID, prev)
		}
		prev = e.ID
	}
}

// idLess orders ids: "7.0" < "7.1" < "7" < "8.0".
func idLess(a, b string) bool {
	key := func(s string) (seq, n int) {
		seqText, nText, partial := strings.Cut(s, ".")
		seq = atoi(seqText)
		if !partial {
			return seq, 1 << 30
		}
		return seq, atoi(nText)
	}
	as, an := key(a)
	bs, bn := key(b)
	return as < bs || (as == bs && an < bn)
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

func TestAGUIProjection(t *testing.T) {
	f := newFixture(t)
	session := f.scriptedSession()
	streams := f.conversation("agui", session)
	want := [3][]string{
		{"RUN_STARTED", "STATE_SNAPSHOT", "STEP_STARTED",
			"REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END", "REASONING_END",
			"TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
			"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "STEP_FINISHED", "RUN_FINISHED"},
		// Each interrupt closes the run's step; the resumed run opens it again.
		{"RUN_STARTED", "STEP_STARTED", "STEP_FINISHED", "RUN_FINISHED"},
		{"RUN_STARTED", "STEP_STARTED", "TOOL_CALL_RESULT", "STEP_FINISHED", "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
			"STEP_FINISHED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"},
	}
	for i, evs := range streams {
		if got := compact(typesOf(evs)); !slices.Equal(got, want[i]) {
			t.Errorf("stream %d:\n got %v\nwant %v", i, got, want[i])
		}
		checkIDs(t, evs)
		for _, e := range evs {
			if e.ID == "" {
				t.Errorf("stream %d: event without id: %s", i, e.Data)
			}
		}
	}
	first := streams[0]
	if got := first[0].field("threadId"); got != session {
		t.Errorf("RUN_STARTED threadId %v, want %s", got, session)
	}
	if !strings.HasPrefix(interruptOf(t, "agui", streams[0]), "approval/") || !strings.HasPrefix(interruptOf(t, "agui", streams[1]), "client_tool/") {
		t.Errorf("interrupts %s, %s: want an approval, then a client tool", interruptOf(t, "agui", streams[0]), interruptOf(t, "agui", streams[1]))
	}
	var text strings.Builder
	for _, e := range streams[2] {
		if e.typ() == "TEXT_MESSAGE_CONTENT" {
			text.WriteString(e.field("delta").(string))
		}
		if e.typ() == "TOOL_CALL_RESULT" && (e.field("toolCallId") != "call_1" || e.field("content") != "sunny, 24°C") {
			t.Errorf("TOOL_CALL_RESULT %s", e.Data)
		}
	}
	if text.String() != "It is sunny in Paris." {
		t.Errorf("answer %q", text.String())
	}
	last := streams[2][len(streams[2])-1]
	if outcome, _ := last.field("outcome").(map[string]any); outcome["type"] != "success" {
		t.Errorf("last event %s, want RUN_FINISHED with success", last.Data)
	}
	snapshot := streams[2][len(streams[2])-2]
	msgs, _ := snapshot.field("messages").([]any)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if !slices.Equal(roles, []string{"user", "assistant", "tool", "assistant"}) {
		t.Errorf("MESSAGES_SNAPSHOT roles %v", roles)
	}
}

// TestResumeWithLastEventID reads the finished run again by GET, from the
// start and from ids in the middle of the stream (an event's last part and
// one inside it): each read continues exactly after the id, with the
// blocks still open re-opened first (without ids).
func TestResumeWithLastEventID(t *testing.T) {
	for _, protocol := range []string{"agui", "aisdk"} {
		t.Run(protocol, func(t *testing.T) {
			f := newFixture(t)
			session := f.scriptedSession()
			streams := f.conversation(protocol, session)
			var live []sseEvent
			for _, s := range streams {
				for _, e := range s {
					if e.ID != "" {
						live = append(live, e)
					}
				}
			}
			runID := ""
			if protocol == "agui" {
				runID = streams[0][0].field("runId").(string)
			} else {
				runID = streams[0][0].field("messageId").(string)
			}
			path := "/v1/ui/" + protocol + "?sessionId=" + session + "&runId=" + runID
			// Read it all again, a stream at a time, each from the last id.
			var again []sseEvent
			last := ""
			for range 10 {
				evs, _ := f.stream("GET", path, aliceToken, last, "")
				for _, e := range evs {
					if e.ID != "" {
						again = append(again, e)
						last = e.ID
					}
				}
				if len(again) == len(live) {
					break
				}
			}
			if !slices.Equal(again, live) {
				t.Fatalf("GET read %d events, POST %d: %v\nvs %v", len(again), len(live), typesOf(again), typesOf(live))
			}
			// From the middle: a delta's id inside an open text block.
			for i, e := range live {
				if !(e.typ() == "TEXT_MESSAGE_CONTENT" || e.typ() == "text-delta") || i+1 >= len(live) {
					continue
				}
				evs, _ := f.stream("GET", path, aliceToken, e.ID, "")
				var reopened, next []sseEvent
				for _, x := range evs {
					if x.ID == "" && len(next) == 0 {
						reopened = append(reopened, x)
					} else if x.ID != "" {
						next = append(next, x)
					}
				}
				if len(next) == 0 || next[0] != live[i+1] {
					t.Fatalf("after %s: first event %v, want %v", e.ID, next, live[i+1])
				}
				types := typesOf(reopened)
				wantOpen := map[string]string{"agui": "TEXT_MESSAGE_START", "aisdk": "text-start"}[protocol]
				if !slices.Contains(types, wantOpen) {
					t.Errorf("after %s the open text block was not re-opened: %v", e.ID, types)
				}
				break
			}
			// An id past the run's last event (its log lost a tail in a
			// crash, and the repaired end took an earlier seq): the end
			// comes all the same, after the run is opened again.
			evs, _ := f.stream("GET", path, aliceToken, "100000", "")
			wantTail := map[string][]string{"agui": {"RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"}, "aisdk": {"start", "finish", "[DONE]"}}[protocol]
			if got := typesOf(evs); !slices.Equal(got, wantTail) {
				t.Errorf("after an id past the end: %v, want %v", got, wantTail)
			}
			if end := live[len(live)-1]; !slices.Contains(evs, end) {
				t.Errorf("after an id past the end the run's last event %v is missing: %v", end, evs)
			}
			// A partial id ("<seq>.<n>"): the rest of that event's parts follow.
			for i, e := range live {
				if !strings.Contains(e.ID, ".") {
					continue
				}
				evs, _ := f.stream("GET", path, aliceToken, e.ID, "")
				var next []sseEvent
				for _, x := range evs {
					if x.ID != "" {
						next = append(next, x)
					}
				}
				if len(next) == 0 || next[0] != live[i+1] {
					t.Fatalf("after %s: first event %v, want %v", e.ID, next, live[i+1])
				}
				break
			}
		})
	}
}

func TestAISDKProjection(t *testing.T) {
	f := newFixture(t)
	session := f.scriptedSession()
	resp := f.request("POST", "/v1/ui/aisdk", aliceToken, "", mustJSON(map[string]any{"sessionId": session, "text": "weather?", "requestId": "r1"}))
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := resp.Header.Get("X-Vercel-Ai-Ui-Message-Stream"); got != "v1" {
		t.Errorf("x-vercel-ai-ui-message-stream %q, want v1", got)
	}
	f2 := newFixture(t)
	session = f2.scriptedSession()
	streams := f2.conversation("aisdk", session)
	want := [3][]string{
		{"start", "start-step", "reasoning-start", "reasoning-delta", "reasoning-end", "text-start", "text-delta", "text-end",
			"tool-input-start", "tool-input-delta", "tool-input-available", "tool-approval-request", "finish-step", "data-agentd-interrupt", "finish", "[DONE]"},
		{"start", "data-agentd-interrupt", "finish", "[DONE]"},
		{"start", "tool-output-available", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish", "[DONE]"},
	}
	for i, evs := range streams {
		if got := compact(typesOf(evs)); !slices.Equal(got, want[i]) {
			t.Errorf("stream %d:\n got %v\nwant %v", i, got, want[i])
		}
		checkIDs(t, evs)
	}
	for _, e := range streams[0] {
		if e.typ() == "tool-approval-request" && (e.field("toolCallId") != "call_1" || !strings.HasPrefix(e.field("approvalId").(string), "approval/")) {
			t.Errorf("tool-approval-request %s", e.Data)
		}
		if e.typ() == "tool-input-available" {
			if in, _ := e.field("input").(map[string]any); in["city"] != "Paris" {
				t.Errorf("tool-input-available %s", e.Data)
			}
		}
	}
	end := streams[2][len(streams[2])-2]
	meta, _ := end.field("messageMetadata").(map[string]any)
	if end.field("finishReason") != "stop" || meta["outcome"] != "RUN_OUTCOME_COMPLETED" || meta["sessionId"] != session {
		t.Errorf("finish %s", end.Data)
	}
}

// TestRefusals: the streams refuse as the gRPC calls do, with the
// status and a JSON error naming the reason.
func TestRefusals(t *testing.T) {
	f := newFixture(t)
	session := f.scriptedSession()
	prompt := mustJSON(map[string]any{"sessionId": session, "text": "hi"})
	for _, tc := range []struct {
		name, method, path, token, lastID, body string
		status                                  int
		reason, field                           string
	}{
		{"no credentials", "POST", "/v1/ui/agui", "", "", prompt, 401, "UNAUTHENTICATED", ""},
		{"unknown token", "GET", "/v1/ui/aisdk?sessionId=" + session, "nope", "", "", 401, "UNAUTHENTICATED", ""},
		{"another tenant's session", "POST", "/v1/ui/aisdk", bobToken, "", prompt, 404, "SESSION_NOT_FOUND", ""},
		{"another tenant attaches", "GET", "/v1/ui/agui?sessionId=" + session, bobToken, "", "", 404, "SESSION_NOT_FOUND", ""},
		{"no session", "POST", "/v1/ui/agui", aliceToken, "", `{"text":"hi"}`, 400, "INVALID_ARGUMENT", "sessionId"},
		{"no text", "POST", "/v1/ui/agui", aliceToken, "", mustJSON(map[string]any{"sessionId": session}), 400, "INVALID_ARGUMENT", "text"},
		{"not JSON", "POST", "/v1/ui/agui", aliceToken, "", `{`, 400, "INVALID_ARGUMENT", "body"},
		{"bad Last-Event-ID", "GET", "/v1/ui/agui?sessionId=" + session, aliceToken, "x", "", 400, "INVALID_ARGUMENT", "Last-Event-ID"},
		{"resumed POST without requestId", "POST", "/v1/ui/agui", aliceToken, "3", prompt, 400, "INVALID_ARGUMENT", "requestId"},
		{"bad interrupt id", "POST", "/v1/ui/agui", aliceToken, "", resumeBody(session, "nonsense", approve), 400, "INVALID_ARGUMENT", "resume[0].interruptId"},
		{"another tenant answers", "POST", "/v1/ui/agui", bobToken, "", resumeBody(session, "approval/run_x/3/call_1", approve), 404, "SESSION_NOT_FOUND", ""},
		{"GET without session", "GET", "/v1/ui/agui", aliceToken, "", "", 400, "INVALID_ARGUMENT", "sessionId"},
		{"no active run", "GET", "/v1/ui/agui?sessionId=" + session, aliceToken, "", "", 400, "RUN_NOT_ACTIVE", ""},
		{"useChat reconnect, another tenant", "GET", "/v1/ui/aisdk/" + session + "/stream", bobToken, "", "", 404, "SESSION_NOT_FOUND", ""},
		{"useChat reconnect, no credentials", "GET", "/v1/ui/aisdk/" + session + "/stream", "", "", "", 401, "UNAUTHENTICATED", ""},
		{"useChat reconnect by POST", "POST", "/v1/ui/aisdk/" + session + "/stream", aliceToken, "", prompt, 501, "", ""},
		{"not a stream", "GET", "/v1/ui/aisdk/" + session + "/other", aliceToken, "", "", 404, "", ""},
		{"useChat answers nothing", "POST", "/v1/ui/aisdk", aliceToken, "", useChatBody(session, map[string]any{"type": "text", "text": "hi"}), 400, "INVALID_ARGUMENT", "messages[1]"},
		{"useChat approval without a decision", "POST", "/v1/ui/aisdk", aliceToken, "",
			useChatBody(session, map[string]any{"type": "tool-lookup", "toolCallId": "call_1", "state": "approval-responded", "approval": map[string]any{"id": "approval/run_x/3/call_1"}}), 400, "INVALID_ARGUMENT", "messages[1].parts[0].approval"},
		{"useChat approval with a foreign id", "POST", "/v1/ui/aisdk", aliceToken, "",
			useChatBody(session, map[string]any{"type": "tool-lookup", "toolCallId": "call_1", "state": "approval-responded", "approval": map[string]any{"id": "42", "approved": true}}), 400, "INVALID_ARGUMENT", "messages[1].parts[0].approval.id"},
		{"useChat answer for another tenant", "POST", "/v1/ui/aisdk", bobToken, "",
			useChatBody(session, map[string]any{"type": "tool-lookup", "toolCallId": "call_1", "state": "approval-responded", "approval": map[string]any{"id": "approval/run_x/3/call_1", "approved": true}}), 404, "SESSION_NOT_FOUND", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.request(tc.method, tc.path, tc.token, tc.lastID, tc.body)
			defer resp.Body.Close()
			var body struct {
				Error struct {
					Code, Reason, Message, Field string
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("%s: body not JSON: %v", resp.Status, err)
			}
			if resp.StatusCode != tc.status || body.Error.Reason != tc.reason || body.Error.Field != tc.field || body.Error.Message == "" {
				t.Errorf("%s %+v, want %d with reason %s, field %q", resp.Status, body.Error, tc.status, tc.reason, tc.field)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

// useChatBody is the body useChat sends once the user answered: the chat
// id, the user's prompt and the assistant's message with these parts.
func useChatBody(session string, parts ...map[string]any) string {
	return mustJSON(map[string]any{"id": session, "trigger": "submit-message", "messages": []any{
		map[string]any{"id": "m1", "role": "user", "parts": []any{map[string]any{"type": "text", "text": "weather?"}}},
		map[string]any{"id": "m2", "role": "assistant", "parts": parts},
	}})
}
