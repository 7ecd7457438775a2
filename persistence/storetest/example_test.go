package storetest_test

import (
	"testing"
	"time"

	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
	"github.com/agentd/agentd/persistence/storetest"
)

// An engine proves it keeps the contract of [persistence.Store] by
// running the suite from its own tests, and, when several agentd
// processes may share it, the suite of [persistence.Shared] with the
// capabilities it has: here the in-memory engine, whose leases run on a
// clock the suite moves and whose handles share one database.
func Example() {
	conformance := func(t *testing.T) {
		storetest.Run(t, storetest.Harness{
			Open: func(*testing.T) persistence.Store { return memory.New() },
			Reopen: func(_ *testing.T, s persistence.Store) persistence.Store {
				return memory.Reopen(s.(*memory.Store))
			},
		})
		clock := memory.NewManualClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
		storetest.RunShared(t, func(*testing.T) persistence.Shared {
			return memory.NewShared(memory.WithClock(clock.Now))
		}, storetest.SharedCaps{
			Advance: clock.Advance,
			Peer: func(_ *testing.T, s persistence.Shared) persistence.Shared {
				return s.(*memory.Shared).Peer()
			},
		})
	}
	// In an engine's package: func TestConformance(t *testing.T) { conformance(t) }
	_ = conformance
}
