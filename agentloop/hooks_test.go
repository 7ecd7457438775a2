package agentloop_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
)

// TestBeforeDecisionArgs: arguments a BeforeToolCall hook puts in place of
// the model's are validated against the tool's schema again; valid ones
// (coerced) are what the tool runs with, invalid ones become the call's
// error result and the tool does not run.
func TestBeforeDecisionArgs(t *testing.T) {
	tests := []struct {
		name       string
		args       map[string]any
		wantText   string
		wantError  bool
		wantRanArg string
	}{
		{"valid replacement runs", map[string]any{"path": "b.txt"}, "content of b.txt", false, "b.txt"},
		{"coerced like the model's", map[string]any{"path": 7}, "content of 7", false, "7"},
		{"invalid replacement is an error result", map[string]any{"other": "x"}, `Validation failed for tool "read_file"`, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.ToolCall("c1", "read_file", map[string]any{"path": "a.txt"}))), faux.Reply(faux.Message(faux.Text("ok"))))
			cfg := cfgFor(p)
			replacement, err := structpb.NewStruct(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			cfg.BeforeToolCall = func(context.Context, agentloop.ToolCallInfo) (agentloop.BeforeDecision, error) {
				return agentloop.BeforeDecision{Args: replacement}, nil
			}
			ran := ""
			tool := newTool(t, "read_file", `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`,
				func(_ context.Context, call agentloop.Call) (agentloop.Result, error) {
					ran = call.Args.Fields["path"].GetStringValue()
					return textResult("content of " + ran), nil
				})
			rec := &recorder{}
			if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, tool)}, cfg, rec.sink); err != nil {
				t.Fatal(err)
			}
			res := rec.toolResults()[0]
			if !strings.Contains(blockText(res.Content), tt.wantText) || res.IsError != tt.wantError || ran != tt.wantRanArg {
				t.Fatalf("result %q (error %v), tool ran with %q; want %q (error %v), ran with %q",
					blockText(res.Content), res.IsError, ran, tt.wantText, tt.wantError, tt.wantRanArg)
			}
		})
	}
}

// TestArgumentsErrorNamesFields: the validation error is typed and names
// each failing field, for callers that refuse an edit over the wire.
func TestArgumentsErrorNamesFields(t *testing.T) {
	ts := toolSet(t, newTool(t, "w", `{"type":"object","properties":{"path":{"type":"string"},"n":{"type":"integer"}},"required":["path"]}`, nil))
	_, err := ts.ValidateArguments("w", mustStruct(t, `{"n":"many"}`))
	var ae *agentloop.ArgumentsError
	if !asArgumentsError(err, &ae) {
		t.Fatalf("error %T %v is not an *ArgumentsError", err, err)
	}
	var paths []string
	for _, p := range ae.Problems {
		paths = append(paths, p.Path)
	}
	if got := strings.Join(paths, ","); got != "n,path" || ae.Tool != "w" {
		t.Fatalf("problems %v of tool %q, want n and path of w", ae.Problems, ae.Tool)
	}
}

func asArgumentsError(err error, target **agentloop.ArgumentsError) bool {
	ae, ok := err.(*agentloop.ArgumentsError)
	*target = ae
	return ok
}

// TestRemoveDetails: an AfterToolCall override may drop a result's details.
func TestRemoveDetails(t *testing.T) {
	p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.ToolCall("c1", "d", nil))), faux.Reply(faux.Message(faux.Text("ok"))))
	cfg := cfgFor(p)
	cfg.AfterToolCall = func(context.Context, agentloop.AfterToolCallInfo) (*agentloop.ResultOverride, error) {
		return &agentloop.ResultOverride{Content: []*agentdv1.ContentBlock{faux.Text("hidden")}, RemoveDetails: true}, nil
	}
	tool := newTool(t, "d", `{"type":"object"}`, func(context.Context, agentloop.Call) (agentloop.Result, error) {
		return agentloop.Result{Content: []*agentdv1.ContentBlock{faux.Text("secret")}, Details: structpb.NewStringValue("secret too")}, nil
	})
	rec := &recorder{}
	if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, tool)}, cfg, rec.sink); err != nil {
		t.Fatal(err)
	}
	if res := rec.toolResults()[0]; blockText(res.Content) != "hidden" || res.Details != nil {
		t.Fatalf("result %v", res)
	}
}

// TestBeforeStop: a run that would end is continued with the messages
// BeforeStop returns, as many times as it returns some; it is not asked
// after an answer with tool calls, nor once ShouldStopAfterTurn ended the
// run.
func TestBeforeStop(t *testing.T) {
	tests := []struct {
		name       string
		continues  int
		stopAfter  bool
		wantCalls  int
		wantAsked  int
		wantTrace  string
		wantPrompt string
	}{
		{"let it end", 0, false, 1, 1, "", ""},
		{"continue twice", 2, false, 3, 3, "user assistant user assistant user assistant", "more 2"},
		{"ShouldStopAfterTurn ends first", 2, true, 1, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.Text("one"))), faux.Reply(faux.Message(faux.Text("two"))), faux.Reply(faux.Message(faux.Text("three"))))
			cfg := cfgFor(p)
			asked := 0
			cfg.BeforeStop = func(_ context.Context, info agentloop.StopInfo) ([]*agentdv1.AgentMessage, error) {
				asked++
				if info.Message == nil || info.Run == nil {
					t.Error("BeforeStop got no answer or no run")
				}
				if asked > tt.continues {
					return nil, nil
				}
				return []*agentdv1.AgentMessage{userMsg("more " + string(rune('0'+asked)))}, nil
			}
			if tt.stopAfter {
				cfg.ShouldStopAfterTurn = func(context.Context, agentloop.TurnInfo) bool { return true }
			}
			rec := &recorder{}
			msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{}, cfg, rec.sink)
			if err != nil {
				t.Fatal(err)
			}
			if p.Calls() != tt.wantCalls || asked != tt.wantAsked {
				t.Fatalf("model calls %d, asked %d; want %d, %d", p.Calls(), asked, tt.wantCalls, tt.wantAsked)
			}
			if tt.wantTrace != "" {
				var roles []string
				for _, m := range msgs {
					roles = append(roles, role(m))
				}
				if got := strings.Join(roles, " "); got != tt.wantTrace {
					t.Fatalf("messages %s, want %s", got, tt.wantTrace)
				}
				if got := blockText(msgs[len(msgs)-2].GetUser().GetContent()); got != tt.wantPrompt {
					t.Fatalf("last continuation %q, want %q", got, tt.wantPrompt)
				}
			}
		})
	}
	// Not asked while the answer still calls tools.
	p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.ToolCall("c1", "read_file", map[string]any{"path": "x"}))), faux.Reply(faux.Message(faux.Text("done"))))
	cfg := cfgFor(p)
	var sawAnswer string
	cfg.BeforeStop = func(_ context.Context, info agentloop.StopInfo) ([]*agentdv1.AgentMessage, error) {
		sawAnswer += blockText(info.Message.GetContent()) + ";"
		return nil, nil
	}
	if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, echoTool(t))}, cfg, (&recorder{}).sink); err != nil {
		t.Fatal(err)
	}
	if sawAnswer != "done;" {
		t.Fatalf("BeforeStop saw %q, want only the final answer", sawAnswer)
	}
}

// TestAdmitMessage: each prompt, steering and follow-up message is asked
// about before it enters the transcript; a dropped one never does (a run
// whose prompts are all dropped ends without a turn), and After messages
// follow an admitted one.
func TestAdmitMessage(t *testing.T) {
	note := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{CustomType: "note"}}}
	t.Run("refused prompt ends the run", func(t *testing.T) {
		p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.Text("never"))))
		cfg := cfgFor(p)
		var sources []string
		cfg.AdmitMessage = func(_ context.Context, info agentloop.AdmitInfo) (agentloop.Admission, error) {
			sources = append(sources, info.Source.String())
			return agentloop.Admission{Drop: true}, nil
		}
		rec := &recorder{}
		msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{}, cfg, rec.sink)
		if err != nil {
			t.Fatal(err)
		}
		equalTrace(t, rec.trace(), []string{"agent_start", "agent_end:COMPLETED"})
		if len(msgs) != 0 || p.Calls() != 0 || strings.Join(sources, ",") != "prompt" {
			t.Fatalf("messages %d, model calls %d, sources %v", len(msgs), p.Calls(), sources)
		}
	})
	t.Run("after messages and queues", func(t *testing.T) {
		p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.Text("one"))), faux.Reply(faux.Message(faux.Text("two"))), faux.Reply(faux.Message(faux.Text("three"))))
		cfg := cfgFor(p)
		cfg.Steering = agentloop.NewQueue(agentdv1.QueueMode_QUEUE_MODE_ONE_AT_A_TIME)
		cfg.FollowUp = agentloop.NewQueue(agentdv1.QueueMode_QUEUE_MODE_ALL)
		cfg.Steering.Push(userMsg("drop me"))
		cfg.Steering.Push(userMsg("steer"))
		cfg.FollowUp.Push(userMsg("follow"))
		var asked []string
		cfg.AdmitMessage = func(_ context.Context, info agentloop.AdmitInfo) (agentloop.Admission, error) {
			text := blockText(info.Message.GetUser().GetContent())
			asked = append(asked, info.Source.String()+":"+text)
			switch text {
			case "drop me":
				return agentloop.Admission{Drop: true, After: []*agentdv1.AgentMessage{note}}, nil
			case "go":
				return agentloop.Admission{After: []*agentdv1.AgentMessage{note}}, nil
			}
			return agentloop.Admission{}, nil
		}
		msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{}, cfg, (&recorder{}).sink)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(asked, ","); got != "prompt:go,steer:drop me,steer:steer,follow_up:follow" {
			t.Fatalf("asked %s", got)
		}
		var roles []string
		for _, m := range msgs {
			r := role(m)
			if r == "user" {
				r += ":" + blockText(m.GetUser().GetContent())
			}
			roles = append(roles, r)
		}
		// The dropped steering message takes no turn: "steer" is delivered
		// with the first turn's steering poll.
		if got := strings.Join(roles, " "); got != "user:go custom user:steer assistant user:follow assistant" {
			t.Fatalf("messages %s", got)
		}
	})
}
