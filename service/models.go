package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/catalog"
	"github.com/agentd/agentd/provider/faux"
)

// ModelResolver finds the models of real providers. The faux provider is
// built into the service, because its answers come from each session's
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

// checkModel validates a session's model reference.
func (s *Service) checkModel(ref *agentdv1.ModelRef) error {
	if isFaux(ref) {
		if ref.GetProvider() == "" && ref.GetId() != "" {
			return invalid("config.model.provider", "required when config.model.id is set")
		}
		if id := ref.GetId(); id != "" && id != faux.ModelID {
			return invalid("config.model.id", "unknown faux model %q; the faux provider has %q", id, faux.ModelID)
		}
		return nil
	}
	if ref.GetId() == "" {
		return invalid("config.model.id", "required")
	}
	if s.models == nil {
		return invalid("config.model.provider", "unknown provider %q; this agentd offers only %q (ListModels shows the models)", ref.GetProvider(), faux.ProviderName)
	}
	if _, _, err := s.models.Resolve(ref); err != nil {
		code := codes.InvalidArgument
		if errors.Is(err, catalog.ErrNotConfigured) {
			code = codes.FailedPrecondition
		}
		return status.Errorf(code, "config.model: %v (ListModels shows the models and whether each is configured)", err)
	}
	return nil
}

// modelFor returns the model and stream function for a session's runs, and
// the retry policy for its failed calls (nil for the faux model, whose
// failures are scripted).
func (s *Service) modelFor(cfg *agentdv1.SessionConfig) (provider.Model, provider.StreamFunc, agentloop.RetryFunc, error) {
	if isFaux(cfg.GetModel()) {
		return faux.DefaultModel(), scriptedFaux(cfg.GetFaux()), nil, nil
	}
	if s.models == nil {
		return provider.Model{}, nil, nil, fmt.Errorf("no provider %q is configured", cfg.GetModel().GetProvider())
	}
	model, stream, err := s.models.Resolve(cfg.GetModel())
	if err != nil {
		return model, nil, nil, err
	}
	return model, stream, s.retry.Decide, nil
}

// scriptedFaux answers the n-th model call of a session with the n-th
// scripted response, where n counts the answers the model has seen, so a
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
			responses = append(responses, faux.Reply(scriptedAnswer(script.GetResponses()[n])))
		}
		return faux.New(opts, responses...).Stream(ctx, model, c, o)
	}
}

// scriptedAnswer fills in the stop reason a script may leave out.
func scriptedAnswer(m *agentdv1.AssistantMessage) *agentdv1.AssistantMessage {
	m = proto.Clone(m).(*agentdv1.AssistantMessage)
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

// fauxModel describes the built-in faux model for ListModels.
func fauxModel() *agentdv1.Model {
	m := faux.DefaultModel()
	return &agentdv1.Model{
		Ref:             &agentdv1.ModelRef{Provider: m.Provider, Id: m.ID},
		Name:            m.Name,
		Api:             m.API,
		ContextWindow:   m.ContextWindow,
		MaxOutputTokens: m.MaxOutputTokens,
		InputModalities: []agentdv1.Modality{agentdv1.Modality_MODALITY_TEXT, agentdv1.Modality_MODALITY_IMAGE},
		Reasoning:       true,
		Price:           &agentdv1.ModelPrice{},
		Configured:      true,
	}
}

// ListModels implements agentdv1.AgentServiceServer.
func (s *Service) ListModels(context.Context, *agentdv1.ListModelsRequest) (*agentdv1.ListModelsResponse, error) {
	models := []*agentdv1.Model{fauxModel()}
	if s.models != nil {
		models = append(models, s.models.List()...)
	}
	return &agentdv1.ListModelsResponse{Models: models}, nil
}

func textBlock(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}

func timestamp(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
