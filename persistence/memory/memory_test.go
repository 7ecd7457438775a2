package memory

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Open: func(*testing.T) persistence.Store { return New() },
		Reopen: func(_ *testing.T, s persistence.Store) persistence.Store {
			return Reopen(s.(*Store))
		},
		CorruptPayload: func(t *testing.T, s persistence.Store, sessionID, entryID string, payload []byte) {
			err := s.(*Store).write(func(d *data) error {
				sess, err := d.session(sessionID)
				if err != nil {
					return err
				}
				sess.entries[sess.index[entryID]].payload = slices.Clone(payload)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestSharedConformance(t *testing.T) {
	// The subtests run one at a time: one clock serves their databases.
	clock := NewManualClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	storetest.RunShared(t, func(*testing.T) persistence.Shared { return NewShared(WithClock(clock.Now)) }, storetest.SharedCaps{
		Advance: clock.Advance,
		Peer:    func(_ *testing.T, s persistence.Shared) persistence.Shared { return s.(*Shared).Peer() },
	})
}
