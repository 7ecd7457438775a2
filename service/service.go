package service

import (
	"io"
	"log/slog"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// Options configure a Service. The zero value of each field means its
// default.
type Options struct {
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// Limits bound request sizes.
	Limits Limits
	// Metrics receives per-stream measurements; nil records nothing. Give
	// the same metrics.Metrics to [agent.Options] for the runs' measurements
	// (package daemon does).
	Metrics StreamMetrics
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// Tenants are the tenants' limits (AuthConfig.Tenants), by name.
	Tenants map[string]TenantPolicy
}

// Service implements agentdv1.AgentServiceServer: it validates requests,
// maps them onto the agent (runs) and the store (sessions and
// transcripts), and maps errors onto status codes. It holds no run state.
type Service struct {
	agentdv1.UnimplementedAgentServiceServer

	store   persistence.Store
	agent   *agent.Agent
	logger  *slog.Logger
	limits  Limits
	metrics StreamMetrics
	now     func() time.Time
	tenants map[string]TenantPolicy
}

// New returns the service over store, whose runs a runs.
func New(store persistence.Store, a *agent.Agent, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = noStreamMetrics{}
	}
	return &Service{
		store:   store,
		agent:   a,
		logger:  opts.Logger,
		limits:  opts.Limits.withDefaults(),
		metrics: opts.Metrics,
		now:     opts.Now,
		tenants: opts.Tenants,
	}
}

func timestamp(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
