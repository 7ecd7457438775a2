package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
)

// Per-run settings: a Prompt or Continue may override, for its run only,
// the session's model, thinking level, system prompt (an addition), tools
// (a subset) and model settings (field by field). The overrides are
// applied to a copy of the session's configuration before the run is
// launched, so every later step (model resolution, context shaping, tool
// kit, stream options) sees the run's configuration as if the session had
// it; the session itself is not changed. See docs/ARCHITECTURE.md
// "Per-run settings and run records".

// MaxSystemPromptAppendBytes bounds a run's system prompt addition.
const MaxSystemPromptAppendBytes = 64 << 10

// applyRunSettings applies a request's model, thinking level, system
// prompt addition and model settings to cfg, the run's copy of its
// session's configuration. The model is checked as a session's is (known,
// configured, within the tenant's ceiling), naming the request's field.
func (a *Agent) applyRunSettings(tenant string, cfg *agentdv1.SessionConfig, run *agentdv1.RunRequest) error {
	if run == nil {
		return nil
	}
	if n := len(run.GetSystemPromptAppend()); n > MaxSystemPromptAppendBytes {
		return invalid("system_prompt_append", "%d bytes exceed the limit of %d", n, MaxSystemPromptAppendBytes)
	}
	if ref := run.GetModel(); ref != nil {
		if err := a.checkModelField("model", ref); err != nil {
			return err
		}
		if err := a.opts.Ceilings.ceiling(tenant).checkModel(tenant, "model", ref); err != nil {
			return err
		}
		cfg.Model = proto.CloneOf(ref)
	}
	if l := run.GetThinkingLevel(); l != agentdv1.ThinkingLevel_THINKING_LEVEL_UNSPECIFIED {
		cfg.ThinkingLevel = l
	}
	if add := run.GetSystemPromptAppend(); add != "" {
		if cfg.GetSystemPrompt() == "" {
			cfg.SystemPrompt = add
		} else {
			cfg.SystemPrompt = cfg.GetSystemPrompt() + "\n\n" + add
		}
	}
	cfg.ModelSettings = MergeModelSettings(cfg.GetModelSettings(), run.GetModelSettings())
	return nil
}

// MergeModelSettings returns base overridden field by field by over: a
// field set in over replaces base's, stop sequences are replaced as a
// whole, and provider options are merged by key (over's win). Neither
// argument is changed; nil when both are.
func MergeModelSettings(base, over *agentdv1.ModelSettings) *agentdv1.ModelSettings {
	if over == nil {
		return proto.CloneOf(base)
	}
	out := proto.CloneOf(base)
	if out == nil {
		out = &agentdv1.ModelSettings{}
	}
	if over.Temperature != nil {
		out.Temperature = proto.Float64(over.GetTemperature())
	}
	if over.TopP != nil {
		out.TopP = proto.Float64(over.GetTopP())
	}
	if over.GetMaxOutputTokens() != 0 {
		out.MaxOutputTokens = over.GetMaxOutputTokens()
	}
	if over.GetToolChoice() != nil {
		out.ToolChoice = proto.CloneOf(over.GetToolChoice())
	}
	if len(over.GetStopSequences()) > 0 {
		out.StopSequences = slices.Clone(over.GetStopSequences())
	}
	if po := over.GetProviderOptions(); len(po.GetFields()) > 0 {
		if out.ProviderOptions == nil {
			out.ProviderOptions = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		}
		for k, v := range po.GetFields() {
			out.ProviderOptions.Fields[k] = proto.CloneOf(v)
		}
	}
	return out
}

// runToolSubset narrows the run's tools to the names the request lists,
// in the session's order; no names keeps them all. A name the run does
// not have is refused naming tools[i].
func runToolSubset(schemas *agentloop.SchemaCache, set *agentloop.ToolSet, names []string) (*agentloop.ToolSet, error) {
	if len(names) == 0 {
		return set, nil
	}
	keep := make(map[string]bool, len(names))
	for i, n := range names {
		field := fmt.Sprintf("tools[%d]", i)
		if keep[n] {
			return nil, invalid(field, "%q is named twice", truncate(n, 70))
		}
		if _, ok := set.Tool(n); !ok {
			return nil, invalid(field, "the session has no tool %q; its tools: %s", truncate(n, 70), toolNameList(set))
		}
		keep[n] = true
	}
	var list []agentloop.Tool
	for _, d := range set.Definitions() {
		if keep[d.GetName()] {
			t, _ := set.Tool(d.GetName())
			list = append(list, t)
		}
	}
	sub, err := schemas.NewToolSet(list...)
	if err != nil {
		return nil, invalid("tools", "%v", err)
	}
	return sub, nil
}

func toolNameList(set *agentloop.ToolSet) string {
	var names []string
	for _, d := range set.Definitions() {
		names = append(names, d.GetName())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// runStreamOptions are the options of the run's model calls: its thinking
// level and model settings, checked against its model and tools before
// the run starts, so a setting the model cannot honour is refused with
// the request rather than failing a model call.
func runStreamOptions(model provider.Model, cfg *agentdv1.SessionConfig, sessionID string, tools *agentloop.ToolSet) (provider.Options, error) {
	opts := provider.Options{ThinkingLevel: cfg.GetThinkingLevel(), SessionID: sessionID}
	ms := cfg.GetModelSettings()
	if ms == nil {
		return opts, nil
	}
	name := model.Provider + "/" + model.ID
	if n := ms.GetMaxOutputTokens(); n > 0 && model.MaxOutputTokens > 0 && n > model.MaxOutputTokens {
		return opts, invalid("model_settings.max_output_tokens", "%d exceeds the %d output tokens model %s allows", n, model.MaxOutputTokens, name)
	}
	if tc := ms.GetToolChoice(); tc.GetMode() == agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL {
		if _, ok := tools.Tool(tc.GetToolName()); !ok {
			return opts, invalid("model_settings.tool_choice.tool_name", "%q is not a tool of this run; its tools: %s", truncate(tc.GetToolName(), 70), toolNameList(tools))
		}
	}
	opts.MaxTokens, opts.Settings = ms.GetMaxOutputTokens(), ms
	if err := provider.CheckOptions(model, opts); err != nil {
		var se *provider.SettingError
		if !errors.As(err, &se) {
			return opts, err
		}
		return opts, &FieldError{Field: se.Field, Description: se.Problem(), Reason: agentdv1.ErrorReason_ERROR_REASON_SETTING_UNSUPPORTED,
			Metadata: map[string]string{"field": se.Field, "model": se.Model}}
	}
	return opts, nil
}

// leftUnanswered reports whether a run that ended with outcome o did not
// deliver its answer, so a Continue without an output schema keeps the
// run's.
func leftUnanswered(o agentdv1.RunOutcome) bool {
	switch o {
	case agentdv1.RunOutcome_RUN_OUTCOME_ERROR, agentdv1.RunOutcome_RUN_OUTCOME_ABORTED, agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED,
		agentdv1.RunOutcome_RUN_OUTCOME_BUDGET_EXCEEDED, agentdv1.RunOutcome_RUN_OUTCOME_OUTPUT_INVALID:
		return true
	}
	return false
}

// runRecord is the RunRequest stored with the run: the request's settings
// and metadata with the call's fields filled in, and the output schema
// the run's answer is validated against — the request's, else (Continue)
// that of the previous run on the path when it did not deliver its
// answer, else the session's.
func (a *Agent) runRecord(ctx context.Context, req StartRequest, cfg *agentdv1.SessionConfig, path []*agentdv1.Entry) (*agentdv1.RunRequest, error) {
	rec := proto.CloneOf(req.Run)
	if rec == nil {
		rec = &agentdv1.RunRequest{}
	}
	if rec.Method == "" {
		rec.Method = "prompt"
		if req.Prompt == nil {
			rec.Method = "continue"
		}
	}
	rec.PromptEntryId, rec.RequestId, rec.ParentEntryId, rec.FromRoot = "", req.RequestID, req.ParentEntryID, req.FromRoot
	if rec.OutputSchema == nil && req.Prompt == nil {
		schema, err := a.unansweredSchema(ctx, path)
		if err != nil {
			return nil, err
		}
		rec.OutputSchema = schema
	}
	if schema, retries := outputSchemaFor(cfg, rec); schema != nil {
		rec.OutputSchema, rec.MaxOutputRetries = proto.CloneOf(schema), &retries
	}
	return rec, nil
}

// unansweredSchema is the output schema of the last run on path when it
// ended without delivering its answer; nil otherwise.
func (a *Agent) unansweredSchema(ctx context.Context, path []*agentdv1.Entry) (*structpb.Struct, error) {
	for i := len(path) - 1; i >= 0; i-- {
		id := path[i].GetRunId()
		if id == "" {
			continue
		}
		prev, err := a.store.GetRun(ctx, id)
		if errors.Is(err, persistence.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the previous run %q: %w", id, err)
		}
		if !leftUnanswered(prev.Outcome) {
			return nil, nil
		}
		return proto.CloneOf(prev.Request.GetOutputSchema()), nil
	}
	return nil, nil
}

// decorate adds the run's metadata to its agent_start and agent_end, for
// the caller's correlation.
func (r *Run) decorate(ev *agentdv1.AgentEvent) {
	md := r.request.GetMetadata()
	if len(md) == 0 {
		return
	}
	switch e := ev.GetEvent().(type) {
	case *agentdv1.AgentEvent_AgentStart:
		e.AgentStart.Metadata = maps.Clone(md)
	case *agentdv1.AgentEvent_AgentEnd:
		e.AgentEnd.Metadata = maps.Clone(md)
	}
}

// notePrompt records, once, the entry of the run's prompt in its run
// record: the first message the run stores is its prompt.
func (r *Run) notePrompt(ctx context.Context, entry *agentdv1.Entry) {
	if entry.GetMessage().GetUser() == nil || !r.promptPending.CompareAndSwap(true, false) {
		return
	}
	if err := r.writer.SetRunPrompt(ctx, r.id, entry.GetId()); err != nil {
		r.a.opts.Logger.WarnContext(ctx, "could not record the prompt entry of a run; GetRun will not show it", "session", r.sessionID, "run", r.id, "err", err)
	}
}

// runEnd is how the store records the run's end.
func runEnd(end *agentdv1.AgentEnd) persistence.RunEnd {
	return persistence.RunEnd{Outcome: end.GetOutcome(), ErrorMessage: end.GetErrorMessage(), Usage: end.GetUsage(), StructuredOutput: end.GetStructuredOutput()}
}
