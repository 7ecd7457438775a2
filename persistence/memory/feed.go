package memory

import (
	"context"
	"time"

	"github.com/agentd/agentd/persistence"
)

// feedRow is one change of the feed and when it was stored.
type feedRow struct {
	change persistence.FeedChange
	stored time.Time
}

// AppendFeed implements [persistence.Shared]: the write lock orders the
// changes of every handle.
func (s *Shared) AppendFeed(_ context.Context, origin string, payloads ...[]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	return s.write(func(d *data) error {
		now := d.nowTime()
		for _, p := range payloads {
			d.feedSeq++
			d.feed = append(d.feed, feedRow{change: persistence.FeedChange{Seq: d.feedSeq, Origin: origin, Payload: append([]byte{}, p...)}, stored: now})
		}
		d.wake(persistence.FeedTopic)
		return nil
	})
}

// ReadFeed implements [persistence.Shared].
func (s *Shared) ReadFeed(_ context.Context, after int64, limit int) ([]persistence.FeedChange, int64, error) {
	var out []persistence.FeedChange
	var pruned int64
	err := s.read(func(d *data) error {
		pruned = d.feedPruned
		for _, r := range d.feed {
			if len(out) == limit {
				break
			}
			if r.change.Seq > after {
				c := r.change
				c.Payload = append([]byte{}, c.Payload...)
				out = append(out, c)
			}
		}
		return nil
	})
	return out, pruned, err
}

// FeedHead implements [persistence.Shared].
func (s *Shared) FeedHead(context.Context) (int64, error) {
	var head int64
	err := s.read(func(d *data) error {
		head = d.feedSeq
		return nil
	})
	return head, err
}

// PruneFeed implements [persistence.Shared].
func (s *Shared) PruneFeed(_ context.Context, age time.Duration) error {
	return s.write(func(d *data) error {
		cutoff := d.nowTime().Add(-age)
		n := 0
		for n < len(d.feed) && d.feed[n].stored.Before(cutoff) {
			d.feedPruned = d.feed[n].change.Seq
			n++
		}
		d.feed = append([]feedRow(nil), d.feed[n:]...)
		return nil
	})
}
