package agent

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent/contextview"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

// ModelResolver finds the models of real providers. The faux provider is
// built into the agent, because its answers come from each session's
// FauxScript.
type ModelResolver interface {
	// Resolve returns the model and the function that streams from it, or
	// an error saying why the reference is unusable (unknown provider or
	// model, provider not configured).
	Resolve(ref *agentdv1.ModelRef) (provider.Model, provider.StreamFunc, error)
	// List describes the known models for ListModels.
	List() []*agentdv1.Model
}

// isFaux reports whether ref selects the faux provider (unset selects it).
func isFaux(ref *agentdv1.ModelRef) bool {
	return ref == nil || ref.GetProvider() == "" || ref.GetProvider() == faux.ProviderName
}

// checkModel validates a session's model reference: a *FieldError for one
// that can never work, an *Error (ErrPrecondition) for a known model whose
// provider is not configured now.
func (a *Agent) checkModel(ref *agentdv1.ModelRef) error {
	return a.checkModelField("config.model", ref)
}

// checkModelField is checkModel for the model reference at field (a
// session's config.model, a run's model).
func (a *Agent) checkModelField(field string, ref *agentdv1.ModelRef) error {
	if isFaux(ref) {
		if ref.GetProvider() == "" && ref.GetId() != "" {
			return invalid(field+".provider", "required when %s.id is set", field)
		}
		// Only a reference with neither part selects the faux model by
		// default; a provider without an id is half a reference (the
		// proto requires both), refused as it is for every other provider.
		if ref.GetProvider() != "" && ref.GetId() == "" {
			return invalid(field+".id", "required with provider %q; the faux provider has %q (or leave %s unset for it)", ref.GetProvider(), faux.ModelID, field)
		}
		if id := ref.GetId(); id != "" && id != faux.ModelID {
			return invalid(field+".id", "unknown faux model %q; the faux provider has %q", id, faux.ModelID)
		}
		return nil
	}
	if ref.GetId() == "" {
		return invalid(field+".id", "required")
	}
	if a.opts.Models == nil {
		return invalid(field+".provider", "unknown provider %q; this agentd offers only %q (ListModels shows the models)", ref.GetProvider(), faux.ProviderName)
	}
	if _, _, err := a.opts.Models.Resolve(ref); err != nil {
		if errors.Is(err, provider.ErrNotConfigured) {
			return refuse(agentdv1.ErrorReason_ERROR_REASON_MODEL_UNAVAILABLE, "%s: %v (ListModels shows the models and whether each is configured)", field, err)
		}
		return invalid(field, "%v (ListModels shows the models and whether each is configured)", err)
	}
	return nil
}

// modelFor returns the model and stream function for a session's runs, and
// the retry decision for its failed calls (nil for the faux model, whose
// failures are scripted). A model that is no longer usable still names
// itself, for GetContext.
func (a *Agent) modelFor(cfg *agentdv1.SessionConfig) (provider.Model, provider.StreamFunc, agentloop.RetryFunc, error) {
	if isFaux(cfg.GetModel()) {
		model := faux.DefaultModel()
		if w := cfg.GetFaux().GetContextWindow(); w > 0 {
			model.ContextWindow = w
		}
		model.StructuredOutputTool = cfg.GetFaux().GetStructuredOutputTool()
		return model, fauxWindowStream(cfg.GetFaux().GetContextWindow(), scriptedFaux(cfg.GetFaux())), nil, nil
	}
	if a.opts.Models == nil {
		return provider.Model{}, nil, nil, fmt.Errorf("no provider %q is configured", cfg.GetModel().GetProvider())
	}
	model, stream, err := a.opts.Models.Resolve(cfg.GetModel())
	if err != nil {
		return model, nil, nil, err
	}
	return model, stream, a.opts.Retry.Decide, nil
}

// scriptedFaux answers the n-th model call of a session with the n-th
// scripted response, where n counts the answers the model sees, so a
// retried call gets the same answer even after a restart.
func scriptedFaux(script *agentdv1.FauxScript) provider.StreamFunc {
	opts := faux.Options{Echo: script.GetEcho(), TokensPerSecond: float64(script.GetTokensPerSecond())}
	return func(ctx context.Context, model provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
		n := 0
		for _, m := range c.GetMessages() {
			if a := m.GetAssistant(); a != nil && !provider.IsFailedAnswer(a) {
				n++
			}
		}
		var responses []faux.Response
		if n < len(script.GetResponses()) {
			responses = append(responses, faux.Reply(ScriptedAnswer(script.GetResponses()[n])))
		}
		return faux.New(opts, responses...).Stream(ctx, model, c, o)
	}
}

// ScriptedAnswer is a FauxScript response as the faux model gives it: the
// stop reason a script may leave out is filled in (TOOL_USE when it calls
// a tool, STOP otherwise).
func ScriptedAnswer(m *agentdv1.AssistantMessage) *agentdv1.AssistantMessage {
	m = proto.CloneOf(m)
	if m.StopReason == agentdv1.StopReason_STOP_REASON_UNSPECIFIED {
		m.StopReason = agentdv1.StopReason_STOP_REASON_STOP
		for _, b := range m.GetContent() {
			if b.GetToolCall() != nil {
				m.StopReason = agentdv1.StopReason_STOP_REASON_TOOL_USE
			}
		}
	}
	return m
}

// Models lists the models a session may use: the built-in faux model, then
// the resolver's.
func (a *Agent) Models() []*agentdv1.Model {
	m := faux.DefaultModel()
	models := []*agentdv1.Model{{
		Ref:             &agentdv1.ModelRef{Provider: m.Provider, Id: m.ID},
		Name:            m.Name,
		Api:             m.API,
		ContextWindow:   m.ContextWindow,
		MaxOutputTokens: m.MaxOutputTokens,
		InputModalities: []agentdv1.Modality{agentdv1.Modality_MODALITY_TEXT, agentdv1.Modality_MODALITY_IMAGE},
		Reasoning:       true,
		Price:           &agentdv1.ModelPrice{},
		Configured:      true,
	}}
	if a.opts.Models != nil {
		models = append(models, a.opts.Models.List()...)
	}
	return models
}

// fauxWindowStream makes the faux model refuse a context larger than the
// session's faux context window, as a real provider does.
func fauxWindowStream(window int64, next provider.StreamFunc) provider.StreamFunc {
	if window <= 0 {
		return next
	}
	return func(ctx context.Context, model provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
		var n int64 = provider.EstimateTokens(c.GetSystemPrompt())
		for _, m := range c.GetMessages() {
			n += contextview.MessageTokens(m)
		}
		if n > window {
			msg := fmt.Sprintf("%sprompt is too long: %d tokens > %d maximum", provider.ContextOverflowPrefix, n, window)
			return faux.New(faux.Options{}, faux.Fail(msg)).Stream(ctx, model, c, o)
		}
		return next(ctx, model, c, o)
	}
}
