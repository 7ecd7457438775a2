package sqlite

import (
	"hash/maphash"
	"maps"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/persistence"
)

// recordCache keeps the session records GetSession read, so that reading
// a session again costs no query: after any commit a reader's page cache
// is stale, and the query (the session, its implied leaf and its labels)
// took 100-230 us. The file has one owner, whose writer is the only one that
// changes sessions, so the writer keeps the cache true: when a batch
// commits, an append moves a cached record's leaf, LastSeq and update time,
// and any other change to a session (its title, config, labels or leaf,
// its deletion) drops its record.
//
// A record is filled from a read that may have started before a commit of
// its session; generations tell: every commit that touches a session
// moves its stripe's generation, and a read fills the cache only when the
// generation it saw before reading is still current.
type recordCache struct {
	seed maphash.Seed

	mu   sync.Mutex
	byID map[string]*persistence.Session
	gens [recordStripes]uint64
}

// recordStripes is how many generations the sessions share.
const recordStripes = 256

// maxCachedRecords bounds the records kept (each the size of its session's
// config, mostly); past it, arbitrary ones are dropped.
const maxCachedRecords = 4096

func newRecordCache() *recordCache {
	return &recordCache{seed: maphash.MakeSeed(), byID: map[string]*persistence.Session{}}
}

func (c *recordCache) stripe(sessionID string) int {
	return int(maphash.String(c.seed, sessionID) % recordStripes)
}

// get returns a copy of the session's record, the caller's to change.
func (c *recordCache) get(sessionID string) (*persistence.Session, bool) {
	c.mu.Lock()
	rec, ok := c.byID[sessionID]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	return copySession(rec), true
}

// generation is what fill needs: read it before reading the record.
func (c *recordCache) generation(sessionID string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gens[c.stripe(sessionID)]
}

// fill caches a copy of sess, read after generation returned gen, unless a
// commit touched the session since.
func (c *recordCache) fill(gen uint64, sess *persistence.Session) {
	rec := copySession(sess)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gens[c.stripe(sess.ID)] != gen {
		return
	}
	c.putLocked(sess.ID, rec)
}

func (c *recordCache) putLocked(sessionID string, rec *persistence.Session) {
	if _, ok := c.byID[sessionID]; !ok && len(c.byID) >= maxCachedRecords {
		for victim := range c.byID {
			delete(c.byID, victim)
			break
		}
	}
	c.byID[sessionID] = rec
}

// committed applies a batch's changes to sessions (see stagedSession).
func (c *recordCache) committed(changes map[string]stagedSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, ch := range changes {
		if !ch.deleted && !ch.changed && ch.created == nil && ch.appended == 0 {
			continue // only read
		}
		c.gens[c.stripe(id)]++
		rec, ok := c.byID[id]
		if ch.created != nil && !ch.deleted && !ch.changed {
			// A new session is read next, mostly: by the Prompt that
			// follows its creation.
			rec, ok = ch.created, true
			c.putLocked(id, rec)
		}
		switch {
		case !ok:
		case ch.deleted || ch.changed:
			delete(c.byID, id)
		case ch.appended == 0:
		default:
			// An append. A cached record is never changed, as get copies it
			// outside the lock: it is replaced.
			next := *rec
			next.LeafEntryID, next.LastSeq = ch.state.leaf, uint64(ch.state.lastSeq)
			if at := time.Unix(0, ch.appended); at.After(next.UpdateTime) {
				next.UpdateTime = at
			}
			c.byID[id] = &next
		}
	}
}

// clear drops every record, after a batch whose outcome is unknown.
func (c *recordCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.byID)
	for i := range c.gens {
		c.gens[i]++
	}
}

// copySession is a copy of sess that shares nothing a caller may change.
func copySession(sess *persistence.Session) *persistence.Session {
	out := *sess
	out.Config = proto.CloneOf(sess.Config)
	out.Labels = maps.Clone(sess.Labels)
	return &out
}
