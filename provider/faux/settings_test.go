package faux_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

// The faux model sends nothing: it hands the call's settings and output
// schema to its script, which tests read, and streams the scripted text
// as is (a JSON answer stays byte for byte what the script wrote).
func TestCallRecordsSettingsAndOutputSchema(t *testing.T) {
	schema, _ := structpb.NewStruct(map[string]any{"type": "object"})
	options, _ := structpb.NewStruct(map[string]any{"seed": 7})
	temp := 0.3
	opts := provider.Options{MaxTokens: 100, OutputSchema: schema, Settings: &agentdv1.ModelSettings{
		Temperature: &temp, MaxOutputTokens: 100, StopSequences: []string{"END"},
		ToolChoice: &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE}, ProviderOptions: options,
	}}
	if err := provider.CheckOptions(faux.DefaultModel(), opts); err != nil {
		t.Fatalf("CheckOptions: %v", err)
	}
	const answer = `{"n": 1,  "s": "x"}`
	var got []faux.Call
	p := faux.New(faux.Options{}, func(_ context.Context, _ *agentdv1.Context, call faux.Call) (*agentdv1.AssistantMessage, error) {
		got = append(got, call)
		return faux.Message(faux.Text(answer)), nil
	})
	final := provider.Collect(p.Stream(context.Background(), faux.DefaultModel(), userCtx("hi"), opts))
	if final.GetContent()[0].GetText().GetText() != answer {
		t.Fatalf("answer = %v", final)
	}
	if len(got) != 1 {
		t.Fatalf("calls = %d", len(got))
	}
	o := got[0].Options
	if !proto.Equal(o.Settings, opts.Settings) || !proto.Equal(o.OutputSchema, schema) || o.MaxTokens != 100 {
		t.Fatalf("recorded options = %+v", o)
	}
}
