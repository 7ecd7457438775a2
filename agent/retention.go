package agent

import (
	"context"
	"errors"
	"time"

	"github.com/agentd/agentd/persistence"
)

// Retention says how long a session no one touched is kept: past it, a
// background sweep deletes the session with its transcript and event logs
// (what its model calls cost stays counted for its tenant).
type Retention struct {
	// Default applies to sessions of no tenant and of tenants without
	// their own; 0 keeps them for ever.
	Default time.Duration
	// Tenants are the tenants' own retention, by name; 0 keeps for ever.
	Tenants map[string]time.Duration
}

// of is the retention of tenant's sessions; 0 for ever.
func (r Retention) of(tenant string) time.Duration {
	if d, ok := r.Tenants[tenant]; ok {
		return d
	}
	return r.Default
}

// any reports whether some session may expire.
func (r Retention) any() bool {
	if r.Default > 0 {
		return true
	}
	for _, d := range r.Tenants {
		if d > 0 {
			return true
		}
	}
	return false
}

// retentionSweepEvery is how often the sweep runs.
const retentionSweepEvery = 10 * time.Minute

// SweepRetention deletes the sessions whose last change is older than
// their retention, and returns how many it deleted. A session with an
// active run, on this replica or another, or one being changed, is left
// for the next sweep.
func (a *Agent) SweepRetention(ctx context.Context) (int, error) {
	now := a.opts.Now()
	deleted := 0
	req := persistence.ListSessionsRequest{AllTenants: true, PageSize: persistence.MaxPageSize}
	for {
		page, err := a.store.ListSessions(ctx, req)
		if err != nil {
			return deleted, err
		}
		for _, s := range page.Sessions {
			keep := a.opts.Retention.of(s.Tenant)
			if keep <= 0 || now.Sub(s.UpdateTime) < keep {
				continue
			}
			release, err := a.hold(ctx, s.ID, "the retention sweep")
			if err != nil {
				continue // busy: next sweep
			}
			err = a.store.DeleteSession(ctx, s.ID)
			release()
			if err != nil && !errors.Is(err, persistence.ErrNotFound) {
				return deleted, err
			}
			if err == nil {
				deleted++
				a.contexts.drop(s.ID)
				a.opts.Metrics.SessionExpired()
				a.opts.Logger.Info("retention: deleted an idle session", "session", s.ID, "tenant", s.Tenant,
					"idle", now.Sub(s.UpdateTime).Round(time.Second), "retention", keep)
			}
		}
		if page.NextPageToken == "" {
			return deleted, nil
		}
		req.PageToken = page.NextPageToken
	}
}

// retentionLoop sweeps now and every retentionSweepEvery until Close.
func (a *Agent) retentionLoop() {
	defer a.bg.Done()
	t := time.NewTicker(retentionSweepEvery)
	defer t.Stop()
	for {
		if _, err := a.SweepRetention(context.Background()); err != nil {
			a.opts.Logger.Warn("the retention sweep failed; trying again later", "err", err)
		}
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
	}
}
