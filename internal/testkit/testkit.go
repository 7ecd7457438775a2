// Package testkit holds the test doubles that the tests of several
// packages (agent, service) share, so each is written once: a model that
// fails its first call, a read-only tool over an in-memory file system,
// and readers of a transcript's message entries.
// Only tests import it.
package testkit

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

// FlakyAnswer is what [FlakyModels] answers after its first call failed.
const FlakyAnswer = "answer after retry"

// FlakyModels is a model resolver with one model, "test/flaky", that fails
// with a rate limit (a retryable error) on its first call and answers
// [FlakyAnswer] on every later one.
type FlakyModels struct{ calls atomic.Int32 }

// Resolve implements the agent's model resolver; any model other than
// test/flaky is unknown.
func (f *FlakyModels) Resolve(ref *agentdv1.ModelRef) (provider.Model, provider.StreamFunc, error) {
	if ref.GetProvider() != "test" || ref.GetId() != "flaky" {
		return provider.Model{}, nil, errors.New("unknown model")
	}
	model := provider.Model{Provider: "test", ID: "flaky", API: "faux"}
	return model, func(ctx context.Context, m provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
		if f.calls.Add(1) == 1 {
			return faux.New(faux.Options{}, faux.Reply(faux.Errored("429 rate_limit_error: Too many requests"))).Stream(ctx, m, c, o)
		}
		return faux.New(faux.Options{}, faux.Reply(faux.Message(faux.Text(FlakyAnswer)))).Stream(ctx, m, c, o)
	}, nil
}

// List implements the agent's model resolver.
func (f *FlakyModels) List() []*agentdv1.Model {
	return []*agentdv1.Model{{Ref: &agentdv1.ModelRef{Provider: "test", Id: "flaky"}, Configured: true}}
}

// ReadOnlyTool marks a tool as read-only, so it runs without approval
// under the read-only approval policy.
type ReadOnlyTool struct{ agentloop.FuncTool }

// ReadOnly reports that the tool changes nothing.
func (ReadOnlyTool) ReadOnly() bool { return true }

// ReadFileTool is a read_file tool over files (path → content); a path
// not in files fails with "no such file".
func ReadFileTool(files map[string]string) agentloop.Tool {
	params, _ := structpb.NewStruct(map[string]any{
		"type":       "object",
		"properties": map[string]any{"path": map[string]any{"type": "string"}},
		"required":   []any{"path"},
	})
	return ReadOnlyTool{agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "read_file", Description: "Read a file.", Parameters: params},
		Fn: func(_ context.Context, call agentloop.Call) (agentloop.Result, error) {
			body, ok := files[call.Args.GetFields()["path"].GetStringValue()]
			if !ok {
				return agentloop.Result{}, errors.New("no such file")
			}
			return agentloop.Result{Content: []*agentdv1.ContentBlock{faux.Text(body)}}, nil
		},
	}}
}

// MessageEntries are the entries of a transcript that hold messages,
// leaving out records such as a tool call's start or an approval rule.
func MessageEntries(entries []*agentdv1.Entry) []*agentdv1.Entry {
	var out []*agentdv1.Entry
	for _, e := range entries {
		if e.GetMessage() != nil {
			out = append(out, e)
		}
	}
	return out
}

// MessageKinds names the kind of each message entry ("user assistant
// tool_result"), skipping the entries that hold no message.
func MessageKinds(entries []*agentdv1.Entry) string {
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		m := e.GetMessage()
		if m == nil {
			continue
		}
		fd := m.ProtoReflect().WhichOneof(m.ProtoReflect().Descriptor().Oneofs().ByName("kind"))
		names = append(names, string(fd.Name()))
	}
	return strings.Join(names, " ")
}
