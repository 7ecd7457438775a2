package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
)

// Prompt implements agentdv1.AgentServiceServer.
func (s *Service) Prompt(req *agentdv1.PromptRequest, stream grpc.ServerStreamingServer[agentdv1.AgentEvent]) error {
	ctx := stream.Context()
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return err
	}
	if err := s.limits.checkContent("content", req.GetContent(), userBlocks, true); err != nil {
		return err
	}
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return err
	}
	prompt := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
		Content: req.GetContent(), Timestamp: timestamp(s.now()),
	}}}
	h, err := s.launch(ctx, req.GetSessionId(), req.GetRequestId(), func(ctx context.Context, st agentloop.State, cfg agentloop.Config, sink agentloop.Sink) error {
		_, err := agentloop.Run(ctx, []*agentdv1.AgentMessage{prompt}, st, cfg, sink)
		return err
	}, nil)
	if err != nil {
		return err
	}
	return s.follow(ctx, h, 0, stream, !req.GetDetach())
}

// Continue implements agentdv1.AgentServiceServer.
func (s *Service) Continue(req *agentdv1.ContinueRequest, stream grpc.ServerStreamingServer[agentdv1.AgentEvent]) error {
	ctx := stream.Context()
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return err
	}
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return err
	}
	h, err := s.launch(ctx, req.GetSessionId(), req.GetRequestId(), func(ctx context.Context, st agentloop.State, cfg agentloop.Config, sink agentloop.Sink) error {
		_, err := agentloop.Continue(ctx, st, cfg, sink)
		return err
	}, func(ctx context.Context, st agentloop.State, cfg agentloop.Config) error {
		if err := agentloop.CheckContinue(ctx, st, cfg); err != nil {
			return status.Errorf(codes.FailedPrecondition, "%v: Continue needs a transcript whose last message the model sees is a user message or a tool result; use Prompt instead", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.follow(ctx, h, 0, stream, !req.GetDetach())
}

func checkRequestID(id string) error {
	if len(id) > 128 {
		return invalid("request_id", "%d characters exceed the limit of 128", len(id))
	}
	return nil
}

// runID derives a run id from a client's request id, so a retried request
// finds its run (also after a restart, through the store's run records);
// without a request id every run gets a fresh id.
func runID(sessionID, requestID string) string {
	if requestID == "" {
		return "run-" + persistence.NewID()
	}
	sum := sha256.Sum256([]byte(sessionID + "\x00" + requestID))
	return "run-" + hex.EncodeToString(sum[:10])
}

type loopFunc func(ctx context.Context, st agentloop.State, cfg agentloop.Config, sink agentloop.Sink) error

// launch starts a run of the session in the background and returns its
// handle; a retried request id returns the run it started before. check,
// when set, vets the transcript before anything is recorded.
func (s *Service) launch(ctx context.Context, sessionID, requestID string, body loopFunc, check func(context.Context, agentloop.State, agentloop.Config) error) (*runHandle, error) {
	rec, err := s.session(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	cfg := cloneConfig(rec.Config)
	model, streamFn, retry, err := s.modelFor(cfg)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "session %q: its model cannot be used now: %v", sessionID, err)
	}
	id := runID(sessionID, requestID)
	h, existing, err := s.runs.register(sessionID, id, cfg)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		return existing, nil
	}
	started := false
	defer func() {
		if !started {
			s.runs.unregister(h)
		}
	}()
	tools, err := s.toolSet(cfg, h)
	if err != nil {
		// The configuration was valid when the session was created; what
		// changed is the server (a workspace root gone or no longer allowed).
		return nil, status.Errorf(codes.FailedPrecondition, "session %q: its tools cannot be used now: %v", sessionID, status.Convert(err).Message())
	}
	path, err := s.store.Path(ctx, sessionID)
	if err != nil {
		return nil, s.storeStatus(ctx, "load transcript", err)
	}
	msgs := transcriptMessages(path)
	if check != nil {
		if err := check(ctx, agentloop.State{SystemPrompt: cfg.GetSystemPrompt(), Messages: msgs, Tools: tools}, agentloop.Config{Model: model}); err != nil {
			return nil, err
		}
	}
	if err := s.store.StartRun(ctx, sessionID, id); err != nil {
		if errors.Is(err, persistence.ErrConflict) {
			return nil, status.Errorf(codes.AlreadyExists,
				"request_id %q was already accepted as run %q, whose events are no longer retained; GetTranscript shows what it stored", requestID, id)
		}
		return nil, s.storeStatus(ctx, "record run start", err)
	}

	maxTurns := cfg.GetMaxTurns()
	if maxTurns == 0 {
		maxTurns = s.limits.MaxTurns
	}
	loopCfg := agentloop.Config{
		Model:         model,
		Stream:        streamFn,
		StreamOptions: provider.Options{ThinkingLevel: cfg.GetThinkingLevel(), SessionID: sessionID},
		Steering:      h.steering,
		FollowUp:      h.followUp,
		ToolExecution: cfg.GetToolExecution(),
		ShouldStopAfterTurn: func(_ context.Context, info agentloop.TurnInfo) bool {
			return info.Turn >= maxTurns
		},
		Retry: retry,
		Now:   s.now,
	}
	state := agentloop.State{SystemPrompt: cfg.GetSystemPrompt(), Messages: msgs, Tools: tools}
	started = true
	go s.execute(h.ctx, h, state, loopCfg, body)
	return h, nil
}

// execute runs the loop and guarantees the run is recorded as ended and its
// log closed, whatever the loop did.
func (s *Service) execute(ctx context.Context, h *runHandle, state agentloop.State, cfg agentloop.Config, body loopFunc) {
	defer s.runs.exited(h)
	defer h.cancel(nil)
	err := body(ctx, state, cfg, s.sink(h))
	if err != nil {
		s.logger.Warn("run stopped by an internal failure", "session", h.sessionID, "run", h.id, "err", err)
	}
	if !h.log.isEnded() {
		// The loop promises agent_end; should it ever break that promise the
		// session must still become idle and the run be closed.
		msg := "the run ended without agent_end"
		if err != nil {
			msg = err.Error()
		}
		end := &agentdv1.AgentEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_ERROR, ErrorMessage: msg}
		s.endRun(context.WithoutCancel(ctx), h, end)
		// A run always has both ends, even one that failed before starting.
		h.log.append(&agentdv1.AgentEvent{Time: timestamp(s.now()), Event: &agentdv1.AgentEvent_AgentStart{AgentStart: &agentdv1.AgentStart{}}})
		h.log.append(&agentdv1.AgentEvent{Time: timestamp(s.now()), Event: &agentdv1.AgentEvent_AgentEnd{AgentEnd: end}})
	}
}

// sink persists each message at its message_end before any client sees the
// event, then publishes the event to the run's followers.
func (s *Service) sink(h *runHandle) agentloop.Sink {
	return func(ctx context.Context, ev *agentdv1.AgentEvent) error {
		switch e := ev.GetEvent().(type) {
		case *agentdv1.AgentEvent_MessageEnd:
			entry := &agentdv1.Entry{RunId: h.id, Payload: &agentdv1.Entry_Message{Message: e.MessageEnd.GetMessage()}}
			if err := s.appendEntries(ctx, h.sessionID, entry); err != nil {
				s.logger.ErrorContext(ctx, "could not store a message; aborting the run", "session", h.sessionID, "run", h.id, "err", err)
				return fmt.Errorf("store the message: %w", err)
			}
			e.MessageEnd.EntryId = entry.GetId()
		case *agentdv1.AgentEvent_AgentEnd:
			s.endRun(ctx, h, e.AgentEnd)
		}
		h.log.append(ev)
		s.metrics.eventProduced()
		return nil
	}
}

// endRun records the run's end and frees the session before agent_end
// becomes visible, so a client that sees agent_end can prompt again at
// once. Messages queued too late to be delivered are reported, not lost
// silently.
func (s *Service) endRun(ctx context.Context, h *runHandle, end *agentdv1.AgentEnd) {
	if err := s.store.EndRun(ctx, h.id, end.GetOutcome(), end.GetErrorMessage()); err != nil {
		s.logger.ErrorContext(ctx, "could not record the end of a run; it will be closed as interrupted at the next start",
			"session", h.sessionID, "run", h.id, "err", err)
	}
	if undelivered := s.runs.finish(h); len(undelivered) > 0 {
		h.log.append(&agentdv1.AgentEvent{Time: timestamp(s.now()), Event: &agentdv1.AgentEvent_Error{Error: &agentdv1.AgentError{
			Message: fmt.Sprintf("%d queued message(s) arrived after the run had stopped and were not delivered; send them again with Prompt", len(undelivered)),
			Stage:   "queue",
		}}})
	}
}

// appendEntries writes entries and measures the store's latency.
func (s *Service) appendEntries(ctx context.Context, sessionID string, entries ...*agentdv1.Entry) error {
	start := s.now()
	err := s.store.Append(ctx, sessionID, entries...)
	s.metrics.storeLatency("append", s.now().Sub(start))
	return err
}

// follow streams a run's events after seq after until agent_end. When
// abortOnDrop is set and the client goes away first, the run is aborted.
func (s *Service) follow(ctx context.Context, h *runHandle, after uint64, stream grpc.ServerStreamingServer[agentdv1.AgentEvent], abortOnDrop bool) error {
	me := h.log.join(after)
	defer h.log.leave(me)
	for {
		evs, ended, wake, err := h.log.since(after)
		if err != nil {
			var dropped *errEventsDropped
			if errors.As(err, &dropped) {
				return status.Errorf(codes.OutOfRange,
					"events after seq %d of run %q are no longer retained (the oldest kept is seq %d); GetTranscript has every stored message",
					dropped.after, h.id, dropped.first)
			}
			return err
		}
		for _, ev := range evs {
			if err := stream.Send(ev); err != nil {
				s.dropped(h, abortOnDrop)
				return err
			}
			s.metrics.eventSent(ev.GetTime().AsTime())
			after = ev.GetSeq()
		}
		if len(evs) > 0 {
			h.log.progress(me, after)
			continue
		}
		if ended {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			s.dropped(h, abortOnDrop)
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

func (s *Service) dropped(h *runHandle, abort bool) {
	if abort && !h.log.isEnded() {
		h.abort("the client's stream ended before agent_end and the request did not set detach")
	}
}

// Attach implements agentdv1.AgentServiceServer.
func (s *Service) Attach(req *agentdv1.AttachRequest, stream grpc.ServerStreamingServer[agentdv1.AgentEvent]) error {
	ctx := stream.Context()
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return err
	}
	if err := checkOptionalID("run_id", req.GetRunId()); err != nil {
		return err
	}
	var h *runHandle
	if req.GetRunId() == "" {
		if h = s.runs.active(req.GetSessionId()); h == nil {
			return status.Errorf(codes.FailedPrecondition,
				"session %q has no active run; pass the run_id of a recent run to replay its events, or read GetTranscript", req.GetSessionId())
		}
	} else if h = s.runs.lookup(req.GetRunId()); h == nil || h.sessionID != req.GetSessionId() {
		return status.Errorf(codes.NotFound,
			"run %q of session %q is not active and its events are no longer retained; GetTranscript has every stored message", req.GetRunId(), req.GetSessionId())
	}
	return s.follow(ctx, h, req.GetAfterSeq(), stream, false)
}

// Steer implements agentdv1.AgentServiceServer.
func (s *Service) Steer(ctx context.Context, req *agentdv1.SteerRequest) (*agentdv1.SteerResponse, error) {
	n, err := s.enqueue(ctx, req.GetSessionId(), req.GetContent(), false)
	if err != nil {
		return nil, err
	}
	return &agentdv1.SteerResponse{Queued: uint32(n)}, nil
}

// FollowUp implements agentdv1.AgentServiceServer.
func (s *Service) FollowUp(ctx context.Context, req *agentdv1.FollowUpRequest) (*agentdv1.FollowUpResponse, error) {
	n, err := s.enqueue(ctx, req.GetSessionId(), req.GetContent(), true)
	if err != nil {
		return nil, err
	}
	return &agentdv1.FollowUpResponse{Queued: uint32(n)}, nil
}

func (s *Service) enqueue(ctx context.Context, sessionID string, content []*agentdv1.ContentBlock, followUp bool) (int, error) {
	if _, err := s.session(ctx, sessionID); err != nil {
		return 0, err
	}
	if err := s.limits.checkContent("content", content, userBlocks, true); err != nil {
		return 0, err
	}
	msg := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: content, Timestamp: timestamp(s.now())}}}
	h, n, err := s.runs.enqueue(sessionID, msg, followUp)
	if err != nil {
		return 0, err
	}
	h.log.append(&agentdv1.AgentEvent{Time: timestamp(s.now()), Event: &agentdv1.AgentEvent_QueueUpdate{QueueUpdate: &agentdv1.QueueUpdate{
		Steering: h.steering.Snapshot(), FollowUp: h.followUp.Snapshot(),
	}}})
	return n, nil
}

// Abort implements agentdv1.AgentServiceServer. It returns once the run has
// recorded its end, so the session is idle when Abort returns.
func (s *Service) Abort(ctx context.Context, req *agentdv1.AbortRequest) (*agentdv1.AbortResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := checkOptionalID("run_id", req.GetRunId()); err != nil {
		return nil, err
	}
	h := s.runs.active(req.GetSessionId())
	if h == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "session %q has no active run to abort", req.GetSessionId())
	}
	if req.GetRunId() != "" && req.GetRunId() != h.id {
		return nil, status.Errorf(codes.FailedPrecondition, "run %q is not the active run of session %q (that is %q)", req.GetRunId(), req.GetSessionId(), h.id)
	}
	if err := s.runs.abortAndWait(ctx, h, "aborted by an Abort call"); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return &agentdv1.AbortResponse{RunId: h.id}, nil
}
