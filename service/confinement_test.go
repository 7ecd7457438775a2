package service_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
	"github.com/agentd/agentd/tools/sandbox"
	"github.com/agentd/agentd/tools/sandbox/sandboxtest"
)

// errorInfo is the typed refusal a status carries, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// Over gRPC, a tenant's session beyond its ceiling is PERMISSION_DENIED
// with an ErrorInfo typing it (tenant, setting, value), a forbidden
// workspace INVALID_ARGUMENT typed and naming the field, and neither
// creates or changes a session; GetSession shows the confinement.
func TestCeilingsOverTheWire(t *testing.T) {
	base := t.TempDir()
	acmeRoot := filepath.Join(base, "acme")
	acmeWS := filepath.Join(acmeRoot, "ws")
	globexRoot := filepath.Join(base, "globex")
	for _, d := range []string{acmeWS, globexRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	auth := &service.AuthConfig{
		Tokens: []service.TokenGrant{
			{SHA256: tokenHash("acme-token"), Tenant: "acme", Role: service.RoleUser},
			{SHA256: tokenHash("globex-token"), Tenant: "globex", Role: service.RoleUser},
		},
		Tenants: map[string]service.TenantPolicy{
			"acme":   {WorkspaceRoots: []string{acmeRoot}, Tools: []string{"read_file", "bash"}},
			"globex": {WorkspaceRoots: []string{globexRoot}},
		},
	}
	sb := sandboxtest.New(t, sandbox.Options{})
	h := newHarness(t, agent.Options{Sandbox: sb, Ceilings: auth.Ceilings(agent.Ceiling{Network: agent.Permit{Setting: "--sandbox-network"}}),
		Protected: []agent.Protected{{Path: filepath.Join(base, "db", "agentd.db"), What: "database"}}},
		service.ServerOptions{Auth: auth})
	ctx := context.Background()
	acme, globex := as(ctx, "acme-token"), as(ctx, "globex-token")

	tests := []struct {
		name   string
		ctx    context.Context
		cfg    *agentdv1.SessionConfig
		code   codes.Code
		reason agentdv1.ErrorReason
		meta   map[string]string
	}{
		{"a tool beyond the ceiling", acme, &agentdv1.SessionConfig{WorkspaceRoot: acmeWS, Tools: []*agentdv1.Tool{{Name: "write_file"}}},
			codes.PermissionDenied, agentdv1.ErrorReason_ERROR_REASON_TENANT_CEILING, map[string]string{"tenant": "acme", "setting": "tenants.acme.tools", "value": "write_file"}},
		{"another tenant's workspace", globex, &agentdv1.SessionConfig{WorkspaceRoot: acmeWS, Tools: []*agentdv1.Tool{{Name: "read_file"}}},
			codes.PermissionDenied, agentdv1.ErrorReason_ERROR_REASON_TENANT_CEILING, map[string]string{"tenant": "globex", "setting": "tenants.globex.workspaceRoots", "value": acmeWS}},
		{"network", acme, &agentdv1.SessionConfig{Sandbox: &agentdv1.SandboxSettings{Network: agentdv1.SandboxNetwork_SANDBOX_NETWORK_ALLOWED}},
			codes.PermissionDenied, agentdv1.ErrorReason_ERROR_REASON_TENANT_CEILING, map[string]string{"tenant": "acme", "setting": "--sandbox-network", "value": "SANDBOX_NETWORK_ALLOWED"}},
		{"the root directory", acme, &agentdv1.SessionConfig{WorkspaceRoot: "/", Tools: []*agentdv1.Tool{{Name: "read_file"}}},
			codes.InvalidArgument, agentdv1.ErrorReason_ERROR_REASON_WORKSPACE_FORBIDDEN, map[string]string{"path": "/", "protects": "everything"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.client.CreateSession(tc.ctx, &agentdv1.CreateSessionRequest{Config: tc.cfg})
			if status.Code(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			info := errorInfo(err)
			if info.GetReason() != agent.ReasonName(tc.reason) || info.GetDomain() != "agentd.v1" {
				t.Fatalf("ErrorInfo %v, want reason %v", info, tc.reason)
			}
			for k, v := range tc.meta {
				if info.GetMetadata()[k] != v {
					t.Fatalf("metadata %v, want %s=%q", info.GetMetadata(), k, v)
				}
			}
		})
	}
	list, err := h.client.ListSessions(acme, &agentdv1.ListSessionsRequest{})
	if err != nil || len(list.GetSessions()) != 0 {
		t.Fatalf("refused configurations made sessions: %v, %v", list.GetSessions(), err)
	}

	// Within the ceiling; UpdateSession cannot go beyond it.
	created, err := h.client.CreateSession(acme, &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		WorkspaceRoot: acmeWS, Tools: []*agentdv1.Tool{{Name: "bash"}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	_, err = h.client.UpdateSession(acme, &agentdv1.UpdateSessionRequest{SessionId: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.tools"}},
		Config: &agentdv1.SessionConfig{Tools: []*agentdv1.Tool{{Name: "grep"}}}})
	if status.Code(err) != codes.PermissionDenied || errorInfo(err).GetMetadata()["value"] != "grep" {
		t.Fatalf("UpdateSession beyond the ceiling: %v", err)
	}
	got, err := h.client.GetSession(acme, &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSession().GetConfig().GetTools()[0].GetName() != "bash" {
		t.Fatalf("the refused update changed the session: %v", got.GetSession().GetConfig())
	}
	ts := got.GetSession().GetToolSandbox()
	if !ts.GetConfined() || ts.GetMechanism() != sb.Status().String() || ts.GetNetwork() != agentdv1.SandboxNetwork_SANDBOX_NETWORK_NONE {
		t.Fatalf("tool_sandbox %v", ts)
	}
}
