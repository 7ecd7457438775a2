package service_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/service"
)

// TestSubmitContextRefusals: SubmitContext items that fail the service's
// validation are refused with INVALID_ARGUMENT naming the item, and the
// waiting call goes on at once with the policies' context. (The hook itself
// is tested in agent.)
func TestSubmitContextRefusals(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{
		ContextHook: &agentdv1.ContextHook{Timeout: durationpb.New(time.Minute), IncludeMessages: true},
		Faux:        &agentdv1.FauxScript{Echo: true},
	})
	run := func(text string, answer func(req *agentdv1.ContextRequested)) []*agentdv1.AgentEvent {
		stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts(text)})
		if err != nil {
			t.Fatal(err)
		}
		evs := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetContextRequested() != nil })
		answer(evs[len(evs)-1].GetContextRequested())
		rest, err := drain(stream)
		if err != nil {
			t.Fatal(err)
		}
		return append(evs, rest...)
	}
	lastAnswer := func(evs []*agentdv1.AgentEvent) string {
		for i := len(evs) - 1; i >= 0; i-- {
			if a := evs[i].GetMessageEnd().GetMessage().GetAssistant(); a != nil {
				return a.GetContent()[0].GetText().GetText()
			}
		}
		return ""
	}
	// Garbage: an item with nothing set.
	evs := run("fourth", func(req *agentdv1.ContextRequested) {
		_, err := h.client.SubmitContext(h.ctx(), &agentdv1.SubmitContextRequest{SessionId: id, RequestId: req.GetRequestId(), Items: []*agentdv1.ContextSelection{{}}})
		wantCode(t, err, codes.InvalidArgument, "items[0]")
	})
	if !hasError(evs, "context_hook", "refused") || lastAnswer(evs) != "fourth" {
		t.Fatalf("garbage answer: %s, answer %q", kinds(evs), lastAnswer(evs))
	}
	// An injected message that fails validation is refused the same way.
	evs = run("fifth", func(req *agentdv1.ContextRequested) {
		_, err := h.client.SubmitContext(h.ctx(), &agentdv1.SubmitContextRequest{SessionId: id, RequestId: req.GetRequestId(), Items: []*agentdv1.ContextSelection{
			{Item: &agentdv1.ContextSelection_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{}}}}}}})
		wantCode(t, err, codes.InvalidArgument, "items[0].message")
	})
	if !hasError(evs, "context_hook", "refused") || lastAnswer(evs) != "fifth" {
		t.Fatalf("invalid injected message: %s, answer %q", kinds(evs), lastAnswer(evs))
	}
	if got := testkit.MessageKinds(h.transcript(id)); got != strings.TrimSpace(strings.Repeat("user assistant ", 2)) {
		t.Fatalf("transcript %s: hook answers must never be stored", got)
	}
}

func hasError(evs []*agentdv1.AgentEvent, stage, text string) bool {
	for _, ev := range evs {
		if e := ev.GetError(); e != nil && e.GetStage() == stage && strings.Contains(e.GetMessage(), text) {
			return true
		}
	}
	return false
}

// TestUpdateSessionAndCompact (Compact end to end): UpdateSession writes model and thinking
// changes as entries and changes what GetContext shows; Compact with a
// client summary and a dry run.
func TestUpdateSessionAndCompact(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	for _, s := range []string{"one", "two", "three"} {
		h.prompt(id, strings.Repeat(s+" ", 200))
	}
	_, err := h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id})
	wantCode(t, err, codes.InvalidArgument, "update_mask")
	_, err = h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.nope"}}})
	wantCode(t, err, codes.InvalidArgument, "update_mask.paths[0]")
	resp, err := h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id,
		Config: &agentdv1.SessionConfig{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH, SystemPrompt: "be brief",
			ContextBlocks: []*agentdv1.ContextBlock{{Name: "user profile", Text: "prefers Go"}}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.thinking_level", "config.system_prompt", "config.context_blocks"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEntries()) != 1 || resp.GetEntries()[0].GetThinkingLevelChange().GetThinkingLevel() != agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH {
		t.Fatalf("entries %v", resp.GetEntries())
	}
	if !resp.GetSession().GetConfig().GetFaux().GetEcho() {
		t.Fatal("fields outside the mask changed")
	}
	c := h.context(id)
	if c.GetSystemPrompt() != "be brief" || !strings.Contains(c.GetMessages()[0].GetUser().GetContent()[0].GetText().GetText(), "prefers Go") {
		t.Fatalf("context after the update: %v", c.GetMessages()[0])
	}
	// While a run is active the session cannot be updated or compacted.
	slow := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true, TokensPerSecond: 50}})
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: slow, Content: texts(strings.Repeat("slow ", 200))})
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetMessageUpdate() != nil })
	_, err = h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: slow, Title: "x", UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}})
	wantCode(t, err, codes.FailedPrecondition, "needs an idle session")
	cs, err := h.client.Compact(h.ctx(), &agentdv1.CompactRequest{SessionId: slow, Summary: "s"})
	if err == nil {
		_, err = drain(cs)
	}
	wantCode(t, err, codes.FailedPrecondition, "needs an idle session")
	if _, err := h.client.Abort(h.ctx(), &agentdv1.AbortRequest{SessionId: slow}); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}

	// Dry run: the cut point and counts, nothing stored.
	before := len(h.transcript(id))
	stream, err = h.client.Compact(h.ctx(), &agentdv1.CompactRequest{SessionId: id, DryRun: true, KeepRecentTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := drain(stream)
	if err != nil || len(evs) != 1 || !evs[0].GetCompactionEnd().GetDryRun() || evs[0].GetCompactionEnd().GetFirstKeptEntryId() == "" {
		t.Fatalf("dry run: %v %v", evs, err)
	}
	if len(h.transcript(id)) != before {
		t.Fatal("a dry run wrote to the transcript")
	}
	stream, err = h.client.Compact(h.ctx(), &agentdv1.CompactRequest{SessionId: id, Summary: "my own summary", KeepRecentTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	evs, err = drain(stream)
	if err != nil || kinds(evs) != "compaction_start compaction_end" || evs[1].GetSeq() != 2 {
		t.Fatalf("Compact: %s %v", kinds(evs), err)
	}
	end := evs[1].GetCompactionEnd()
	if end.GetEntryId() == "" || end.GetTokensAfter() >= end.GetTokensBefore() || end.GetReason() != agentdv1.CompactionReason_COMPACTION_REASON_MANUAL {
		t.Fatalf("compaction_end %v", end)
	}
	c = h.context(id)
	if !strings.Contains(c.GetMessages()[1].GetUser().GetContent()[0].GetText().GetText(), "my own summary") {
		t.Fatalf("the context does not carry the client's summary after the blocks: %v", c.GetMessages()[:2])
	}
	// Nothing left to compact with a huge keep.
	stream, err = h.client.Compact(h.ctx(), &agentdv1.CompactRequest{SessionId: id, KeepRecentTokens: 1 << 30})
	if err == nil {
		_, err = drain(stream)
	}
	wantCode(t, err, codes.FailedPrecondition, "nothing to compact")
}
