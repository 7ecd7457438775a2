package faux_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func userCtx(text string) *agentdv1.Context {
	return &agentdv1.Context{SystemPrompt: "sys", Messages: []*agentdv1.Message{{Role: &agentdv1.Message_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{faux.Text(text)}}}}}}
}

func collect(s provider.Stream) []provider.Event {
	var out []provider.Event
	for ev := range s {
		out = append(out, ev)
	}
	return out
}

func TestStreamsBlocksInChunks(t *testing.T) {
	text := strings.Repeat("abcd", 10) // 40 chars
	p := faux.New(faux.Options{MinTokenSize: 1, MaxTokenSize: 2},
		faux.Reply(faux.Message(faux.Thinking("hmm, think", "sig=="), faux.Text(text), faux.ToolCall("c1", "edit", map[string]any{"path": "a", "n": 1}))))
	evs := collect(p.Stream(context.Background(), faux.DefaultModel(), userCtx("hi"), provider.Options{}))
	var types []string
	var textDeltas []string
	var args strings.Builder
	var thinkingSig string
	for _, ev := range evs {
		types = append(types, ev.Type.String())
		switch ev.Type {
		case provider.EventTextDelta:
			textDeltas = append(textDeltas, ev.Delta)
			if ev.ContentIndex != 1 {
				t.Errorf("text content index = %d", ev.ContentIndex)
			}
		case provider.EventToolCallDelta:
			args.WriteString(ev.Delta)
		case provider.EventThinkingEnd:
			thinkingSig = ev.Signature
		}
	}
	// Chunk sizes cycle 1,2,1,2... tokens of four characters.
	wantDeltas := []string{"abcd", "abcdabcd", "abcd", "abcdabcd", "abcd", "abcdabcd", "abcd"}
	if strings.Join(textDeltas, "|") != strings.Join(wantDeltas, "|") {
		t.Errorf("text deltas = %q", textDeltas)
	}
	if thinkingSig != "sig==" {
		t.Errorf("thinking signature = %q", thinkingSig)
	}
	var parsed map[string]any
	if err := json.Unmarshal([]byte(args.String()), &parsed); err != nil || parsed["path"] != "a" || parsed["n"] != 1.0 {
		t.Errorf("tool argument fragments %q do not form the arguments: %v", args.String(), err)
	}
	if types[0] != "start" || types[len(types)-1] != "done" {
		t.Errorf("types = %v", types)
	}
	final := evs[len(evs)-1].Message
	if final.StopReason != agentdv1.StopReason_STOP_REASON_TOOL_USE || final.Provider != "faux" || final.Model != "faux-1" || final.Api != "faux" {
		t.Errorf("final = %v", final)
	}
	if got := final.Content[0].GetThinking().GetThinkingSignature(); got != "sig==" {
		t.Errorf("final thinking signature = %q", got)
	}
	// Usage: ceil(chars/4) of the serialized context and the output.
	ctxText := "system:sys\n\nuser:hi" // 19 chars -> 5
	outText := "hmm, think\n" + text + "\nedit:" + `{"n":1,"path":"a"}`
	if final.Usage.Input != int64((len(ctxText)+3)/4) || final.Usage.Output != int64((len(outText)+3)/4) || final.Usage.TotalTokens != final.Usage.Input+final.Usage.Output {
		t.Errorf("usage = %v", final.Usage)
	}
}

func TestFailures(t *testing.T) {
	tests := []struct {
		name   string
		opts   faux.Options
		resp   []faux.Response
		cancel bool
		reason agentdv1.StopReason
		text   string
	}{
		{"empty queue", faux.Options{}, nil, false, agentdv1.StopReason_STOP_REASON_ERROR, "No more faux responses queued"},
		{"response error", faux.Options{}, []faux.Response{faux.Fail("rate limit: 429")}, false, agentdv1.StopReason_STOP_REASON_ERROR, "rate limit: 429"},
		{"response panics", faux.Options{}, []faux.Response{func(context.Context, *agentdv1.Context, faux.Call) (*agentdv1.AssistantMessage, error) {
			panic("x")
		}}, false, agentdv1.StopReason_STOP_REASON_ERROR, "faux response panicked: x"},
		{"aborted before start", faux.Options{}, []faux.Response{faux.Reply(faux.Message(faux.Text("x")))}, true, agentdv1.StopReason_STOP_REASON_ABORTED, "Request was aborted"},
		{"aborted with empty queue", faux.Options{}, nil, true, agentdv1.StopReason_STOP_REASON_ABORTED, "Request was aborted"},
		{"scripted error", faux.Options{}, []faux.Response{faux.Reply(faux.Errored("boom", faux.Text("part")))}, false, agentdv1.StopReason_STOP_REASON_ERROR, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				cancel()
			}
			p := faux.New(tt.opts, tt.resp...)
			evs := collect(p.Stream(ctx, faux.DefaultModel(), userCtx("hi"), provider.Options{}))
			last := evs[len(evs)-1]
			if last.Type != provider.EventError || last.Message.StopReason != tt.reason || last.Message.ErrorMessage != tt.text {
				t.Fatalf("last = %v %v", last.Type, last.Message)
			}
			if last.Message.Provider != "faux" || last.Message.Usage == nil {
				t.Errorf("message = %v", last.Message)
			}
		})
	}
}

func TestEchoFallbackAndContextAwareResponses(t *testing.T) {
	p := faux.New(faux.Options{Echo: true}, func(_ context.Context, c *agentdv1.Context, call faux.Call) (*agentdv1.AssistantMessage, error) {
		if call.Number != 1 {
			return nil, errors.New("wrong call number")
		}
		return faux.Message(faux.Text("saw " + c.SystemPrompt)), nil
	})
	m1 := provider.Collect(p.Stream(context.Background(), faux.DefaultModel(), userCtx("one"), provider.Options{}))
	m2 := provider.Collect(p.Stream(context.Background(), faux.DefaultModel(), userCtx("echo me"), provider.Options{}))
	if m1.Content[0].GetText().GetText() != "saw sys" || m2.Content[0].GetText().GetText() != "echo me" {
		t.Errorf("got %v / %v", m1, m2)
	}
	if p.Calls() != 2 || p.Pending() != 0 || len(p.Contexts()) != 2 {
		t.Errorf("calls=%d pending=%d", p.Calls(), p.Pending())
	}
}

// Pacing waits between chunks and an abort interrupts the wait; the aborted
// message keeps what was streamed.
func TestPacingAndAbortMidStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := faux.New(faux.Options{TokensPerSecond: 1000, MinTokenSize: 1, MaxTokenSize: 1}, faux.Reply(faux.Message(faux.Text("aaaabbbbcccc"))))
	var got []provider.Event
	for ev := range p.Stream(ctx, faux.DefaultModel(), userCtx("hi"), provider.Options{}) {
		got = append(got, ev)
		if ev.Type == provider.EventTextDelta {
			cancel()
		}
	}
	last := got[len(got)-1]
	if last.Type != provider.EventError || last.Message.StopReason != agentdv1.StopReason_STOP_REASON_ABORTED {
		t.Fatalf("last = %v", last)
	}
	if txt := last.Message.Content[0].GetText().GetText(); txt != "aaaa" {
		t.Errorf("partial = %q", txt)
	}
}

func TestPacingTakesTime(t *testing.T) {
	// 3 chunks of one token at 200 tokens/s: at least ~15 ms. A lower bound
	// only, so the test cannot flake on a slow machine.
	p := faux.New(faux.Options{TokensPerSecond: 200, MinTokenSize: 1, MaxTokenSize: 1}, faux.Reply(faux.Message(faux.Text("aaaabbbbcccc"))))
	start := time.Now()
	provider.Collect(p.Stream(context.Background(), faux.DefaultModel(), userCtx("hi"), provider.Options{}))
	if d := time.Since(start); d < 14*time.Millisecond {
		t.Errorf("paced stream took %v", d)
	}
}

func TestChunksNeverSplitRunes(t *testing.T) {
	text := "读取 src/config.ts，告诉我默认端口。😀"
	p := faux.New(faux.Options{MinTokenSize: 1, MaxTokenSize: 1}, faux.Reply(faux.Message(faux.Text(text))))
	var b strings.Builder
	for ev := range p.Stream(context.Background(), faux.DefaultModel(), userCtx("hi"), provider.Options{}) {
		if ev.Type == provider.EventTextDelta {
			if !isValidUTF8(ev.Delta) {
				t.Fatalf("invalid chunk %q", ev.Delta)
			}
			b.WriteString(ev.Delta)
		}
	}
	if b.String() != text {
		t.Errorf("rebuilt %q", b.String())
	}
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
