// Package wiretest serves recorded wire streams over httptest so that each
// adapter is tested through its real SDK client, and records the request
// bodies the SDK sends so tests can assert on them byte for byte.
package wiretest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// Reply is one scripted HTTP answer.
type Reply struct {
	// Status defaults to 200.
	Status int
	// Header is added to the response; Content-Type defaults to
	// text/event-stream.
	Header map[string]string
	// Body is written and flushed at once.
	Body string
	// Hang keeps the response open after Body until the client goes away,
	// like a server that stalls mid-stream.
	Hang bool
	// NoHeaders sends nothing at all until the client goes away, like a
	// server that accepted the connection and never answered.
	NoHeaders bool
}

// Request is what the server received.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// Server answers requests with its replies in order; extra requests get 500.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	replies  []Reply
	requests []Request
	// Sent is signalled (non-blocking, buffered) each time a Hang reply has
	// flushed its body, so a test can cancel at a known point.
	Sent chan struct{}
}

// New starts a server; it is closed when the test ends.
func New(t testing.TB, replies ...Reply) *Server {
	s := &Server{replies: replies, Sent: make(chan struct{}, 16)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	var rep Reply
	if len(s.replies) > 0 {
		rep = s.replies[0]
		s.replies = s.replies[1:]
	} else {
		rep = Reply{Status: 500, Header: map[string]string{"Content-Type": "application/json"}, Body: `{"error":{"message":"wiretest: no reply scripted"}}`}
	}
	s.mu.Unlock()
	if rep.NoHeaders {
		<-r.Context().Done()
		return
	}
	if rep.Header["Content-Type"] == "" {
		w.Header().Set("Content-Type", "text/event-stream")
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	if rep.Status == 0 {
		rep.Status = http.StatusOK
	}
	w.WriteHeader(rep.Status)
	_, _ = io.WriteString(w, rep.Body)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if rep.Hang {
		select {
		case s.Sent <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// File reads a testdata file or fails the test.
func File(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// JSON is a reply with a JSON body and a status.
func JSON(status int, body string, header ...string) Reply {
	h := map[string]string{"Content-Type": "application/json"}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	return Reply{Status: status, Header: h, Body: body}
}

// Drain ranges over a stream and returns every event.
func Drain(s provider.Stream) []provider.Event {
	var evs []provider.Event
	for ev := range s {
		evs = append(evs, ev)
	}
	return evs
}

// Final is the message of the last event, nil when there is none.
func Final(evs []provider.Event) *agentdv1.AssistantMessage {
	if len(evs) == 0 {
		return nil
	}
	return evs[len(evs)-1].Message
}

// Types lists the event type names, for compact assertions.
func Types(evs []provider.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type.String()
	}
	return out
}

// User is a user message with one text block.
func User(text string) *agentdv1.Message {
	return &agentdv1.Message{Role: &agentdv1.Message_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{
		{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: text}}}}}}}
}

// Assistant wraps an assistant message.
func Assistant(m *agentdv1.AssistantMessage) *agentdv1.Message {
	return &agentdv1.Message{Role: &agentdv1.Message_Assistant{Assistant: m}}
}

// ToolResult is a successful text tool result.
func ToolResult(id, name, text string) *agentdv1.Message {
	return &agentdv1.Message{Role: &agentdv1.Message_ToolResult{ToolResult: &agentdv1.ToolResultMessage{
		ToolCallId: id, ToolName: name, Content: []*agentdv1.ContentBlock{
			{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: text}}}}}}}
}

// CancelAfter drains a stream, cancelling cancel right after the first event
// of type at, so an abort lands at a known point.
func CancelAfter(s provider.Stream, at provider.EventType, cancel func()) []provider.Event {
	var evs []provider.Event
	for ev := range s {
		evs = append(evs, ev)
		if ev.Type == at {
			cancel()
		}
	}
	return evs
}

// Retry makes a call the way the agent loop does under policy: after each
// failed answer the policy retries it calls again (without waiting). It
// returns the last answer, the failed ones before it, and the waits the
// policy chose.
func Retry(policy provider.RetryPolicy, call func() provider.Stream) (final *agentdv1.AssistantMessage, failed []*agentdv1.AssistantMessage, waits []time.Duration) {
	for attempt := 1; ; attempt++ {
		var last provider.Event
		for ev := range call() {
			last = ev
		}
		if last.Type != provider.EventError {
			return last.Message, failed, waits
		}
		d, ok := policy.Decide(last.Message, attempt, last.RetryAfter)
		if !ok {
			return last.Message, failed, waits
		}
		failed = append(failed, last.Message)
		waits = append(waits, d)
	}
}

// Replayed is stream with the context replayed for the call's model first,
// as the agent loop sends every call: the adapters take a replayed context
// and do not replay it again.
func Replayed(stream provider.StreamFunc) provider.StreamFunc {
	return func(ctx context.Context, model provider.Model, c *agentdv1.Context, opts provider.Options) provider.Stream {
		replayed := &agentdv1.Context{SystemPrompt: c.GetSystemPrompt(), Messages: provider.Replay(c.GetMessages(), model), Tools: c.GetTools()}
		return stream(ctx, model, replayed, opts)
	}
}
