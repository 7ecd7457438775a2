package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/fspath"
)

// Roles a credential may carry.
const (
	// RoleAdmin sees and changes the sessions of every tenant.
	RoleAdmin = "admin"
	// RoleUser sees only the sessions of its own tenant.
	RoleUser = "user"
)

// Caller is who made a call, as its credentials say; never taken from a
// request field.
type Caller struct {
	// Tenant the caller's new sessions belong to; "" for none.
	Tenant string
	// Admin callers see every tenant's sessions.
	Admin bool
}

// callerKey carries the Caller in a call's context.
type callerKey struct{}

// CallerFrom returns the caller of the call ctx belongs to. Without
// authentication (no --auth-token or --auth-config) every caller is an
// admin of no tenant: agentd as one app's sidecar.
func CallerFrom(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	return Caller{Admin: true}
}

// sees reports whether the caller may see a session of tenant.
func (c Caller) sees(tenant string) bool { return c.Admin || c.Tenant == tenant }

// AuthConfig is the --auth-config file: which credentials are which
// tenant's, and with which role. Tokens are stored as their SHA-256, never
// in clear.
type AuthConfig struct {
	// Tokens are bearer tokens ("authorization: Bearer <token>").
	Tokens []TokenGrant `json:"tokens"`
	// Certificates are TLS client certificates, by subject; they need
	// agentd to verify client certificates (--tls-client-ca).
	Certificates []CertificateGrant `json:"certificates,omitempty"`
	// Tenants are the limits and ceilings of tenants, by name.
	Tenants map[string]TenantPolicy `json:"tenants,omitempty"`
}

// TenantPolicy caps what one tenant may spend and bounds what its
// sessions may enable. A zero limit sets no limit; an unset ceiling
// follows agentd's flag for it (open when that is unset too), except
// workspaceRoots, which each tenant has of its own.
type TenantPolicy struct {
	// MaxCostPerDayUSD is the most the tenant's model calls may cost per
	// day (UTC); a Prompt or Continue beyond it is refused until the next
	// day. Runs under way are not cut.
	MaxCostPerDayUSD float64 `json:"maxCostPerDayUsd,omitempty"`
	// MaxConcurrentRuns is the most runs the tenant may have active at
	// once on one agentd.
	MaxConcurrentRuns int `json:"maxConcurrentRuns,omitempty"`
	// WorkspaceRoots are the directories the workspace_root of the
	// tenant's sessions must lie in. Without any, the tenant's sessions
	// cannot use the built-in workspace tools. No directory may be listed
	// for two tenants, or lie inside another tenant's.
	WorkspaceRoots []string `json:"workspaceRoots"`
	// Tools are the server tools (read_file, bash, ...) the tenant's
	// sessions may enable (agentd's --allowed-tools when unset).
	Tools []string `json:"tools"`
	// MCPServers are the MCP servers the tenant's sessions may enable
	// (--allowed-mcp-servers when unset).
	MCPServers []string `json:"mcpServers"`
	// Models are patterns over "provider/id" (such as "anthropic/*"; the
	// faux model is "faux/faux") of the models the tenant's sessions may
	// use (--allowed-models when unset).
	Models []string `json:"models"`
	// RequireApproval are patterns over tool names whose calls always ask
	// for approval, whatever a session says (--require-approval when
	// unset).
	RequireApproval []string `json:"requireApproval"`
	// Network is whether the tenant's sessions may give their bash
	// commands agentd's network (--sandbox-network when unset).
	Network *bool `json:"network"`
	// RetentionDays deletes the tenant's sessions no one touched for that
	// many days (--retention when unset; 0 keeps them).
	RetentionDays *int `json:"retentionDays"`
}

// Retention is the retention of sessions under this configuration: def
// for sessions of no tenant and tenants that set none, each tenant's
// retentionDays over it.
func (c *AuthConfig) Retention(def time.Duration) agent.Retention {
	r := agent.Retention{Default: def, Tenants: map[string]time.Duration{}}
	for name, t := range c.Tenants {
		if t.RetentionDays != nil {
			r.Tenants[name] = time.Duration(*t.RetentionDays) * 24 * time.Hour
		}
	}
	return r
}

// Ceilings are the agent's ceilings under this configuration: def for
// sessions of no tenant and for what a tenant leaves unset, each tenant's
// own over it, and workspaces per tenant.
func (c *AuthConfig) Ceilings(def agent.Ceiling) agent.Ceilings {
	out := agent.Ceilings{Default: def, Tenants: map[string]agent.Ceiling{}, TenantWorkspaces: true}
	for name, t := range c.Tenants {
		key := func(k string) string { return "tenants." + name + "." + k }
		out.Tenants[name] = agent.Ceiling{
			WorkspaceRoots:  agent.Limit{Values: t.WorkspaceRoots, Setting: key("workspaceRoots")},
			Tools:           agent.Limit{Values: t.Tools, Setting: key("tools")},
			MCPServers:      agent.Limit{Values: t.MCPServers, Setting: key("mcpServers")},
			Models:          agent.Limit{Values: t.Models, Setting: key("models")},
			RequireApproval: agent.Limit{Values: t.RequireApproval, Setting: key("requireApproval")},
			Network:         agent.Permit{Allowed: t.Network, Setting: key("network")},
		}
	}
	return out
}

// TokenGrant maps one bearer token to a caller.
type TokenGrant struct {
	// SHA256 is the hex SHA-256 of the token (`printf %s "$TOKEN" | sha256sum`).
	SHA256 string `json:"sha256"`
	// Tenant of the caller; required for role user.
	Tenant string `json:"tenant,omitempty"`
	// Role is "admin" or "user".
	Role string `json:"role"`
}

// CertificateGrant maps a client certificate's subject to a caller.
type CertificateGrant struct {
	// Subject is the certificate's subject as Go prints it, such as
	// "CN=billing,O=Acme".
	Subject string `json:"subject"`
	Tenant  string `json:"tenant,omitempty"`
	Role    string `json:"role"`
}

// validTenant reports whether name is what a tenant's name may be, as
// tenantRule says.
func validTenant(name string) bool {
	return madeOf(name, alphanumerics+"._-", maxTenantNameBytes) && madeOf(name[:1], alphanumerics, 1)
}

// maxTenantNameBytes is the longest a tenant's name may be.
const maxTenantNameBytes = 64

// tenantRule says what validTenant accepts, in the words errors use.
const tenantRule = "1 to 64 characters of a-z A-Z 0-9 . _ - starting with a letter or digit"

// LoadAuthConfig reads and checks an --auth-config file.
func LoadAuthConfig(path string) (*AuthConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var cfg AuthConfig
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("auth config %s: %w", path, err)
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("auth config %s: %w", path, err)
	}
	return &cfg, nil
}

func (c *AuthConfig) check() error {
	if len(c.Tokens)+len(c.Certificates) == 0 {
		return errors.New(`no "tokens" or "certificates": nobody could call agentd`)
	}
	seen := map[string]int{}
	for i, g := range c.Tokens {
		field := fmt.Sprintf("tokens[%d]", i)
		if b, err := hex.DecodeString(g.SHA256); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("%s.sha256: want the 64 hex digits of the token's SHA-256, not the token", field)
		}
		h := strings.ToLower(g.SHA256)
		if j, dup := seen[h]; dup {
			return fmt.Errorf("%s.sha256: the same token as tokens[%d]", field, j)
		}
		seen[h] = i
		if err := checkGrant(field, g.Tenant, g.Role); err != nil {
			return err
		}
	}
	for name, l := range c.Tenants {
		if !validTenant(name) {
			return fmt.Errorf("tenants.%s: the name is not %s", name, tenantRule)
		}
		if l.MaxCostPerDayUSD < 0 || math.IsNaN(l.MaxCostPerDayUSD) || math.IsInf(l.MaxCostPerDayUSD, 0) {
			return fmt.Errorf("tenants.%s.maxCostPerDayUsd: %v is not a positive number of US dollars", name, l.MaxCostPerDayUSD)
		}
		if l.MaxConcurrentRuns < 0 {
			return fmt.Errorf("tenants.%s.maxConcurrentRuns: %d is negative", name, l.MaxConcurrentRuns)
		}
		if l.RetentionDays != nil && *l.RetentionDays < 0 {
			return fmt.Errorf("tenants.%s.retentionDays: %d is negative (0 keeps sessions)", name, *l.RetentionDays)
		}
	}
	if err := c.checkWorkspaceRoots(); err != nil {
		return err
	}
	for i, g := range c.Certificates {
		field := fmt.Sprintf("certificates[%d]", i)
		if g.Subject == "" {
			return fmt.Errorf("%s.subject: required", field)
		}
		if err := checkGrant(field, g.Tenant, g.Role); err != nil {
			return err
		}
	}
	return nil
}

// checkWorkspaceRoots refuses a tenant's workspace root that is not an
// existing absolute directory, and one that is, or lies inside, another
// tenant's: a workspace of one tenant must never be another's.
func (c *AuthConfig) checkWorkspaceRoots() error {
	type root struct{ tenant, dir string }
	var roots []root
	for _, name := range slices.Sorted(maps.Keys(c.Tenants)) {
		for i, r := range c.Tenants[name].WorkspaceRoots {
			field := fmt.Sprintf("tenants.%s.workspaceRoots[%d]", name, i)
			if !filepath.IsAbs(r) {
				return fmt.Errorf("%s: %q is not an absolute path", field, r)
			}
			dir, err := filepath.EvalSymlinks(r)
			if err != nil {
				return fmt.Errorf("%s: %w", field, err)
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				return fmt.Errorf("%s: %q is not a directory", field, r)
			}
			for _, other := range roots {
				if other.tenant == name {
					continue
				}
				if fspath.Inside(other.dir, dir) || fspath.Inside(dir, other.dir) {
					return fmt.Errorf("%s: %q overlaps a workspace root of tenant %q (%s): a directory may belong to one tenant only", field, r, other.tenant, other.dir)
				}
			}
			roots = append(roots, root{name, dir})
		}
	}
	return nil
}

func checkGrant(field, tenant, role string) error {
	switch role {
	case RoleAdmin:
	case RoleUser:
		if tenant == "" {
			return fmt.Errorf("%s.tenant: required for role user", field)
		}
	default:
		return fmt.Errorf("%s.role: %q, want admin or user", field, role)
	}
	if tenant != "" && !validTenant(tenant) {
		return fmt.Errorf("%s.tenant: %q is not %s", field, tenant, tenantRule)
	}
	return nil
}

// authenticator turns credentials into a Caller.
type authenticator struct {
	tokens   map[[sha256.Size]byte]Caller
	subjects map[string]Caller
	// hint is how to authenticate, for the error without credentials.
	hint   string
	logger *slog.Logger
}

func newAuthenticator(cfg *AuthConfig, legacyToken string, logger *slog.Logger) *authenticator {
	a := &authenticator{tokens: map[[sha256.Size]byte]Caller{}, subjects: map[string]Caller{}, logger: logger,
		hint: `send metadata "authorization: Bearer <token>" with a token of agentd's --auth-config`}
	if legacyToken != "" {
		a.tokens[sha256.Sum256([]byte(legacyToken))] = Caller{Admin: true}
		a.hint = `send metadata "authorization: Bearer <token>" with the token agentd was started with (--auth-token or AGENTD_AUTH_TOKEN)`
	}
	if cfg != nil {
		for _, g := range cfg.Tokens {
			var h [sha256.Size]byte
			b, _ := hex.DecodeString(g.SHA256) // checked by LoadAuthConfig
			copy(h[:], b)
			a.tokens[h] = Caller{Tenant: g.Tenant, Admin: g.Role == RoleAdmin}
		}
		for _, g := range cfg.Certificates {
			a.subjects[g.Subject] = Caller{Tenant: g.Tenant, Admin: g.Role == RoleAdmin}
		}
	}
	return a
}

// authenticate implements auth.AuthFunc: a verified client certificate
// whose subject is granted, or a granted bearer token.
func (a *authenticator) authenticate(ctx context.Context) (context.Context, error) {
	if leaf := verifiedClientCert(ctx); leaf != nil {
		if c, ok := a.subjects[leaf.Subject.String()]; ok {
			return context.WithValue(ctx, callerKey{}, c), nil
		}
	}
	token, err := auth.AuthFromMD(ctx, "bearer")
	if err != nil {
		a.refused(ctx, "no credentials")
		return nil, refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, Message: "missing credentials: " + a.hint})
	}
	// Looked up by the token's hash, which is all agentd keeps: the
	// lookup's timing says nothing about the token itself.
	c, ok := a.tokens[sha256.Sum256([]byte(token))]
	if !ok {
		a.refused(ctx, "unknown bearer token")
		return nil, refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, Message: "invalid bearer token"})
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

// refused logs a call refused for its credentials (the call's own log
// line comes after authentication).
func (a *authenticator) refused(ctx context.Context, why string) {
	method, _ := grpc.Method(ctx)
	addr := ""
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr.String()
	}
	a.logger.InfoContext(ctx, "call refused: unauthenticated", "grpc.method", method, "peer", addr, "reason", why)
}

// verifiedClientCert is the client certificate TLS verified for the call's
// connection, if any.
func verifiedClientCert(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

// tenantLimits are the limits of tenant's runs, for the agent to decide.
func (s *Service) tenantLimits(tenant string) agent.TenantLimits {
	l := s.tenants[tenant]
	return agent.TenantLimits{MaxConcurrentRuns: l.MaxConcurrentRuns, MaxCostPerDayUSD: l.MaxCostPerDayUSD}
}

// GetTenantUsage implements agentdv1.AgentServiceServer.
func (s *Service) GetTenantUsage(ctx context.Context, req *agentdv1.GetTenantUsageRequest) (*agentdv1.GetTenantUsageResponse, error) {
	caller := CallerFrom(ctx)
	tenant := caller.Tenant
	if req.GetTenant() != "" {
		if !caller.Admin && req.GetTenant() != caller.Tenant {
			return nil, refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_TENANT_FORBIDDEN,
				Message:  fmt.Sprintf("tenant: only an admin may ask for another tenant's usage; leave it empty for your own (%q)", caller.Tenant),
				Metadata: map[string]string{"tenant": caller.Tenant}})
		}
		tenant = req.GetTenant()
	}
	start := agent.DayStart(s.now())
	spent, err := s.store.TenantSpend(ctx, tenant, start)
	if err != nil {
		return nil, s.status(ctx, "sum the tenant's spending", err)
	}
	l := s.tenants[tenant]
	return &agentdv1.GetTenantUsageResponse{
		Tenant:            tenant,
		SpentToday:        &agentdv1.Spend{Tokens: spent.Tokens, CostUsd: spent.CostUSD},
		DayStart:          timestamp(start),
		MaxCostPerDayUsd:  l.MaxCostPerDayUSD,
		ActiveRuns:        uint32(s.agent.TenantRuns(tenant)),
		MaxConcurrentRuns: uint32(l.MaxConcurrentRuns),
	}, nil
}
