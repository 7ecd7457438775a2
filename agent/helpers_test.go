package agent_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// stream is a run's events as a client of Prompt, Continue or Attach reads
// them: Follow in the background, its events queued for recv.
type stream struct {
	t      testing.TB
	runID  string
	cancel context.CancelFunc
	signal chan struct{}
	done   chan struct{}

	mu   sync.Mutex
	evs  []*agentdv1.AgentEvent
	next int
	err  error
}

// startRun starts a run and follows it from its first event; detach says
// whether the run goes on when the follower drops (as Prompt's detach).
func (h *harness) startRun(req agent.StartRequest, detach bool) *stream {
	h.t.Helper()
	runID, err := h.a.Start(context.Background(), req)
	if err != nil {
		h.t.Fatalf("Start: %v", err)
	}
	return h.attach(req.SessionID, runID, 0, agent.FollowOptions{AbortOnDrop: !detach})
}

// promptRun starts a run of a prompt of text, attached to its follower.
func (h *harness) promptRun(sessionID, text string) *stream {
	h.t.Helper()
	return h.startRun(agent.StartRequest{SessionID: sessionID, Prompt: user(text)}, false)
}

// attach follows a run (the active one for an empty runID) after seq
// after.
func (h *harness) attach(sessionID, runID string, after uint64, opts agent.FollowOptions) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{t: h.t, runID: runID, cancel: cancel, signal: make(chan struct{}, 1), done: make(chan struct{})}
	a := h.a
	go func() {
		err := a.Follow(ctx, sessionID, runID, after, opts, func(e agent.Event) error {
			ev, err := e.Decode()
			if err != nil {
				return err
			}
			s.mu.Lock()
			s.evs = append(s.evs, ev)
			s.mu.Unlock()
			select {
			case s.signal <- struct{}{}:
			default:
			}
			return nil
		})
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	}()
	h.t.Cleanup(func() { cancel(); <-s.done })
	return s
}

// recv returns the next event, or io.EOF after the last one, or Follow's
// error.
func (s *stream) recv() (*agentdv1.AgentEvent, error) {
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if s.next < len(s.evs) {
			ev := s.evs[s.next]
			s.next++
			s.mu.Unlock()
			return ev, nil
		}
		s.mu.Unlock()
		select {
		case <-s.signal:
			continue
		case <-s.done:
			s.mu.Lock()
			more, err := s.next < len(s.evs), s.err
			s.mu.Unlock()
			if more {
				continue
			}
			if err == nil {
				err = io.EOF
			}
			return nil, err
		case <-deadline.C:
			s.t.Fatalf("no event of run %s in 20s", s.runID)
		}
	}
}

// until reads events until pred matches one, returning all read.
func (s *stream) until(pred func(*agentdv1.AgentEvent) bool) []*agentdv1.AgentEvent {
	s.t.Helper()
	var evs []*agentdv1.AgentEvent
	for {
		ev, err := s.recv()
		if err != nil {
			s.t.Fatalf("stream ended before the awaited event: %v (after %s)", err, allKinds(evs))
		}
		evs = append(evs, ev)
		if pred(ev) {
			return evs
		}
	}
}

// drain reads the rest of the stream.
func (s *stream) drain() ([]*agentdv1.AgentEvent, error) {
	var evs []*agentdv1.AgentEvent
	for {
		ev, err := s.recv()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// rest is drain for a run that must end cleanly.
func (s *stream) rest() []*agentdv1.AgentEvent {
	s.t.Helper()
	evs, err := s.drain()
	if err != nil {
		s.t.Fatalf("run %s: %v after %s", s.runID, err, allKinds(evs))
	}
	return evs
}

// run prompts and returns the decoded events to agent_end.
func (h *harness) run(sessionID, text string) []*agentdv1.AgentEvent {
	h.t.Helper()
	_, evs := h.prompt(sessionID, text)
	return decode(h.t, evs)
}

// transcript is the session's path to its leaf.
func (h *harness) transcript(sessionID string) []*agentdv1.Entry {
	h.t.Helper()
	path, err := h.store.Path(context.Background(), sessionID)
	if err != nil {
		h.t.Fatalf("Path: %v", err)
	}
	return path
}

// context is what the session's model would receive next.
func (h *harness) context(sessionID string) *agentdv1.Context {
	h.t.Helper()
	return h.report(sessionID, "").Context
}

func (h *harness) report(sessionID, leaf string) *agent.ContextReport {
	h.t.Helper()
	rep, err := h.a.Context(context.Background(), sessionID, leaf)
	if err != nil {
		h.t.Fatalf("Context: %v", err)
	}
	return rep
}

func texts(ss ...string) []*agentdv1.ContentBlock {
	out := make([]*agentdv1.ContentBlock, len(ss))
	for i, s := range ss {
		out[i] = &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
	}
	return out
}

// allKinds names every event's kind, message_update included each time.
func allKinds(evs []*agentdv1.AgentEvent) string {
	names := make([]string, len(evs))
	for i, ev := range evs {
		fd := ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("event"))
		names[i] = "none"
		if fd != nil {
			names[i] = string(fd.Name())
		}
	}
	return strings.Join(names, " ")
}

// checkSeqsFrom fails unless the events carry the session id, one run id
// and seqs increasing by one from first.
func checkSeqsFrom(t testing.TB, evs []*agentdv1.AgentEvent, sessionID string, first uint64) {
	t.Helper()
	for i, ev := range evs {
		if ev.GetSeq() != first+uint64(i) || ev.GetSessionId() != sessionID || ev.GetRunId() == "" || ev.GetRunId() != evs[0].GetRunId() {
			t.Fatalf("event %d: session %q run %q seq %d; want session %q, one run id, seq %d",
				i, ev.GetSessionId(), ev.GetRunId(), ev.GetSeq(), sessionID, first+uint64(i))
		}
	}
}

// wantReason fails unless err is a refusal for reason whose text mentions
// mention.
func wantReason(t testing.TB, err error, reason agentdv1.ErrorReason, mention string) {
	t.Helper()
	var e *agent.Error
	if !errors.As(err, &e) || e.Reason != reason || !strings.Contains(e.Message, mention) {
		t.Fatalf("error %v (%T), want %v mentioning %q", err, err, reason, mention)
	}
}

// wantField fails unless err refuses the request field field.
func wantField(t testing.TB, err error, field string) {
	t.Helper()
	var e *agent.FieldError
	if !errors.As(err, &e) || e.Field != field || e.Description == "" {
		t.Fatalf("error %v (%T), want a refusal of field %q", err, err, field)
	}
}

func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var seedFiles = map[string]string{"src/config.ts": "export const config = { port: 3000 };\n"}

// seedConfig is the seed scenario's session: read src/config.ts, answer.
func seedConfig(t testing.TB, extra ...*agentdv1.AssistantMessage) *agentdv1.SessionConfig {
	responses := append([]*agentdv1.AssistantMessage{
		toolCall(t, "call_read", "read_file", map[string]any{"path": "src/config.ts"}),
		text("默认端口是 3000。"),
	}, extra...)
	return &agentdv1.SessionConfig{
		SystemPrompt: "你是桌面开发助手。",
		Tools:        []*agentdv1.Tool{{Name: "read_file"}},
		Faux:         &agentdv1.FauxScript{Responses: responses},
	}
}

// wantStoreNotFound fails unless err is the store's not-found (which the
// service maps to NOT_FOUND) mentioning mention.
func wantStoreNotFound(t testing.TB, err error, mention string) {
	t.Helper()
	if !errors.Is(err, persistence.ErrNotFound) || !strings.Contains(err.Error(), mention) {
		t.Fatalf("error %v (%T), want the store's not-found mentioning %q", err, err, mention)
	}
}
