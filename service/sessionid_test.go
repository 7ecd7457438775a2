package service_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
	"github.com/agentd/agentd/service"
)

// Client-chosen session ids, on SQLite and on PostgreSQL.
func TestClientChosenSessionIDs(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testClientChosenSessionIDs(t, "") })
	t.Run("postgres", func(t *testing.T) { testClientChosenSessionIDs(t, pgtest.DSN(t)) })
}

// testClientChosenSessionIDs: a chosen id names the session; a second
// CreateSession with that id and an equal configuration returns it
// unchanged (title and labels as first given), with another configuration
// or from another tenant it is refused with SESSION_EXISTS in words that
// say nothing of the other session; ids outside the charset, too long or
// with agentd's own prefixes are refused naming session_id; concurrent
// creates with one id make one session.
func testClientChosenSessionIDs(t *testing.T, dsn string) {
	h := newHarnessOn(t, dsn, agent.Options{ReplicaID: "a"}, service.ServerOptions{Auth: &service.AuthConfig{Tokens: []service.TokenGrant{
		{SHA256: tokenHash("acme-token"), Tenant: "acme", Role: service.RoleUser},
		{SHA256: tokenHash("globex-token"), Tenant: "globex", Role: service.RoleUser},
	}}})
	ctx := context.Background()
	acme, globex := as(ctx, "acme-token"), as(ctx, "globex-token")
	c := h.client
	cfg := &agentdv1.SessionConfig{SystemPrompt: "You triage tickets.", Faux: &agentdv1.FauxScript{Echo: true}}
	const id = "ticket-42.v1:a_B"

	created, err := c.CreateSession(acme, &agentdv1.CreateSessionRequest{SessionId: id, Config: cfg, Title: "first", Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := created.GetSession().GetId(); got != id {
		t.Fatalf("session id %q, want %q", got, id)
	}
	again, err := c.CreateSession(acme, &agentdv1.CreateSessionRequest{SessionId: id, Config: proto.CloneOf(cfg), Title: "second", Labels: map[string]string{"other": "x"}})
	if err != nil {
		t.Fatalf("the same id and configuration again: %v", err)
	}
	if s := again.GetSession(); s.GetId() != id || s.GetTitle() != "first" || s.GetLabels()["k"] != "v" || !s.GetCreateTime().AsTime().Equal(created.GetSession().GetCreateTime().AsTime()) {
		t.Fatalf("the second create returned %v, want the session created first", s)
	}

	other := proto.CloneOf(cfg)
	other.SystemPrompt = "You write poems."
	_, conflict := c.CreateSession(acme, &agentdv1.CreateSessionRequest{SessionId: id, Config: other})
	wantCode(t, conflict, codes.AlreadyExists, id)
	wantReasonName(t, conflict, "SESSION_EXISTS")
	_, foreign := c.CreateSession(globex, &agentdv1.CreateSessionRequest{SessionId: id, Config: proto.CloneOf(cfg)})
	wantCode(t, foreign, codes.AlreadyExists, id)
	wantReasonName(t, foreign, "SESSION_EXISTS")
	if a, b := status.Convert(foreign).Message(), status.Convert(conflict).Message(); a != b {
		t.Fatalf("another tenant's id is refused as %q, a configuration mismatch as %q: the words must not tell them apart", a, b)
	}
	if _, err := c.GetSession(globex, &agentdv1.GetSessionRequest{SessionId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("globex reads acme's session: %v", err)
	}

	// No configuration and an empty one are the same configuration.
	if _, err := c.CreateSession(acme, &agentdv1.CreateSessionRequest{SessionId: "empty"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSession(acme, &agentdv1.CreateSessionRequest{SessionId: "empty", Config: &agentdv1.SessionConfig{}}); err != nil {
		t.Fatalf("an empty configuration after none: %v", err)
	}

	before := len(listAs(t, c, acme))
	for name, bad := range map[string]string{
		"space":        "has space",
		"slash":        "a/b",
		"non-ascii":    "tïcket",
		"too long":     strings.Repeat("a", 129),
		"run prefix":   "run-0123",
		"sub prefix":   "sub-0123",
		"only newline": "\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.CreateSession(acme, &agentdv1.CreateSessionRequest{SessionId: bad, Config: cfg})
			wantField(t, err, "session_id")
		})
	}
	if after := len(listAs(t, c, acme)); after != before {
		t.Fatalf("refused creates made %d sessions", after-before)
	}
	if _, err := c.CreateSession(acme, &agentdv1.CreateSessionRequest{SessionId: strings.Repeat("b", 128), Config: cfg}); err != nil {
		t.Fatalf("128 characters: %v", err)
	}

	// Concurrent creates of one id: with equal configurations every call
	// gets the one session; with different ones a single call wins.
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			resp, err := c.CreateSession(acme, &agentdv1.CreateSessionRequest{SessionId: "race-same", Config: proto.CloneOf(cfg)})
			if err == nil && resp.GetSession().GetId() != "race-same" {
				t.Errorf("created %q", resp.GetSession().GetId())
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("a concurrent create with an equal configuration: %v", err)
		}
	}
	for i := range n {
		wg.Go(func() {
			mine := proto.CloneOf(cfg)
			mine.SystemPrompt = strings.Repeat("x", i+1)
			_, errs[i] = c.CreateSession(acme, &agentdv1.CreateSessionRequest{SessionId: "race-different", Config: mine})
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch status.Code(err) {
		case codes.OK:
			won++
		case codes.AlreadyExists:
		default:
			t.Fatalf("a concurrent create with another configuration: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d concurrent creates with different configurations succeeded, want 1", won)
	}
	count := map[string]int{}
	for _, s := range listAs(t, c, acme) {
		count[s.GetId()]++
	}
	if count["race-same"] != 1 || count["race-different"] != 1 || count[id] != 1 {
		t.Fatalf("sessions by id: %v", count)
	}
}

// listAs lists every session ctx's caller sees.
func listAs(t *testing.T, c agentdv1.AgentServiceClient, ctx context.Context) []*agentdv1.Session {
	t.Helper()
	var all []*agentdv1.Session
	token := ""
	for {
		resp, err := c.ListSessions(ctx, &agentdv1.ListSessionsRequest{PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, resp.GetSessions()...)
		if token = resp.GetNextPageToken(); token == "" {
			return all
		}
	}
}
