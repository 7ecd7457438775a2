package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// Store is the SQLite persistence.Store. Safe for concurrent use.
type Store struct {
	writer *sql.DB
	reader *sql.DB
	now    func() time.Time

	// Background checkpoints (see checkpointLoop).
	checkpointer   *sql.DB
	commits        atomic.Int64
	checkpointKick chan struct{}
	checkpointStop chan struct{}
	checkpointDone sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	// Group commit (see writeLoop).
	writes    chan *writeRequest
	writeStop chan struct{}
	writeDone sync.WaitGroup

	// sessions caches the session rows the writer has seen, so an append
	// needs no SELECT; owned by the writer goroutine (see writeTx).
	sessions map[string]sessionState
	// payloads compresses entry payloads; owned by the writer goroutine.
	payloads payloadEncoder

	// Write statements, prepared once on the single writer connection.
	wSession     *sql.Stmt
	wEntryExists *sql.Stmt
	wInsertEntry *sql.Stmt
	wMoveLeaf    *sql.Stmt

	// Read statements, prepared lazily per reader connection by database/sql.
	rSession *sql.Stmt
	rTree    *sql.Stmt
	rEntry   *sql.Stmt
	rPage    *sql.Stmt
}

var _ persistence.Store = (*Store)(nil)

// maxSeq is the largest per-session sequence number: entries.key packs
// session_pk and seq into 64 bits, 32 for seq.
const maxSeq = 1<<32 - 1

const (
	sqlSessionByID = `SELECT pk, leaf_entry_id, next_seq FROM sessions WHERE id = ?`
	// A path is loaded with one range scan of the session's key range (a
	// sequential read in append order); the tree is walked in memory and
	// only the entries on the path are decoded.
	sqlTree = `SELECT seq, id, coalesce(parent_id, ''), encoding, payload FROM entries WHERE key > ?1 * 4294967296 AND key < (?1 + 1) * 4294967296 ORDER BY key`
)

func newStore(ctx context.Context, writer, reader, checkpointer *sql.DB, compress bool) (*Store, error) {
	s := &Store{writer: writer, reader: reader, now: time.Now, checkpointer: checkpointer,
		checkpointKick: make(chan struct{}, 1), checkpointStop: make(chan struct{}),
		writes: make(chan *writeRequest), writeStop: make(chan struct{}), sessions: map[string]sessionState{},
		payloads: payloadEncoder{off: !compress}}
	prep := []struct {
		db   *sql.DB
		dst  **sql.Stmt
		text string
	}{
		{writer, &s.wSession, sqlSessionByID},
		{writer, &s.wEntryExists, `SELECT 1 FROM entries WHERE session_pk = ? AND id = ?`},
		{writer, &s.wInsertEntry, `INSERT INTO entries (key, session_pk, seq, id, parent_id, kind, create_time, payload, encoding) VALUES (?1 * 4294967296 + ?2, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)`},
		// Guarded by the state the writer's cache expects, so a cache that
		// went stale (another process wrote the file) is detected rather
		// than trusted; see errStaleSession.
		{writer, &s.wMoveLeaf, `UPDATE sessions SET leaf_entry_id = ?1, next_seq = ?2, update_time = ?3 WHERE pk = ?4 AND next_seq = ?5 AND leaf_entry_id IS ?6`},
		{reader, &s.rSession, sqlSessionByID},
		{reader, &s.rTree, sqlTree},
		{reader, &s.rEntry, `SELECT seq, id, encoding, payload FROM entries WHERE session_pk = ? AND id = ?`},
		{reader, &s.rPage, `SELECT seq, id, encoding, payload FROM entries WHERE key > ?1 * 4294967296 + ?2 AND key < (?1 + 1) * 4294967296 ORDER BY key LIMIT ?3`},
	}
	for _, p := range prep {
		st, err := p.db.PrepareContext(ctx, p.text)
		if err != nil {
			return nil, fmt.Errorf("prepare %q: %w", p.text, err)
		}
		*p.dst = st
	}
	s.checkpointDone.Add(1)
	go s.checkpointLoop()
	s.writeDone.Add(1)
	go s.writeLoop()
	return s, nil
}

// checkpointLoop copies committed WAL pages back into the database file
// whenever write asks for it. Done here rather than by SQLite's
// auto-checkpoint in the committing connection, because a checkpoint
// fsyncs twice and would stall the append that happened to trigger it (and
// the event stream waiting on it) by milliseconds. PASSIVE never blocks the
// writer or readers. A failed checkpoint is harmless: the next one, or the
// writer's backstop auto-checkpoint, catches up.
func (s *Store) checkpointLoop() {
	defer s.checkpointDone.Done()
	for {
		select {
		case <-s.checkpointStop:
			return
		case <-s.checkpointKick:
			_, _ = s.checkpointer.Exec("PRAGMA wal_checkpoint(PASSIVE)")
		}
	}
}

// Close checkpoints the WAL into the database file (so the file alone is a
// complete copy) and closes all connections. Closing again returns the
// first result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	close(s.writeStop)
	s.writeDone.Wait()
	close(s.checkpointStop)
	s.checkpointDone.Wait()
	errs := []error{s.checkpointer.Close()}
	for _, st := range []*sql.Stmt{s.rSession, s.rTree, s.rEntry, s.rPage} {
		errs = append(errs, st.Close())
	}
	errs = append(errs, s.reader.Close())
	if _, err := s.writer.Exec("PRAGMA optimize; PRAGMA wal_checkpoint(TRUNCATE)"); err != nil && !errors.Is(err, sql.ErrConnDone) {
		errs = append(errs, fmt.Errorf("checkpoint: %w", err))
	}
	for _, st := range []*sql.Stmt{s.wSession, s.wEntryExists, s.wInsertEntry, s.wMoveLeaf} {
		errs = append(errs, st.Close())
	}
	errs = append(errs, s.writer.Close())
	return errors.Join(errs...)
}

// --- sessions ---

// CreateSession implements persistence.Store.
func (s *Store) CreateSession(ctx context.Context, p persistence.CreateSessionParams) (*persistence.Session, error) {
	id := p.ID
	if id == "" {
		id = persistence.NewID()
	} else if len(id) > persistence.MaxIDLength {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, Detail: fmt.Sprintf("session id is %d bytes, more than %d", len(id), persistence.MaxIDLength)}
	}
	cfg := p.Config
	if cfg == nil {
		cfg = &agentdv1.SessionConfig{}
	}
	cfgBytes, err := proto.Marshal(cfg)
	if err != nil {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, SessionID: id, Detail: fmt.Sprintf("config: %v", err)}
	}
	now := s.now()
	err = s.write(ctx, func(w *writeTx) error {
		res, err := w.tx.ExecContext(w.ctx, `INSERT INTO sessions (id, create_time, update_time, title, config) VALUES (?, ?, ?, ?, ?)`,
			id, now.UnixNano(), now.UnixNano(), p.Title, cfgBytes)
		if isUnique(err) {
			return &persistence.Error{Kind: persistence.ErrConflict, SessionID: id, Detail: "a session with this id exists"}
		} else if err != nil {
			return err
		}
		pk, err := res.LastInsertId()
		if err != nil {
			return err
		}
		for k, v := range p.Labels {
			if _, err := w.tx.ExecContext(w.ctx, `INSERT INTO session_labels (session_pk, key, value) VALUES (?, ?, ?)`, pk, k, v); err != nil {
				return err
			}
		}
		w.stageSession(id, sessionState{pk: pk, nextSeq: 1})
		return nil
	})
	if err != nil {
		return nil, err
	}
	labels := make(map[string]string, len(p.Labels))
	for k, v := range p.Labels {
		labels[k] = v
	}
	return &persistence.Session{ID: id, Title: p.Title, Labels: labels, Config: proto.CloneOf(cfg),
		CreateTime: time.Unix(0, now.UnixNano()), UpdateTime: time.Unix(0, now.UnixNano())}, nil
}

const sessionColumns = `pk, id, create_time, update_time, coalesce(leaf_entry_id, ''), title, config`

// GetSession implements persistence.Store.
func (s *Store) GetSession(ctx context.Context, sessionID string) (*persistence.Session, error) {
	var out *persistence.Session
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, sessionID)
		if err != nil {
			return err
		}
		list, pks, err := scanSessions(rows)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return persistence.SessionNotFound(sessionID)
		}
		out = list[0]
		return loadLabels(ctx, tx, list, pks)
	})
	return out, err
}

// ListSessions implements persistence.Store. Page tokens are the pk of the
// last session returned: pks only grow, so pages never repeat or skip a
// session when others are created or deleted between calls.
func (s *Store) ListSessions(ctx context.Context, req persistence.ListSessionsRequest) (*persistence.SessionPage, error) {
	size, err := persistence.PageSize(req.PageSize)
	if err != nil {
		return nil, err
	}
	after := int64(1<<63 - 1)
	if req.PageToken != "" {
		if after, err = decodeToken("s", req.PageToken); err != nil {
			return nil, err
		}
	}
	q := strings.Builder{}
	q.WriteString(`SELECT ` + sessionColumns + ` FROM sessions s WHERE pk < ?`)
	args := []any{after}
	keys := make([]string, 0, len(req.LabelFilter))
	for k := range req.LabelFilter {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		q.WriteString(` AND EXISTS (SELECT 1 FROM session_labels l WHERE l.session_pk = s.pk AND l.key = ? AND l.value = ?)`)
		args = append(args, k, req.LabelFilter[k])
	}
	q.WriteString(` ORDER BY pk DESC LIMIT ?`)
	args = append(args, size+1)

	page := &persistence.SessionPage{}
	err = s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, q.String(), args...)
		if err != nil {
			return err
		}
		list, pks, err := scanSessions(rows)
		if err != nil {
			return err
		}
		if len(list) > size {
			list, pks = list[:size], pks[:size]
			page.NextPageToken = encodeToken("s", pks[size-1])
		}
		page.Sessions = list
		return loadLabels(ctx, tx, list, pks)
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

func scanSessions(rows *sql.Rows) ([]*persistence.Session, []int64, error) {
	defer rows.Close()
	var list []*persistence.Session
	var pks []int64
	for rows.Next() {
		var (
			pk, created, updated int64
			sess                 persistence.Session
			cfg                  []byte
		)
		if err := rows.Scan(&pk, &sess.ID, &created, &updated, &sess.LeafEntryID, &sess.Title, &cfg); err != nil {
			return nil, nil, err
		}
		sess.CreateTime, sess.UpdateTime = time.Unix(0, created), time.Unix(0, updated)
		sess.Config = &agentdv1.SessionConfig{}
		if err := proto.Unmarshal(cfg, sess.Config); err != nil {
			return nil, nil, &persistence.Error{Kind: persistence.ErrCorrupt, SessionID: sess.ID, Detail: fmt.Sprintf("config: %v", err)}
		}
		sess.Labels = map[string]string{}
		list = append(list, &sess)
		pks = append(pks, pk)
	}
	return list, pks, rows.Err()
}

// loadLabels fills Labels of the given sessions with one query.
func loadLabels(ctx context.Context, tx *sql.Tx, list []*persistence.Session, pks []int64) error {
	if len(list) == 0 {
		return nil
	}
	byPK := make(map[int64]*persistence.Session, len(list))
	args := make([]any, len(pks))
	for i, pk := range pks {
		byPK[pk] = list[i]
		args[i] = pk
	}
	q := `SELECT session_pk, key, value FROM session_labels WHERE session_pk IN (?` + strings.Repeat(`, ?`, len(pks)-1) + `)`
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var pk int64
		var k, v string
		if err := rows.Scan(&pk, &k, &v); err != nil {
			return err
		}
		byPK[pk].Labels[k] = v
	}
	return rows.Err()
}

// DeleteSession implements persistence.Store.
func (s *Store) DeleteSession(ctx context.Context, sessionID string) error {
	return s.write(ctx, func(w *writeTx) error {
		w.forgetSession(sessionID)
		res, err := w.tx.ExecContext(w.ctx, `DELETE FROM sessions WHERE id = ?`, sessionID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return persistence.SessionNotFound(sessionID)
		}
		return nil
	})
}

// --- entries ---

// Append implements persistence.Store.
func (s *Store) Append(ctx context.Context, sessionID string, entries ...*agentdv1.Entry) error {
	if len(entries) == 0 {
		return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, Detail: "no entries to append"}
	}
	type saved struct {
		id, parent string
		time       *timestamppb.Timestamp
	}
	orig := make([]saved, len(entries))
	kinds := make([]string, len(entries))
	for i, e := range entries {
		if e == nil {
			return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, Detail: fmt.Sprintf("entry %d is nil", i)}
		}
		k, err := persistence.EntryKind(e)
		if err != nil {
			return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, EntryID: e.GetId(), Detail: fmt.Sprintf("entry %d: %v", i, err)}
		}
		if len(e.GetId()) > persistence.MaxIDLength {
			return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, Detail: fmt.Sprintf("entry %d: id is %d bytes, more than %d", i, len(e.GetId()), persistence.MaxIDLength)}
		}
		kinds[i] = k
		orig[i] = saved{e.GetId(), e.GetParentId(), e.GetTime()}
	}
	restore := func() {
		for i, e := range entries {
			e.Id, e.ParentId, e.Time = orig[i].id, orig[i].parent, orig[i].time
		}
	}
	now := s.now()
	err := s.write(ctx, func(w *writeTx) error {
		// The writer may run this twice (see errStaleSession): start from
		// the caller's entries each time.
		restore()
		sess, err := w.session(sessionID)
		if err != nil {
			return err
		}
		parent := sess.leaf
		if p := entries[0].GetParentId(); p != "" {
			var one int
			err := w.tx.StmtContext(w.ctx, s.wEntryExists).QueryRowContext(w.ctx, sess.pk, p).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, EntryID: p, Detail: "parent entry is not in this session"}
			} else if err != nil {
				return err
			}
			parent = p
		}
		// Fill in ids, parents and times first, so the session row can move
		// to its final state before the inserts: its guarded UPDATE is what
		// proves the cached state current.
		for i, e := range entries {
			if i > 0 && e.ParentId != "" && e.ParentId != parent {
				return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, EntryID: e.Id,
					Detail: fmt.Sprintf("entry %d: parent %q is not the entry before it in the batch (%q); only the first entry of a batch may name a parent", i, e.ParentId, parent)}
			}
			if e.Id == "" {
				e.Id = persistence.NewID()
			}
			e.ParentId = parent
			if e.Time == nil {
				e.Time = timestamppb.New(now)
			}
			parent = e.Id
		}
		if sess.nextSeq+int64(len(entries))-1 > maxSeq {
			return &persistence.Error{Kind: persistence.ErrConflict, SessionID: sessionID, Detail: fmt.Sprintf("the session holds the most entries one session can (%d)", maxSeq)}
		}
		next := sessionState{pk: sess.pk, leaf: parent, nextSeq: sess.nextSeq + int64(len(entries))}
		if err := w.moveLeaf(sessionID, sess, next, now); err != nil {
			return err
		}
		insert := w.tx.StmtContext(w.ctx, s.wInsertEntry)
		for i, e := range entries {
			var err error
			w.buf, err = proto.MarshalOptions{}.MarshalAppend(w.buf[:0], e)
			if err != nil {
				return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, EntryID: e.Id, Detail: fmt.Sprintf("encode: %v", err)}
			}
			payload, encoding, err := s.payloads.encode(w.buf)
			if err != nil {
				return err
			}
			var parentCol any
			if e.ParentId != "" {
				parentCol = e.ParentId
			}
			if _, err := insert.ExecContext(w.ctx, sess.pk, sess.nextSeq+int64(i), e.Id, parentCol, kinds[i], e.Time.AsTime().UnixNano(), payload, encoding); isUnique(err) {
				return &persistence.Error{Kind: persistence.ErrConflict, SessionID: sessionID, EntryID: e.Id, Detail: "an entry with this id exists in the session"}
			} else if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		restore()
		return err
	}
	return nil
}

// SetLeaf implements persistence.Store.
func (s *Store) SetLeaf(ctx context.Context, sessionID, entryID string) error {
	return s.write(ctx, func(w *writeTx) error {
		sess, err := w.session(sessionID)
		if err != nil {
			return err
		}
		var one int
		if err := w.tx.StmtContext(w.ctx, s.wEntryExists).QueryRowContext(w.ctx, sess.pk, entryID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return persistence.EntryNotFound(sessionID, entryID)
		} else if err != nil {
			return err
		}
		return w.moveLeaf(sessionID, sess, sessionState{pk: sess.pk, leaf: entryID, nextSeq: sess.nextSeq}, s.now())
	})
}

// GetEntry implements persistence.Store.
func (s *Store) GetEntry(ctx context.Context, sessionID, entryID string) (*agentdv1.Entry, error) {
	var out *agentdv1.Entry
	err := s.read(ctx, func(tx *sql.Tx) error {
		pk, _, err := s.lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		rows, err := tx.StmtContext(ctx, s.rEntry).QueryContext(ctx, pk, entryID)
		if err != nil {
			return err
		}
		list, _, err := decodeRows(sessionID, rows, 1)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return persistence.EntryNotFound(sessionID, entryID)
		}
		out = list[0]
		return nil
	})
	return out, err
}

// Path implements persistence.Store.
func (s *Store) Path(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	return s.path(ctx, sessionID, "")
}

// PathTo implements persistence.Store.
func (s *Store) PathTo(ctx context.Context, sessionID, entryID string) ([]*agentdv1.Entry, error) {
	if entryID == "" {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, Detail: "entry id is empty"}
	}
	return s.path(ctx, sessionID, entryID)
}

func (s *Store) path(ctx context.Context, sessionID, to string) ([]*agentdv1.Entry, error) {
	var out []*agentdv1.Entry
	err := s.read(ctx, func(tx *sql.Tx) error {
		pk, leaf, err := s.lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		if to == "" {
			to = leaf
		}
		if to == "" {
			out = []*agentdv1.Entry{}
			return nil
		}
		out, err = s.loadPath(ctx, tx, sessionID, pk, to)
		return err
	})
	return out, err
}

// loadPath returns the entries from the root to entry to, root first.
func (s *Store) loadPath(ctx context.Context, tx *sql.Tx, sessionID string, pk int64, to string) ([]*agentdv1.Entry, error) {
	rows, err := tx.StmtContext(ctx, s.rTree).QueryContext(ctx, pk)
	if err != nil {
		return nil, err
	}
	type stored struct {
		seq      int64
		id       string
		parent   string
		encoding int64
		payload  []byte
	}
	var all []stored
	index := map[string]int{}
	var raw sql.RawBytes
	for rows.Next() {
		var st stored
		if err := rows.Scan(&st.seq, &st.id, &st.parent, &st.encoding, &raw); err != nil {
			rows.Close()
			return nil, err
		}
		st.payload = bytes.Clone(raw)
		index[st.id] = len(all)
		all = append(all, st)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	at, ok := index[to]
	if !ok {
		return nil, persistence.EntryNotFound(sessionID, to)
	}
	// Walk leaf to root. Parents are always written before their children,
	// so a parent comes earlier in append order; anything else is damage,
	// and refusing it also rules out cycles.
	var path []int // indexes into all, leaf first
	for {
		path = append(path, at)
		p := all[at].parent
		if p == "" {
			break
		}
		next, ok := index[p]
		if !ok || next >= at {
			return nil, &persistence.CorruptEntryError{SessionID: sessionID, EntryID: all[at].id, Seq: all[at].seq,
				Err: fmt.Errorf("parent %q is missing or not older than the entry", p)}
		}
		at = next
	}
	slices.Reverse(path)
	found := make([]stored, len(path))
	for i, at := range path {
		found[i] = all[at]
	}
	all = nil

	// Decoding dominates loading a long transcript: spread it over the
	// CPUs.
	out := make([]*agentdv1.Entry, len(found))
	decode := func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			f := found[i]
			e, err := decodeEntry(sessionID, f.seq, f.id, f.encoding, f.payload)
			if err != nil {
				return err
			}
			if want := f.parent; e.GetParentId() != want {
				return &persistence.CorruptEntryError{SessionID: sessionID, EntryID: f.id, Seq: f.seq,
					Err: fmt.Errorf("payload names parent %q, the row %q", e.GetParentId(), want)}
			}
			out[i] = e
		}
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0), (len(found)+parallelDecodeMin-1)/parallelDecodeMin)
	if workers <= 1 {
		if err := decode(0, len(found)); err != nil {
			return nil, err
		}
		return out, nil
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = decode(w*len(found)/workers, (w+1)*len(found)/workers)
		}()
	}
	wg.Wait()
	// The first failing chunk holds the first corrupt entry on the path.
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parallelDecodeMin is the fewest entries worth a decoding goroutine.
const parallelDecodeMin = 512

// Entries implements persistence.Store. Page tokens carry the seq of the
// last entry returned.
func (s *Store) Entries(ctx context.Context, sessionID string, req persistence.EntriesRequest) (*persistence.EntryPage, error) {
	size, err := persistence.PageSize(req.PageSize)
	if err != nil {
		return nil, err
	}
	var after int64
	if req.PageToken != "" {
		if after, err = decodeToken("e", req.PageToken); err != nil {
			return nil, err
		}
	}
	page := &persistence.EntryPage{}
	err = s.read(ctx, func(tx *sql.Tx) error {
		pk, _, err := s.lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		rows, err := tx.StmtContext(ctx, s.rPage).QueryContext(ctx, pk, after, size+1)
		if err != nil {
			return err
		}
		list, seqs, err := decodeRows(sessionID, rows, size+1)
		if err != nil {
			return err
		}
		if len(list) > size {
			list = list[:size]
			page.NextPageToken = encodeToken("e", seqs[size-1])
		}
		page.Entries = list
		return nil
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

func (s *Store) lookupSession(ctx context.Context, tx *sql.Tx, sessionID string) (pk int64, leaf string, err error) {
	var l sql.NullString
	var seq int64
	if err := tx.StmtContext(ctx, s.rSession).QueryRowContext(ctx, sessionID).Scan(&pk, &l, &seq); errors.Is(err, sql.ErrNoRows) {
		return 0, "", persistence.SessionNotFound(sessionID)
	} else if err != nil {
		return 0, "", err
	}
	return pk, l.String, nil
}

// decodeRows decodes (seq, id, encoding, payload) rows and returns them with their
// seqs. A payload that does not decode, or decodes to an entry with another
// id, fails the whole read with a *persistence.CorruptEntryError: a
// transcript with a silent hole would change what the model sees.
func decodeRows(sessionID string, rows *sql.Rows, capHint int) ([]*agentdv1.Entry, []int64, error) {
	defer rows.Close()
	out := make([]*agentdv1.Entry, 0, capHint)
	seqs := make([]int64, 0, capHint)
	var raw sql.RawBytes
	for rows.Next() {
		var seq, encoding int64
		var id string
		if err := rows.Scan(&seq, &id, &encoding, &raw); err != nil {
			return nil, nil, err
		}
		e, err := decodeEntry(sessionID, seq, id, encoding, raw)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, e)
		seqs = append(seqs, seq)
	}
	return out, seqs, rows.Err()
}

// decodeEntry decodes one stored payload (inflating it first when
// encoding says so) and checks it against its row.
func decodeEntry(sessionID string, seq int64, id string, encoding int64, raw []byte) (*agentdv1.Entry, error) {
	e := &agentdv1.Entry{}
	// Unmarshal copies what it keeps, so the inflated bytes may be reused.
	if err := withPlainPayload(encoding, raw, func(pb []byte) error { return proto.Unmarshal(pb, e) }); err != nil {
		return nil, &persistence.CorruptEntryError{SessionID: sessionID, EntryID: id, Seq: seq, Err: err}
	}
	if e.GetId() != id {
		return nil, &persistence.CorruptEntryError{SessionID: sessionID, EntryID: id, Seq: seq, Err: fmt.Errorf("payload holds entry id %q", e.GetId())}
	}
	if _, err := persistence.EntryKind(e); err != nil {
		return nil, &persistence.CorruptEntryError{SessionID: sessionID, EntryID: id, Seq: seq, Err: err}
	}
	return e, nil
}

// --- runs ---

// StartRun implements persistence.Store.
func (s *Store) StartRun(ctx context.Context, sessionID, runID string) error {
	if runID == "" || len(runID) > persistence.MaxIDLength {
		return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, RunID: runID, Detail: fmt.Sprintf("run id must be 1 to %d bytes", persistence.MaxIDLength)}
	}
	return s.write(ctx, func(w *writeTx) error {
		res, err := w.tx.ExecContext(w.ctx, `INSERT INTO runs (id, session_pk, start_time) SELECT ?, pk, ? FROM sessions WHERE id = ?`, runID, s.now().UnixNano(), sessionID)
		if isUnique(err) {
			return &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "a run with this id exists"}
		} else if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return persistence.SessionNotFound(sessionID)
		}
		return nil
	})
}

// EndRun implements persistence.Store.
func (s *Store) EndRun(ctx context.Context, runID string, outcome agentdv1.RunOutcome, errorMessage string) error {
	if outcome == agentdv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED {
		return &persistence.Error{Kind: persistence.ErrInvalid, RunID: runID, Detail: "outcome is unspecified"}
	}
	return s.write(ctx, func(w *writeTx) error {
		var ended sql.NullInt64
		if err := w.tx.QueryRowContext(w.ctx, `SELECT end_time FROM runs WHERE id = ?`, runID).Scan(&ended); errors.Is(err, sql.ErrNoRows) {
			return persistence.RunNotFound(runID)
		} else if err != nil {
			return err
		}
		if ended.Valid {
			return &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "run already ended"}
		}
		_, err := w.tx.ExecContext(w.ctx, `UPDATE runs SET end_time = ?, outcome = ?, error_message = ? WHERE id = ?`, s.now().UnixNano(), int32(outcome), errorMessage, runID)
		return err
	})
}

const runColumns = `r.id, s.id, r.start_time, r.end_time, r.outcome, r.error_message`

// GetRun implements persistence.Store.
func (s *Store) GetRun(ctx context.Context, runID string) (*persistence.Run, error) {
	var out *persistence.Run
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+runColumns+` FROM runs r JOIN sessions s ON s.pk = r.session_pk WHERE r.id = ?`, runID)
		if err != nil {
			return err
		}
		runs, err := scanRuns(rows)
		if err != nil {
			return err
		}
		if len(runs) == 0 {
			return persistence.RunNotFound(runID)
		}
		out = runs[0]
		return nil
	})
	return out, err
}

// CloseInterruptedRuns implements persistence.Store. It reads only the
// partial index of active runs, so start-up stays fast however many runs
// and sessions the database holds.
func (s *Store) CloseInterruptedRuns(ctx context.Context) ([]*persistence.Run, error) {
	var out []*persistence.Run
	err := s.write(ctx, func(w *writeTx) error {
		rows, err := w.tx.QueryContext(w.ctx, `SELECT `+runColumns+` FROM runs r JOIN sessions s ON s.pk = r.session_pk WHERE r.end_time IS NULL ORDER BY r.start_time, r.id`)
		if err != nil {
			return err
		}
		if out, err = scanRuns(rows); err != nil {
			return err
		}
		now := s.now()
		for _, r := range out {
			if _, err := w.tx.ExecContext(w.ctx, `UPDATE runs SET end_time = ?, outcome = ? WHERE id = ?`, now.UnixNano(), int32(agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED), r.ID); err != nil {
				return err
			}
			r.EndTime = time.Unix(0, now.UnixNano())
			r.Outcome = agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func scanRuns(rows *sql.Rows) ([]*persistence.Run, error) {
	defer rows.Close()
	var out []*persistence.Run
	for rows.Next() {
		var r persistence.Run
		var start int64
		var end sql.NullInt64
		var outcome int32
		if err := rows.Scan(&r.ID, &r.SessionID, &start, &end, &outcome, &r.ErrorMessage); err != nil {
			return nil, err
		}
		r.StartTime = time.Unix(0, start)
		if end.Valid {
			r.EndTime = time.Unix(0, end.Int64)
		}
		r.Outcome = agentdv1.RunOutcome(outcome)
		out = append(out, &r)
	}
	return out, rows.Err()
}

// --- plumbing ---

// writeRequest is one write waiting for the writer goroutine.
type writeRequest struct {
	ctx  context.Context
	fn   func(*writeTx) error
	done chan error
}

// sessionState is what the writer needs to know about a session to append
// to it: its internal key, its leaf ("" for an empty transcript) and the
// seq its next entry gets.
type sessionState struct {
	pk      int64
	leaf    string
	nextSeq int64
}

// stagedSession is a change to the writer's session cache that takes effect
// only once the batch commits.
type stagedSession struct {
	state   sessionState
	deleted bool
}

// maxCachedSessions bounds the writer's session cache (about 100 bytes a
// session); past it, arbitrary sessions are dropped and reloaded on their
// next write.
const maxCachedSessions = 10_000

// errStaleSession means the writer's cached session state no longer
// matches the database: something other than this store wrote it. The
// writer then drops its cache and runs the batch again from the database.
var errStaleSession = errors.New("cached session state is stale")

// writeTx is what a write function gets: the batch's transaction, a
// context for its statements, and the writer's session cache seen through
// the changes of the writes before it in the batch.
type writeTx struct {
	// ctx is not the caller's: a cancellable context makes go-sqlite3 watch
	// it from an extra goroutine on every statement, and interrupting a
	// statement could abort the transaction shared with other writes. A
	// request is checked for cancellation before it runs instead.
	ctx context.Context
	tx  *sql.Tx
	s   *Store
	// batch holds the cache changes of the earlier, successful writes of
	// this batch; staged those of this write, merged into batch only if it
	// succeeds.
	batch, staged map[string]stagedSession
	// buf is scratch space for encoding payloads.
	buf []byte
}

// session returns the session's current state, from the cache when it
// holds it and otherwise from the database.
func (w *writeTx) session(sessionID string) (sessionState, error) {
	for _, m := range []map[string]stagedSession{w.staged, w.batch} {
		if c, ok := m[sessionID]; ok {
			if c.deleted {
				return sessionState{}, persistence.SessionNotFound(sessionID)
			}
			return c.state, nil
		}
	}
	if st, ok := w.s.sessions[sessionID]; ok {
		return st, nil
	}
	var st sessionState
	var leaf sql.NullString
	if err := w.tx.StmtContext(w.ctx, w.s.wSession).QueryRowContext(w.ctx, sessionID).Scan(&st.pk, &leaf, &st.nextSeq); errors.Is(err, sql.ErrNoRows) {
		return sessionState{}, persistence.SessionNotFound(sessionID)
	} else if err != nil {
		return sessionState{}, err
	}
	st.leaf = leaf.String
	// The row may hold uncommitted changes of this batch: cache it only if
	// the batch commits.
	w.stageSession(sessionID, st)
	return st, nil
}

// stageSession records the session's state after this write.
func (w *writeTx) stageSession(sessionID string, st sessionState) {
	if w.staged == nil {
		w.staged = map[string]stagedSession{}
	}
	w.staged[sessionID] = stagedSession{state: st}
}

// forgetSession records that this write deletes the session.
func (w *writeTx) forgetSession(sessionID string) {
	if w.staged == nil {
		w.staged = map[string]stagedSession{}
	}
	w.staged[sessionID] = stagedSession{deleted: true}
}

// moveLeaf writes the session row's new leaf and next seq, provided the row
// is still in state from, and stages the new state.
func (w *writeTx) moveLeaf(sessionID string, from, to sessionState, now time.Time) error {
	var fromLeaf any
	if from.leaf != "" {
		fromLeaf = from.leaf
	}
	res, err := w.tx.StmtContext(w.ctx, w.s.wMoveLeaf).ExecContext(w.ctx, to.leaf, to.nextSeq, now.UnixNano(), from.pk, from.nextSeq, fromLeaf)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != 1 {
		return errStaleSession
	}
	w.stageSession(sessionID, to)
	return nil
}

// maxWriteBatch bounds how many writes share one commit.
const maxWriteBatch = 256

// errClosed is returned by writes after Close.
var errClosed = errors.New("the store is closed")

// write runs fn atomically on the writer connection: everything fn did is
// committed, or nothing is when fn or the commit fails. fn must not keep
// the transaction, and must be safe to run again from the start: the
// writer reruns a batch whose cached session state proved stale.
func (s *Store) write(ctx context.Context, fn func(*writeTx) error) error {
	req := &writeRequest{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case s.writes <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.writeStop:
		return errClosed
	}
	// Once submitted, fn may be running: wait for its outcome whatever ctx
	// does, so the caller never sees a write that later commits.
	return <-req.done
}

// writeLoop is the group commit: it takes every write that is waiting
// (up to maxWriteBatch) and runs them in one transaction, each inside its
// own savepoint, so one commit (and one WAL sync under FULL) serves many
// sessions' appends, and a failing write is rolled back alone. Waiting
// writes are served in arrival order, which keeps latency fair under load
// (database/sql hands a free connection to a random waiter).
func (s *Store) writeLoop() {
	defer s.writeDone.Done()
	batch := make([]*writeRequest, 0, maxWriteBatch)
	w := &writeTx{ctx: context.Background(), s: s}
	for {
		batch = batch[:0]
		select {
		case <-s.writeStop:
			return
		case req := <-s.writes:
			batch = append(batch, req)
		}
	collect:
		for len(batch) < maxWriteBatch {
			select {
			case req := <-s.writes:
				batch = append(batch, req)
			default:
				break collect
			}
		}
		results := s.commitBatch(w, batch)
		if errors.Is(results.stale, errStaleSession) {
			// Something else wrote the database: forget what we knew and
			// run the batch again, reading every session afresh.
			clear(s.sessions)
			results = s.commitBatch(w, batch)
		}
		for j, r := range batch {
			err := results.errs[j]
			if errors.Is(err, errStaleSession) {
				err = fmt.Errorf("session changed behind the store's back twice in a row: %w", err)
			}
			r.done <- err
		}
	}
}

// batchResult is the outcome of one attempt at a batch.
type batchResult struct {
	errs []error
	// stale is errStaleSession when a write found the cache stale; the
	// attempt was then rolled back entirely.
	stale error
}

// commitBatch runs the batch's writes in one transaction and commits it.
// A write that fails is rolled back alone (to its savepoint); a batch of
// one needs no savepoint, since rolling back the transaction is the same.
// The session cache takes the batch's changes only after the commit.
func (s *Store) commitBatch(w *writeTx, batch []*writeRequest) batchResult {
	out := batchResult{errs: make([]error, len(batch))}
	fail := func(err error) batchResult {
		clear(s.sessions) // the transaction state is unknown: trust nothing
		for j := range out.errs {
			if out.errs[j] == nil {
				out.errs[j] = err
			}
		}
		return out
	}
	tx, err := s.writer.BeginTx(context.Background(), nil)
	if err != nil {
		return fail(fmt.Errorf("begin write: %w", err))
	}
	w.tx = tx
	w.batch = map[string]stagedSession{}
	defer func() { w.tx, w.batch, w.staged = nil, nil, nil }()
	savepoints := len(batch) > 1
	committed := 0
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			out.errs[i] = err
			continue
		}
		if savepoints {
			if _, err := tx.Exec("SAVEPOINT write"); err != nil {
				_ = tx.Rollback()
				return fail(fmt.Errorf("savepoint: %w", err))
			}
		}
		w.staged = nil
		err := r.fn(w)
		if errors.Is(err, errStaleSession) {
			_ = tx.Rollback()
			out.stale = err
			return fail(err)
		}
		if err != nil {
			out.errs[i] = err
			if !savepoints {
				_ = tx.Rollback()
				return out
			}
			if _, rerr := tx.Exec("ROLLBACK TO write; RELEASE write"); rerr != nil {
				// The failure broke the whole transaction: nothing of the
				// batch is kept.
				_ = tx.Rollback()
				return fail(fmt.Errorf("rolled back with a failing write of the same batch: %w", rerr))
			}
			continue
		}
		if savepoints {
			if _, err := tx.Exec("RELEASE write"); err != nil {
				_ = tx.Rollback()
				return fail(fmt.Errorf("release savepoint: %w", err))
			}
		}
		for id, c := range w.staged {
			w.batch[id] = c
		}
		committed++
	}
	if err := tx.Commit(); err != nil {
		return fail(fmt.Errorf("commit: %w", err))
	}
	for id, c := range w.batch {
		if c.deleted {
			delete(s.sessions, id)
			continue
		}
		if _, ok := s.sessions[id]; !ok && len(s.sessions) >= maxCachedSessions {
			for victim := range s.sessions {
				delete(s.sessions, victim)
				break
			}
		}
		s.sessions[id] = c.state
	}
	if committed > 0 && s.commits.Add(1)%checkpointEvery == 0 {
		select {
		case s.checkpointKick <- struct{}{}:
		default: // one is pending already
		}
	}
	return out
}

// read runs fn in a read transaction on a reader connection, so all its
// queries see one snapshot.
func (s *Store) read(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.reader.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only; nothing to keep
	return fn(tx)
}

func isUnique(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.ExtendedCode == sqlite3.ErrConstraintUnique || se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey)
}

// Page tokens are opaque to callers: a kind letter and a number, base64url.
func encodeToken(kind string, n int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + strconv.FormatInt(n, 10)))
}

func decodeToken(kind, token string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err == nil && strings.HasPrefix(string(raw), kind) {
		if n, err := strconv.ParseInt(string(raw[len(kind):]), 10, 64); err == nil && n >= 0 {
			return n, nil
		}
	}
	return 0, &persistence.Error{Kind: persistence.ErrInvalid, Detail: fmt.Sprintf("page token %q was not issued by this store", token)}
}
