package uistream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Paths the handler serves.
const (
	// AGUIPath streams AG-UI events.
	AGUIPath = "/v1/ui/agui"
	// AISDKPath streams the AI SDK's UI message stream.
	AISDKPath = "/v1/ui/aisdk"
)

// maxBodyBytes bounds a request body: a prompt is bounded by the
// service's own limits, but the body may carry a chat's whole history
// (AG-UI and the AI SDK send it), which the handler reads only the last
// user message of.
const maxBodyBytes = 16 << 20

// Options configure NewHandler.
type Options struct {
	// Logger receives a line per stream that failed after it started;
	// nil discards them.
	Logger *slog.Logger
	// Keepalive is how often an idle stream gets an SSE comment, so that
	// proxies keep it open while a tool runs; default 15s.
	Keepalive time.Duration
}

// handler serves both protocols.
type handler struct {
	client agentdv1.AgentServiceClient
	opts   Options
}

// NewHandler returns the handler of AGUIPath and AISDKPath over client
// (normally the server's in-process connection: see
// service.Server.InProcess). Mount it at both paths, or at "/v1/ui/".
//
// POST runs a prompt: a JSON body with sessionId and text, and optionally
// requestId (the PromptRequest.request_id, which makes the call
// idempotent); AG-UI's RunAgentInput (threadId, runId, messages) and the
// AI SDK chat request (id, messages) are accepted too, the last user
// message being the prompt. A POST with resume entries answers interrupts
// instead (see resumeEntry) and streams the run on from them. GET
// attaches to a run: ?sessionId=...&runId=... (runId optional: the
// session's active run). The run is detached from the HTTP stream: a
// dropped connection does not abort it, and Last-Event-ID resumes the
// stream exactly after the event it names.
func NewHandler(client agentdv1.AgentServiceClient, opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Keepalive <= 0 {
		opts.Keepalive = 15 * time.Second
	}
	return &handler{client: client, opts: opts}
}

// protocol is one of the two streams.
type protocol struct {
	name   string
	newP   func() projector
	header func(http.Header)
	// done is written after the last event, when the protocol has one.
	done string
}

var (
	aguiProtocol  = protocol{name: "agui", newP: func() projector { return newAGUIProjector() }}
	aisdkProtocol = protocol{name: "aisdk", newP: func() projector { return newAISDKProjector() }, done: "[DONE]",
		header: func(h http.Header) { h.Set("X-Vercel-Ai-Ui-Message-Stream", "v1") }}
)

// ServeHTTP implements http.Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var proto protocol
	reconnecting := reconnectSession(r.URL.Path)
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case AGUIPath:
		proto = aguiProtocol
	case AISDKPath:
		proto = aisdkProtocol
	default:
		if reconnecting != "" {
			proto = aisdkProtocol
			break
		}
		writeError(w, status.Errorf(codes.NotFound, "no stream at %s; the streams are %s and %s", r.URL.Path, AGUIPath, AISDKPath))
		return
	}
	if reconnecting != "" && r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, status.Errorf(codes.Unimplemented, "method %s: %s/<session id>/stream takes GET (useChat's reconnect)", r.Method, AISDKPath))
		return
	}
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET, POST")
		writeError(w, status.Errorf(codes.Unimplemented, "method %s: POST runs a prompt, GET attaches to a run", r.Method))
		return
	}
	// The caller's credentials go with every call, so agentd's own
	// authentication and tenant scoping decide, as for a gRPC client.
	ctx := r.Context()
	if auth := r.Header.Get("Authorization"); auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cur, err := parseCursor(r.Header.Get("Last-Event-ID"))
	if err != nil {
		writeError(w, invalid("Last-Event-ID", "%v", err))
		return
	}
	var stream grpc.ServerStreamingClient[agentdv1.AgentEvent]
	if reconnecting != "" {
		stream, err = h.reconnect(ctx, reconnecting)
	} else {
		stream, cur, err = h.open(ctx, r, cur)
	}
	if errors.Is(err, errNoActiveRun) {
		writeNoActiveRun(w)
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	h.stream(ctx, w, proto, stream, cur)
}

// promptBody is a POST's body: agentd's own fields, and those of AG-UI's
// RunAgentInput and the AI SDK's chat request it reads.
type promptBody struct {
	SessionID string `json:"sessionId"`
	// ThreadID is AG-UI's name of the session.
	ThreadID string `json:"threadId"`
	// ID is the AI SDK's chat id: the session.
	ID   string `json:"id"`
	Text string `json:"text"`
	// RequestID makes the prompt idempotent: a retry (or a resumed POST
	// with Last-Event-ID) streams the run the first call started.
	RequestID string `json:"requestId"`
	// RunID is AG-UI's id of the run it starts: the request id.
	RunID    string            `json:"runId"`
	Messages []json.RawMessage `json:"messages"`
	Resume   []resumeEntry     `json:"resume"`
}

// chatMessage is the part of an AG-UI or AI SDK message the handler
// reads.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Parts   []uiPart        `json:"parts"`
}

// text is the message's text: AG-UI's content (a string, or parts of type
// text) or the AI SDK's text parts.
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var b strings.Builder
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) == nil {
		for _, p := range parts {
			if p.Type == "text" {
				b.WriteString(p.Text)
			}
		}
	}
	for _, p := range m.Parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// open starts the call whose events the request streams: Attach for a
// GET or a resume, Prompt for a POST; the cursor may move past events the
// client has (the interrupts it answers).
func (h *handler) open(ctx context.Context, r *http.Request, cur cursor) (grpc.ServerStreamingClient[agentdv1.AgentEvent], cursor, error) {
	if r.Method == http.MethodGet {
		q := r.URL.Query()
		session := q.Get("sessionId")
		if session == "" {
			return nil, cur, invalid("sessionId", "required: the query parameter sessionId names the session whose run to stream")
		}
		s, err := h.client.Attach(ctx, &agentdv1.AttachRequest{SessionId: session, RunId: q.Get("runId")})
		return s, cur, err
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, cur, status.Errorf(codes.Canceled, "read the body: %v", err)
	}
	if len(raw) > maxBodyBytes {
		return nil, cur, invalid("body", "larger than %d bytes", maxBodyBytes)
	}
	var body promptBody
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&body); err != nil {
		return nil, cur, invalid("body", "not a JSON object with sessionId and text: %v", err)
	}
	session := firstOf(body.SessionID, body.ThreadID, body.ID)
	if session == "" {
		return nil, cur, invalid("sessionId", "required (AG-UI's threadId and the AI SDK's id are read as it too)")
	}
	if len(body.Resume) > 0 {
		return h.resume(ctx, session, body.Resume, cur, false)
	}
	text := body.Text
	if text == "" && len(body.Messages) > 0 {
		var last chatMessage
		field := fmt.Sprintf("messages[%d]", len(body.Messages)-1)
		if err := json.Unmarshal(body.Messages[len(body.Messages)-1], &last); err != nil {
			return nil, cur, invalid(field, "not a message: %v", err)
		}
		if last.Role == "assistant" && len(last.Parts) > 0 {
			// useChat sends the conversation back, ending with the
			// assistant's message, once the user answered what it asked.
			entries, err := nativeAnswers(field, last)
			if err != nil {
				return nil, cur, err
			}
			return h.resume(ctx, session, entries, cur, true)
		}
		if last.Role != "user" {
			return nil, cur, invalid(fmt.Sprintf("messages[%d].role", len(body.Messages)-1), "%q: the last message must be the user's prompt (or send resume entries to answer an interrupt)", last.Role)
		}
		text = last.text()
	}
	if text == "" {
		return nil, cur, invalid("text", "required: the prompt's text (or a last user message in messages)")
	}
	requestID := firstOf(body.RequestID, body.RunID)
	if requestID == "" && (cur != cursor{}) {
		return nil, cur, invalid("requestId", "a POST that resumes with Last-Event-ID must carry the requestId of the first one, so it streams that run instead of starting another; or GET %s?sessionId=...&runId=...", r.URL.Path)
	}
	s, err := h.client.Prompt(ctx, &agentdv1.PromptRequest{SessionId: session, RequestId: requestID, Detach: true,
		Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: text}}}}})
	return s, cur, err
}

// resume answers the interrupts and attaches to their run after them.
// With skipAnswered an interrupt answered before is passed over (useChat
// sends its answers again with every later request of the same message).
func (h *handler) resume(ctx context.Context, session string, entries []resumeEntry, cur cursor, skipAnswered bool) (grpc.ServerStreamingClient[agentdv1.AgentEvent], cursor, error) {
	runID := ""
	var before error // an answer taken before, when skipAnswered
	answered := 0
	for i, e := range entries {
		field := fmt.Sprintf("resume[%d]", i)
		in, err := answer(ctx, h.client, session, field, e)
		switch {
		case err == nil:
			answered++
		case skipAnswered && answeredBefore(err):
			before = err
		default:
			return nil, cur, err
		}
		if runID != "" && in.runID != runID {
			return nil, cur, invalid(field+".interruptId", "interrupt of run %q, but resume[0] is of run %q: answer one run's interrupts per request", in.runID, runID)
		}
		runID = in.runID
		// The client has every part up to the interrupt's: go on after it.
		if in.seq > cur.seq || (in.seq == cur.seq && !cur.whole) {
			cur = cursor{seq: in.seq, whole: true}
		}
	}
	if answered == 0 && before != nil {
		// Nothing new: streaming the run on would end at the same wait,
		// and useChat would send the same answers again, forever.
		return nil, cur, before
	}
	s, err := h.client.Attach(ctx, &agentdv1.AttachRequest{SessionId: session, RunId: runID})
	return s, cur, err
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// stream projects the run's events from its first and sends those after
// cur, until a final part or the end of the run.
func (h *handler) stream(ctx context.Context, w http.ResponseWriter, proto protocol, stream grpc.ServerStreamingClient[agentdv1.AgentEvent], cur cursor) {
	out := newSSEWriter(w, proto.header)
	proj := proto.newP()
	// The first event decides between an error answer and a stream.
	ev, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeError(w, err)
		return
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(h.opts.Keepalive)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if out.keepalive() != nil {
					return
				}
			}
		}
	}()
	sent := false
	finish := func() {
		if sent && proto.done != "" {
			_ = out.raw(proto.done)
		}
		if !sent {
			// Everything the run has is the client's already.
			w.WriteHeader(http.StatusNoContent)
		}
	}
	var last *agentdv1.AgentEvent // the last event, its parts, and what was open before them
	var lastParts, openBefore []part
	for {
		parts := proj.project(ev)
		last, lastParts = ev, parts
		if !sent {
			openBefore = slices.Clone(out.open)
		}
		for i, p := range parts {
			if cur.covers(ev.GetSeq(), i) {
				out.skip(p)
				continue
			}
			if err := out.send(p, eventID(ev.GetSeq(), i, len(parts))); err != nil {
				return // the client went away; the run goes on (detached)
			}
			sent = true
			if p.final {
				finish()
				return
			}
		}
		if ev, err = stream.Recv(); err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) && !sent && last.GetSeq() < cur.seq && last.GetAgentEnd() != nil {
		// The client saw events the log lost in a crash (they stream
		// before they are stored); the repaired run's end took a seq the
		// client has. It gets that end all the same, after what was open.
		out.open = openBefore
		for i, p := range lastParts {
			if out.send(p, eventID(last.GetSeq(), i, len(lastParts))) != nil {
				return
			}
			sent = true
		}
	}
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		finish()
		return
	}
	h.opts.Logger.WarnContext(ctx, "UI stream failed", "protocol", proto.name, "err", err)
	if !sent {
		// Nothing sent yet: the status can still say what went wrong.
		writeError(w, err)
		return
	}
	for _, p := range proj.failed(err) {
		if out.send(p, "") != nil {
			return
		}
	}
	finish()
}
