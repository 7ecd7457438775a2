package service_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
	"github.com/agentd/agentd/service"
)

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// as is a context carrying token as the call's bearer credential.
func as(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// Two tenants and an admin over real gRPC: every RPC that names a session
// answers another tenant's ids exactly as unknown ids (NOT_FOUND, the same
// text) and changes nothing; listings, imports and forks stay within
// tenants; the admin sees all.
func TestTenantsAreIsolated(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{Auth: &service.AuthConfig{Tokens: []service.TokenGrant{
		{SHA256: tokenHash("acme-token"), Tenant: "acme", Role: service.RoleUser},
		{SHA256: tokenHash("globex-token"), Tenant: "globex", Role: service.RoleUser},
		{SHA256: tokenHash("root-token"), Role: service.RoleAdmin},
	}}})
	ctx := context.Background()
	acme, globex, admin := as(ctx, "acme-token"), as(ctx, "globex-token"), as(ctx, "root-token")
	c := h.client

	created, err := c.CreateSession(acme, &agentdv1.CreateSessionRequest{Title: "acme's", Config: &agentdv1.SessionConfig{
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{faux.Message(faux.Text("hi"))}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	stream, err := c.Prompt(acme, &agentdv1.PromptRequest{SessionId: id, Content: texts("hello")})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	runID := evs[0].GetRunId()
	before, err := c.GetTranscript(acme, &agentdv1.GetTranscriptRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	entryID := before.GetEntries()[0].GetId()
	sessBefore, _ := c.GetSession(acme, &agentdv1.GetSessionRequest{SessionId: id})

	recv := func(st interface {
		Recv() (*agentdv1.AgentEvent, error)
	}, err error) error {
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	calls := map[string]func(ctx context.Context, sid string) error{
		"GetSession": func(ctx context.Context, sid string) error {
			_, err := c.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: sid})
			return err
		},
		"DeleteSession": func(ctx context.Context, sid string) error {
			_, err := c.DeleteSession(ctx, &agentdv1.DeleteSessionRequest{SessionId: sid, Force: true})
			return err
		},
		"Prompt": func(ctx context.Context, sid string) error {
			return recv(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sid, Content: texts("intrude")}))
		},
		"Continue": func(ctx context.Context, sid string) error {
			return recv(c.Continue(ctx, &agentdv1.ContinueRequest{SessionId: sid}))
		},
		"Steer": func(ctx context.Context, sid string) error {
			_, err := c.Steer(ctx, &agentdv1.SteerRequest{SessionId: sid, Content: texts("x")})
			return err
		},
		"FollowUp": func(ctx context.Context, sid string) error {
			_, err := c.FollowUp(ctx, &agentdv1.FollowUpRequest{SessionId: sid, Content: texts("x")})
			return err
		},
		"ClearQueue": func(ctx context.Context, sid string) error {
			_, err := c.ClearQueue(ctx, &agentdv1.ClearQueueRequest{SessionId: sid})
			return err
		},
		"Abort": func(ctx context.Context, sid string) error {
			_, err := c.Abort(ctx, &agentdv1.AbortRequest{SessionId: sid})
			return err
		},
		"Attach": func(ctx context.Context, sid string) error {
			return recv(c.Attach(ctx, &agentdv1.AttachRequest{SessionId: sid, RunId: runID}))
		},
		"SubmitToolResult": func(ctx context.Context, sid string) error {
			_, err := c.SubmitToolResult(ctx, &agentdv1.SubmitToolResultRequest{SessionId: sid, ToolCallId: "call", Content: texts("r")})
			return err
		},
		"ResolveApproval": func(ctx context.Context, sid string) error {
			_, err := c.ResolveApproval(ctx, &agentdv1.ResolveApprovalRequest{SessionId: sid, ToolCallId: "call", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED})
			return err
		},
		"ListApprovalRules": func(ctx context.Context, sid string) error {
			_, err := c.ListApprovalRules(ctx, &agentdv1.ListApprovalRulesRequest{SessionId: sid})
			return err
		},
		"DeleteApprovalRule": func(ctx context.Context, sid string) error {
			_, err := c.DeleteApprovalRule(ctx, &agentdv1.DeleteApprovalRuleRequest{SessionId: sid, RuleId: entryID})
			return err
		},
		"ResolveInDoubt": func(ctx context.Context, sid string) error {
			_, err := c.ResolveInDoubt(ctx, &agentdv1.ResolveInDoubtRequest{SessionId: sid, ToolCallId: "call", Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP})
			return err
		},
		"AppendMessages": func(ctx context.Context, sid string) error {
			_, err := c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: sid, Messages: []*agentdv1.AgentMessage{{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts("x")}}}}})
			return err
		},
		"GetRun": func(ctx context.Context, sid string) error {
			_, err := c.GetRun(ctx, &agentdv1.GetRunRequest{SessionId: sid, RunId: runID})
			return err
		},
		"ListRuns": func(ctx context.Context, sid string) error {
			_, err := c.ListRuns(ctx, &agentdv1.ListRunsRequest{SessionId: sid})
			return err
		},
		"GetTranscript": func(ctx context.Context, sid string) error {
			_, err := c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: sid})
			return err
		},
		"GetContext": func(ctx context.Context, sid string) error {
			_, err := c.GetContext(ctx, &agentdv1.GetContextRequest{SessionId: sid})
			return err
		},
		"UpdateSession": func(ctx context.Context, sid string) error {
			_, err := c.UpdateSession(ctx, &agentdv1.UpdateSessionRequest{SessionId: sid, Title: "mine now", UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}})
			return err
		},
		"Compact": func(ctx context.Context, sid string) error {
			return recv(c.Compact(ctx, &agentdv1.CompactRequest{SessionId: sid, Summary: "gone"}))
		},
		"SubmitContext": func(ctx context.Context, sid string) error {
			_, err := c.SubmitContext(ctx, &agentdv1.SubmitContextRequest{SessionId: sid, RequestId: "req"})
			return err
		},
		"SubmitHookResult": func(ctx context.Context, sid string) error {
			_, err := c.SubmitHookResult(ctx, &agentdv1.SubmitHookResultRequest{SessionId: sid, RequestId: "req", Verdict: agentdv1.HookVerdict_HOOK_VERDICT_ALLOW})
			return err
		},
		"GetTree": func(ctx context.Context, sid string) error {
			_, err := c.GetTree(ctx, &agentdv1.GetTreeRequest{SessionId: sid})
			return err
		},
		"SetLabel": func(ctx context.Context, sid string) error {
			_, err := c.SetLabel(ctx, &agentdv1.SetLabelRequest{SessionId: sid, EntryId: entryID, Label: "x"})
			return err
		},
		"Navigate": func(ctx context.Context, sid string) error {
			_, err := c.Navigate(ctx, &agentdv1.NavigateRequest{SessionId: sid, EntryId: entryID})
			return err
		},
		"RedactEntries": func(ctx context.Context, sid string) error {
			_, err := c.RedactEntries(ctx, &agentdv1.RedactEntriesRequest{SessionId: sid, EntryIds: []string{entryID}, Reason: "forget"})
			return err
		},
		"ForkSession": func(ctx context.Context, sid string) error {
			_, err := c.ForkSession(ctx, &agentdv1.ForkSessionRequest{SessionId: sid})
			return err
		},
		"ExportSession": func(ctx context.Context, sid string) error {
			st, err := c.ExportSession(ctx, &agentdv1.ExportSessionRequest{SessionId: sid})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}, "WatchSession": func(ctx context.Context, sid string) error {
			st, err := c.WatchSession(ctx, &agentdv1.WatchSessionRequest{SessionId: sid})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		"ListPendingInteractions": func(ctx context.Context, sid string) error {
			_, err := c.ListPendingInteractions(ctx, &agentdv1.ListPendingInteractionsRequest{SessionId: sid})
			return err
		},
		"WatchPendingInteractions": func(ctx context.Context, sid string) error {
			st, err := c.WatchPendingInteractions(ctx, &agentdv1.WatchPendingInteractionsRequest{SessionId: sid})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	}
	// Every RPC is here or scoped below.
	global := map[string]bool{"CreateSession": true, "ListSessions": true, "ListModels": true, "ListToolSources": true, "ImportSession": true, "GetTenantUsage": true,
		// Tenant-filtered, not scoped by a session: TestWatchIsTenantScoped.
		"WatchSessions": true}
	methods := agentdv1.File_agentd_v1_service_proto.Services().ByName("AgentService").Methods()
	for i := range methods.Len() {
		if name := string(methods.Get(i).Name()); calls[name] == nil && !global[name] {
			t.Errorf("RPC %s is not covered by the isolation table", name)
		}
	}
	const unknown = "0123456789abcdef"
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			foreign := call(globex, id)
			missing := call(globex, unknown)
			if status.Code(foreign) != codes.NotFound {
				t.Fatalf("another tenant's session: %v, want NOT_FOUND", foreign)
			}
			if got, want := status.Convert(foreign).Message(), strings.ReplaceAll(status.Convert(missing).Message(), unknown, id); got != want || status.Code(missing) != codes.NotFound {
				t.Errorf("another tenant's session answers %q; an unknown one %q (%v)", got, want, status.Code(missing))
			}
		})
	}

	after, err := c.GetTranscript(acme, &agentdv1.GetTranscriptRequest{SessionId: id})
	if err != nil || len(after.GetEntries()) != len(before.GetEntries()) || after.GetLabels() != nil && len(after.GetLabels()) != len(before.GetLabels()) {
		t.Fatalf("acme's transcript changed: %d entries before, %d after (%v)", len(before.GetEntries()), len(after.GetEntries()), err)
	}
	sessAfter, err := c.GetSession(acme, &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil || sessAfter.GetSession().GetTitle() != "acme's" || !sessAfter.GetSession().GetUpdateTime().AsTime().Equal(sessBefore.GetSession().GetUpdateTime().AsTime()) {
		t.Fatalf("acme's session changed: %v, %v", sessAfter.GetSession(), err)
	}

	// Listings and new sessions stay within tenants; the admin sees all.
	theirs, err := c.CreateSession(globex, &agentdv1.CreateSessionRequest{Title: "globex's"})
	if err != nil {
		t.Fatal(err)
	}
	listed := func(ctx context.Context) []string {
		resp, err := c.ListSessions(ctx, &agentdv1.ListSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range resp.GetSessions() {
			out = append(out, s.GetTitle())
		}
		return out
	}
	if got := listed(globex); len(got) != 1 || got[0] != "globex's" {
		t.Errorf("globex lists %v", got)
	}
	if got := listed(acme); len(got) != 1 || got[0] != "acme's" {
		t.Errorf("acme lists %v", got)
	}
	if got := listed(admin); len(got) != 2 {
		t.Errorf("the admin lists %v, want both tenants' sessions", got)
	}
	fork, err := c.ForkSession(admin, &agentdv1.ForkSessionRequest{SessionId: id, Title: "admin's fork"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSession(acme, &agentdv1.GetSessionRequest{SessionId: fork.GetSession().GetId()}); err != nil {
		t.Errorf("an admin's fork of acme's session is not acme's: %v", err)
	}
	if _, err := c.GetSession(globex, &agentdv1.GetSessionRequest{SessionId: theirs.GetSession().GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no credentials: %v, want UNAUTHENTICATED", err)
	}
	if _, err := c.GetSession(as(ctx, "acme-token "), &agentdv1.GetSessionRequest{SessionId: id}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a wrong token: %v, want UNAUTHENTICATED", err)
	}
}

func TestLoadAuthConfig(t *testing.T) {
	write := func(body string) string {
		path := filepath.Join(t.TempDir(), "auth.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := `{"tokens": [{"sha256": "` + tokenHash("t") + `", "tenant": "acme", "role": "user"}, {"sha256": "` + strings.ToUpper(tokenHash("u")) + `", "role": "admin"}],
		"certificates": [{"subject": "CN=billing,O=Acme", "tenant": "acme", "role": "user"}]}`
	cfg, err := service.LoadAuthConfig(write(good))
	if err != nil || len(cfg.Tokens) != 2 || cfg.Certificates[0].Tenant != "acme" {
		t.Fatalf("good config: %+v, %v", cfg, err)
	}
	roots := t.TempDir()
	for _, d := range []string{"a", "a/sub", "b"} {
		if err := os.MkdirAll(filepath.Join(roots, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	grants := `"tokens": [{"sha256": "` + tokenHash("t") + `", "tenant": "acme", "role": "user"}]`
	withRoots := func(acme, globex string) string {
		return `{` + grants + `, "tenants": {"acme": {"workspaceRoots": ["` + filepath.Join(roots, acme) + `"]}, "globex": {"workspaceRoots": ["` + filepath.Join(roots, globex) + `"]}}}`
	}
	if cfg, err := service.LoadAuthConfig(write(withRoots("a", "b"))); err != nil || len(cfg.Tenants["acme"].WorkspaceRoots) != 1 {
		t.Fatalf("separate workspace roots: %+v, %v", cfg, err)
	}
	bad := []struct{ name, body, says string }{
		{"a workspace root of two tenants", withRoots("a", "a"), `overlaps a workspace root of tenant "acme"`},
		{"a workspace root inside another tenant's", withRoots("a", "a/sub"), `tenants.globex.workspaceRoots[0]`},
		{"a relative workspace root", `{` + grants + `, "tenants": {"acme": {"workspaceRoots": ["ws"]}}}`, `tenants.acme.workspaceRoots[0]: "ws" is not an absolute path`},
		{"a missing workspace root", `{` + grants + `, "tenants": {"acme": {"workspaceRoots": ["` + filepath.Join(roots, "gone") + `"]}}}`, "no such file or directory"},
		{"a token in clear", `{"tokens": [{"token": "s3cret", "role": "admin"}]}`, `unknown field "token"`},
		{"not a hash", `{"tokens": [{"sha256": "s3cret", "role": "admin"}]}`, "tokens[0].sha256: want the 64 hex digits of the token's SHA-256, not the token"},
		{"user without tenant", `{"tokens": [{"sha256": "` + tokenHash("t") + `", "role": "user"}]}`, "tokens[0].tenant: required for role user"},
		{"unknown role", `{"tokens": [{"sha256": "` + tokenHash("t") + `", "role": "owner"}]}`, `tokens[0].role: "owner", want admin or user`},
		{"same token twice", `{"tokens": [{"sha256": "` + tokenHash("t") + `", "role": "admin"}, {"sha256": "` + tokenHash("t") + `", "role": "admin"}]}`, "the same token as tokens[0]"},
		{"bad tenant", `{"tokens": [{"sha256": "` + tokenHash("t") + `", "tenant": "a b", "role": "user"}]}`, `tokens[0].tenant: "a b" is not`},
		{"nobody", `{"tokens": []}`, "nobody could call agentd"},
		{"certificate without subject", `{"certificates": [{"role": "admin"}]}`, "certificates[0].subject: required"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := service.LoadAuthConfig(write(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

// A tenant over its daily cost limit gets RESOURCE_EXHAUSTED naming the
// limit and when it resets; its concurrency limit refuses a second run;
// spending shows in GetSession and GetTenantUsage, which only an admin
// asks for another tenant.
func TestTenantLimits(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{Auth: &service.AuthConfig{Tokens: []service.TokenGrant{
		{SHA256: tokenHash("acme-token"), Tenant: "acme", Role: service.RoleUser},
		{SHA256: tokenHash("globex-token"), Tenant: "globex", Role: service.RoleUser},
		{SHA256: tokenHash("root-token"), Role: service.RoleAdmin},
	}}}, service.Options{Tenants: map[string]service.TenantPolicy{
		"acme":   {MaxCostPerDayUSD: 1},
		"globex": {MaxConcurrentRuns: 1},
	}})
	ctx := context.Background()
	acme, globex, admin := as(ctx, "acme-token"), as(ctx, "globex-token"), as(ctx, "root-token")
	c := h.client
	pricey := faux.Message(faux.Text("expensive"))
	pricey.Usage = &agentdv1.Usage{TotalTokens: 42, Cost: &agentdv1.Cost{Total: 1.5}}
	created, err := c.CreateSession(acme, &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{pricey, pricey}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	stream, err := c.Prompt(acme, &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetSession(acme, &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil || got.GetSession().GetSpent().GetCostUsd() != 1.5 || got.GetSession().GetSpent().GetTokens() != 42 {
		t.Fatalf("GetSession spent %v, %v; want 42 tokens, $1.5", got.GetSession().GetSpent(), err)
	}
	usage, err := c.GetTenantUsage(acme, &agentdv1.GetTenantUsageRequest{})
	if err != nil || usage.GetTenant() != "acme" || usage.GetSpentToday().GetCostUsd() != 1.5 || usage.GetMaxCostPerDayUsd() != 1 {
		t.Fatalf("GetTenantUsage: %v, %v", usage, err)
	}
	stream, err = c.Prompt(acme, &agentdv1.PromptRequest{SessionId: id, Content: texts("again")})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted, `tenant "acme" has spent $1.5000 today, its maxCostPerDayUsd is $1.0000`)
	if !strings.Contains(status.Convert(err).Message(), "it resets at "+usage.GetDayStart().AsTime().Add(24*time.Hour).Format(time.RFC3339)) {
		t.Errorf("the refusal does not say when the limit resets: %v", err)
	}
	if _, err := c.GetTenantUsage(globex, &agentdv1.GetTenantUsageRequest{Tenant: "acme"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("globex asking for acme's usage: %v, want PERMISSION_DENIED", err)
	}
	if u, err := c.GetTenantUsage(admin, &agentdv1.GetTenantUsageRequest{Tenant: "acme"}); err != nil || u.GetSpentToday().GetCostUsd() != 1.5 {
		t.Errorf("the admin asking for acme's usage: %v, %v", u, err)
	}

	// globex may run one run at a time.
	slow := &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{TokensPerSecond: 20, Responses: []*agentdv1.AssistantMessage{faux.Message(faux.Text(strings.Repeat("slow ", 200)))}}}
	first, err := c.CreateSession(globex, &agentdv1.CreateSessionRequest{Config: slow})
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.CreateSession(globex, &agentdv1.CreateSessionRequest{Config: slow})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(globex)
	defer cancel()
	running, err := c.Prompt(runCtx, &agentdv1.PromptRequest{SessionId: first.GetSession().GetId(), Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := running.Recv(); err != nil { // agent_start: the run is active
		t.Fatal(err)
	}
	if u, err := c.GetTenantUsage(globex, &agentdv1.GetTenantUsageRequest{}); err != nil || u.GetActiveRuns() != 1 || u.GetMaxConcurrentRuns() != 1 {
		t.Errorf("globex usage while running: %v, %v", u, err)
	}
	stream, err = c.Prompt(globex, &agentdv1.PromptRequest{SessionId: second.GetSession().GetId(), Content: texts("go")})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted, `tenant "globex" has 1 runs active, the most its max_concurrent_runs allows`)
}
