package google_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/google"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

// TestStreamChunks covers chunk shapes the recorded streams do not: errors
// and blocks inside a 200 stream, SSE framing variants, arguments kept as
// sent.
func TestStreamChunks(t *testing.T) {
	const text = `data: {"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":1,"totalTokenCount":8},"responseId":"r1"}` + "\n\n"
	tests := []struct {
		name      string
		body      string
		stop      agentdv1.StopReason
		errPrefix string
		retryable bool
		texts     []string
		args      string
		input     int64 // usage survives every ending
	}{
		{"error chunk mid-stream keeps partial content",
			text + `data: {"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}` + "\n\n",
			agentdv1.StopReason_STOP_REASON_ERROR, "503 UNAVAILABLE: The model is overloaded.", true, []string{"Hi"}, "", 7},
		{"prompt blocked",
			`data: {"promptFeedback":{"blockReason":"PROHIBITED_CONTENT","blockReasonMessage":"no"},"usageMetadata":{"promptTokenCount":9,"totalTokenCount":9},"responseId":"r2"}` + "\n\n",
			agentdv1.StopReason_STOP_REASON_ERROR, "Prompt blocked: PROHIBITED_CONTENT: no", false, nil, "", 9},
		{"not an object",
			text + "data: [1,2]\n\n", agentdv1.StopReason_STOP_REASON_ERROR, "Stream error: malformed chunk", false, []string{"Hi"}, "", 7},
		{"comments, LF framing and a final event without blank line",
			": ping\n" + text + `data: {"candidates":[{"content":{"parts":[{"text":" there"}]},"finishReason":"STOP"}],"responseId":"r1"}`,
			agentdv1.StopReason_STOP_REASON_STOP, "", false, []string{"Hi there"}, "", 7},
		{"function call with id and escaped args",
			`data: {"candidates":[{"content":{"parts":[{"functionCall":{"id":"call-1","name":"write","args":{"path":"a\"b.txt","n":[1,2]}}}]},"finishReason":"STOP"}],"responseId":"r3"}` + "\n\n",
			agentdv1.StopReason_STOP_REASON_TOOL_USE, "", false, nil, `{"path":"a\"b.txt","n":[1,2]}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := wiretest.New(t, wiretest.Reply{Body: tt.body})
			evs := wiretest.Drain(newProvider(t, s).Stream(context.Background(), flash, ctxOf(wiretest.User("hi")), provider.Options{}))
			m := wiretest.Final(evs)
			if m.GetStopReason() != tt.stop || !strings.HasPrefix(m.GetErrorMessage(), tt.errPrefix) || (tt.errPrefix == "") != (m.GetErrorMessage() == "") ||
				provider.IsRetryable(m) != tt.retryable || m.GetUsage().GetInput() != tt.input {
				t.Fatalf("final = %v", m)
			}
			var texts []string
			for _, b := range m.GetContent() {
				if tx := b.GetText(); tx != nil {
					texts = append(texts, tx.GetText())
				}
			}
			if strings.Join(texts, "|") != strings.Join(tt.texts, "|") {
				t.Fatalf("texts = %q, want %q", texts, tt.texts)
			}
			if tt.args == "" {
				return
			}
			var delta string
			for _, ev := range evs {
				if ev.Type == provider.EventToolCallDelta {
					delta += ev.Delta
				}
			}
			tc := m.GetContent()[0].GetToolCall()
			if delta != tt.args || tc.GetId() != "call-1" || tc.GetArguments().AsMap()["path"] != `a"b.txt` {
				t.Fatalf("delta %s call %v", delta, tc)
			}
		})
	}
}

// TestHTTPClientTimeout checks that a configured http.Client.Timeout still
// bounds the whole call although the adapter reads the body itself, and
// does not cut a stream that finishes in time.
func TestHTTPClientTimeout(t *testing.T) {
	full := wiretest.File(t, "testdata/text.sse")
	// Larger than the socket and transport buffers, so that a call
	// cancelled while the adapter reads would fail to read it.
	var long strings.Builder
	for range 20000 {
		long.WriteString(`data: {"candidates":[{"content":{"parts":[{"text":"word "}],"role":"model"},"index":0}],"responseId":"r-long"}` + "\n\n")
	}
	long.WriteString(`data: {"candidates":[{"content":{"parts":[{"text":"end"}]},"finishReason":"STOP"}],"responseId":"r-long"}` + "\n\n")
	tests := []struct {
		name      string
		reply     wiretest.Reply
		timeout   time.Duration
		stop      agentdv1.StopReason
		errPrefix string
	}{
		{"long stream finishes in time", wiretest.Reply{Body: long.String()}, time.Minute, agentdv1.StopReason_STOP_REASON_STOP, ""},
		{"stalls mid-stream", wiretest.Reply{Body: full[:strings.Index(full, "\r\n\r\n")+4], Hang: true}, 300 * time.Millisecond, agentdv1.StopReason_STOP_REASON_ERROR, "Request timed out: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := wiretest.New(t, tt.reply)
			p, err := google.New(context.Background(), google.Config{APIKey: secret, BaseURL: s.URL, HTTPClient: &http.Client{Timeout: tt.timeout}})
			if err != nil {
				t.Fatal(err)
			}
			m := provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), flash, ctxOf(wiretest.User("hi")), provider.Options{}))
			if m.GetStopReason() != tt.stop || !strings.HasPrefix(m.GetErrorMessage(), tt.errPrefix) || m.GetContent()[0].GetText().GetText() == "" {
				t.Fatalf("stop %v error %q blocks %d", m.GetStopReason(), m.GetErrorMessage(), len(m.GetContent()))
			}
		})
	}
}
