package agent_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// The retention sweep deletes the sessions idle longer than their
// tenant's retention (or the default), keeps the others and any session
// with an active run, and the spending of what it deleted stays its
// tenant's.
func TestRetentionSweep(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	metrics := &expiryCounter{}
	h := newHarness(t, agent.Options{Now: clock.Now, Metrics: metrics, Retention: agent.Retention{
		Default: 30 * 24 * time.Hour,
		Tenants: map[string]time.Duration{"acme": 7 * 24 * time.Hour, "keeper": 0},
	}})
	ctx := context.Background()
	spend := &agentdv1.Usage{TotalTokens: 40}
	paid := script(&agentdv1.AssistantMessage{Content: text("paid").GetContent(), Usage: spend})
	acme := h.sessionOf("acme", paid)
	h.prompt(acme, "spend")
	keeper := h.sessionOf("keeper", script(text("kept")))
	plain := h.sessionOf("", script(text("plain")))
	// A run that waits for an approval stays active through the sweeps.
	busyCfg := script(toolCall(t, "c1", "note", map[string]any{}), text("done"))
	busyCfg.Tools = []*agentdv1.Tool{{Name: "note", Description: "notes", Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT,
		Parameters: mustStructpb(t, map[string]any{"type": "object"})}}
	busy := h.sessionOf("acme", busyCfg)
	runID, err := h.a.Start(ctx, agent.StartRequest{SessionID: busy, Prompt: user("wait")})
	if err != nil {
		t.Fatal(err)
	}
	// Its first model call is spending too: measure after it has asked for the tool.
	errAsked := errors.New("asked")
	if err := h.a.Follow(ctx, busy, runID, 0, agent.FollowOptions{}, func(e agent.Event) error {
		if ev, err := e.Decode(); err != nil || ev.GetToolCallRequested() != nil {
			return errors.Join(err, errAsked)
		}
		return nil
	}); !errors.Is(err, errAsked) {
		t.Fatalf("following the busy run: %v", err)
	}

	exists := func(id string) bool {
		_, err := h.store.GetSession(ctx, id)
		if err != nil && !errors.Is(err, persistence.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	spentBefore, err := h.store.TenantSpend(ctx, "acme", time.Time{})
	if err != nil || spentBefore.Tokens < 40 {
		t.Fatalf("acme's spending: %+v, %v", spentBefore, err)
	}
	clock.advance(6 * 24 * time.Hour)
	if n, err := h.a.SweepRetention(ctx); err != nil || n != 0 {
		t.Fatalf("after 6 days: %d deleted, %v", n, err)
	}
	clock.advance(2 * 24 * time.Hour) // 8 days: past acme's 7
	if n, err := h.a.SweepRetention(ctx); err != nil || n != 1 {
		t.Fatalf("after 8 days: %d deleted, %v", n, err)
	}
	if exists(acme) || !exists(busy) || !exists(keeper) || !exists(plain) {
		t.Fatalf("after 8 days: acme %v busy %v keeper %v plain %v", exists(acme), exists(busy), exists(keeper), exists(plain))
	}
	if got, err := h.store.TenantSpend(ctx, "acme", time.Time{}); err != nil || got != spentBefore {
		t.Fatalf("the deleted session's spending: %+v, %v", got, err)
	}
	clock.advance(30 * 24 * time.Hour) // 38 days: past the default
	if n, err := h.a.SweepRetention(ctx); err != nil || n != 1 || exists(plain) || !exists(keeper) || !exists(busy) {
		t.Fatalf("after 38 days: %d deleted, %v; plain %v keeper %v busy %v", n, err, exists(plain), exists(keeper), exists(busy))
	}
	if n := metrics.expired.Load(); n != 2 {
		t.Fatalf("agentd_sessions_expired_total counted %d, want 2", n)
	}
	if _, err := h.a.Abort(ctx, busy, runID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.follow(busy, runID, 0); err != nil {
		t.Fatal(err)
	}
}

func mustStructpb(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// expiryCounter counts the sessions the sweep deleted and ignores the
// other measurements.
type expiryCounter struct{ expired atomic.Int64 }

func (*expiryCounter) RunStarted()                        {}
func (*expiryCounter) RunEnded()                          {}
func (*expiryCounter) EventProduced()                     {}
func (*expiryCounter) StoreLatency(string, time.Duration) {}
func (*expiryCounter) LeasesHeld(int)                     {}
func (*expiryCounter) LeaseLost()                         {}
func (*expiryCounter) ContextCacheBytes(int)              {}
func (m *expiryCounter) SessionExpired()                  { m.expired.Add(1) }
