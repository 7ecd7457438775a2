package wiretest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"testing"

	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// Weather is a one-tool list, for calls where a tool choice applies.
func Weather() []*agentdv1.Tool {
	params, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"location": map[string]any{"type": "string"}}, "required": []any{"location"}})
	return []*agentdv1.Tool{{Name: "get_weather", Description: "Weather of a place.", Parameters: params}}
}

// Choice is model settings that hold only a tool choice, so the rows of a
// settings table that test one mode each differ in nothing else.
func Choice(mode agentdv1.ToolChoiceMode, toolName string) *agentdv1.ModelSettings {
	return &agentdv1.ModelSettings{ToolChoice: &agentdv1.ToolChoice{Mode: mode, ToolName: toolName}}
}

// SettingsCase is one row of [CheckSettings]: a call made with Opts (and
// the [Weather] tool when Tools, since a tool choice means nothing without
// tools) and the request body paths it must produce, as [AssertJSON] wants
// them.
type SettingsCase struct {
	Name  string
	Tools bool
	Opts  provider.Options
	Want  map[string]string
}

// CheckSettings runs each case as a subtest against a fresh server
// answering reply, calling model through the stream that adapter builds
// for that server, and asserts on the body of the request the adapter
// sent. It is the one loop behind every adapter's settings table, so the
// adapters' tests differ only in what they expect on the wire.
func CheckSettings(t *testing.T, model provider.Model, reply Reply, cases []SettingsCase, adapter func(s *Server) provider.StreamFunc) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			// Options CheckOptions refuses never reach an adapter, so a row
			// with them would assert on a request agentd cannot send.
			if err := provider.CheckOptions(model, tc.Opts); err != nil {
				t.Fatalf("CheckOptions refused what the test sends: %v", err)
			}
			s := New(t, reply)
			c := &agentdv1.Context{SystemPrompt: "Be brief.", Messages: []*agentdv1.Message{User("hi")}}
			if tc.Tools {
				c.Tools = Weather()
			}
			// Only a call that completed shows its request went out whole;
			// a failed one may have sent nothing to assert on.
			if m := provider.Collect(adapter(s)(context.Background(), model, c, tc.Opts)); m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP {
				t.Fatalf("call failed: %v", m)
			}
			AssertJSON(t, s.Requests()[0].Body, tc.Want)
		})
	}
}

// Schema is an output schema with a keyword structured-output modes often
// drop (minimum), so tests see whether an adapter transforms it.
func Schema() *structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{
		"type":       "object",
		"properties": map[string]any{"n": map[string]any{"type": "integer", "minimum": 1}},
		"required":   []any{"n"},
	})
	return s
}

// Struct converts a map for provider_options, failing the test if it
// cannot.
func Struct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Absent is a want of [AssertJSON]: the path must not be in the body.
const Absent = ""

// AssertJSON checks request body paths (gjson syntax) against JSON values,
// compared as decoded JSON; [Absent] wants the path missing.
func AssertJSON(t testing.TB, body []byte, want map[string]string) {
	t.Helper()
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		got := gjson.GetBytes(body, p)
		if want[p] == Absent {
			if got.Exists() {
				t.Errorf("%s = %s, want it absent", p, got.Raw)
			}
			continue
		}
		if !got.Exists() {
			t.Errorf("%s absent, want %s", p, want[p])
			continue
		}
		var g, w any
		if err := json.Unmarshal([]byte(got.Raw), &g); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if err := json.Unmarshal([]byte(want[p]), &w); err != nil {
			t.Fatalf("want of %s: %v", p, err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s = %s, want %s", p, got.Raw, want[p])
		}
	}
	if t.Failed() {
		t.Logf("body: %s", body)
	}
}

// ReservedCover checks that provider.CheckOptions refuses, as a provider
// option, every top-level key of a request body the adapter built for
// model, and every key of the objects named by nested: so a caller's
// provider_options can never overwrite what the adapter sets.
func ReservedCover(t testing.TB, model provider.Model, body []byte, nested ...string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body: %v", err)
	}
	refused := func(options map[string]any, field string) {
		t.Helper()
		s, err := structpb.NewStruct(options)
		if err != nil {
			t.Fatal(err)
		}
		err = provider.CheckOptions(model, provider.Options{Settings: &agentdv1.ModelSettings{ProviderOptions: s}})
		var se *provider.SettingError
		if !errors.As(err, &se) || se.Field != "model_settings.provider_options."+field {
			t.Errorf("provider option %s, which the adapter sets, is not refused: %v", field, err)
		}
	}
	isNested := map[string]bool{}
	for _, k := range nested {
		isNested[k] = true
		sub, ok := m[k].(map[string]any)
		if !ok {
			t.Errorf("body has no object %s: %s", k, body)
			continue
		}
		for sk, v := range sub {
			refused(map[string]any{k: map[string]any{sk: v}}, k+"."+sk)
		}
	}
	for k, v := range m {
		if !isNested[k] {
			refused(map[string]any{k: v}, k)
		}
	}
}
