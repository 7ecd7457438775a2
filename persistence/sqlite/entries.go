package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/internal/rowcodec"
)

const (
	// sqlEntryExists and sqlEntryIDs scan the session's key range: there is
	// no index by id (see migrations/0003_event_log_and_implied_leaf.sql).
	sqlEntryExists = `SELECT 1 FROM entries WHERE key > ?1 * 4294967296 AND key < (?1 + 1) * 4294967296 AND id = ?2 LIMIT 1`
	sqlEntryIDs    = `SELECT id FROM entries WHERE key > ?1 * 4294967296 AND key < (?1 + 1) * 4294967296`
	// sqlEntryByID finds one entry of a session through entries_by_id.
	sqlEntryByID   = `SELECT seq, id, coalesce(parent_id, ''), encoding, payload FROM entries WHERE session_pk = ?1 AND id = ?2`
	sqlInsertEntry = `INSERT INTO entries (key, session_pk, seq, id, parent_id, kind, create_time, payload, encoding, append_time, preview) VALUES (?1 * 4294967296 + ?2, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)`
)

// Append implements [persistence.Store]. An append writes only the entry
// rows: the leaf is implied by the highest seq (see
// migrations/0003_event_log_and_implied_leaf.sql), so the session's row is
// not rewritten on every commit.
func (s *Store) Append(ctx context.Context, sessionID string, entries ...*agentdv1.Entry) error {
	kinds, err := persistence.CheckAppend(sessionID, entries)
	if err != nil {
		return err
	}
	type saved struct {
		id, parent string
		time       *timestamppb.Timestamp
	}
	orig := make([]saved, len(entries))
	for i, e := range entries {
		orig[i] = saved{e.GetId(), e.GetParentId(), e.GetTime()}
	}
	restore := func() {
		for i, e := range entries {
			e.Id, e.ParentId, e.Time = orig[i].id, orig[i].parent, orig[i].time
		}
	}
	now := s.now()
	err = s.write(ctx, func(t *writeTx) error {
		// The writer may run this again (see commitBatch): start from the
		// caller's entries each time.
		restore()
		return t.append(sessionID, kinds, entries, now)
	})
	if err != nil {
		restore()
		return opError(err, "append %d entries to session %q", len(entries), sessionID)
	}
	return nil
}

// checkCallerIDs refuses ids a caller chose that the session or the batch
// already uses. There is no unique index to do it (see
// migrations/0003_event_log_and_implied_leaf.sql), so the session's ids are
// append stores checked entries (of kinds) as Append does, in the batch's
// transaction.
func (t *writeTx) append(sessionID string, kinds []string, entries []*agentdv1.Entry, now time.Time) error {
	sess, err := t.session(sessionID)
	if err != nil {
		return err
	}
	parent := sess.leaf
	if p := entries[0].GetParentId(); p != "" {
		var one int
		err := t.queryRow(sqlEntryExists, sess.pk, p).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return persistence.ParentNotInSession(sessionID, p)
		} else if err != nil {
			return err
		}
		parent = p
	}
	if err := t.checkCallerIDs(sessionID, sess.pk, entries); err != nil {
		return err
	}
	leaf, err := persistence.LinkBatch(sessionID, entries, parent, now)
	if err != nil {
		return err
	}
	if sess.lastSeq+int64(len(entries)) > maxSeq {
		return &persistence.Error{Kind: persistence.ErrConflict, SessionID: sessionID, Detail: fmt.Sprintf("the session holds the most entries one session can (%d)", maxSeq)}
	}
	for i, e := range entries {
		var err error
		t.w.buf, err = proto.MarshalOptions{}.MarshalAppend(t.w.buf[:0], e)
		if err != nil {
			return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, EntryID: e.Id, Detail: fmt.Sprintf("encode: %v", err)}
		}
		payload, encoding, err := t.w.payloads.Encode(t.w.buf)
		if err != nil {
			return err
		}
		var parentCol any
		if e.ParentId != "" {
			parentCol = e.ParentId
		}
		if _, err := t.exec(sqlInsertEntry, sess.pk, sess.lastSeq+int64(i)+1, e.Id, parentCol, kinds[i], e.Time.AsTime().UnixNano(), payload, encoding, now.UnixNano(), persistence.Preview(e)); err != nil {
			return err
		}
		if spent, ok := persistence.EntrySpend(e); ok {
			if _, err := t.exec(sqlInsertSpend, now.UnixNano(), spent.Tokens, spent.CostUSD, sess.pk); err != nil {
				return err
			}
		}
	}
	t.stageAppend(sessionID, sessionCache{pk: sess.pk, leaf: leaf, lastSeq: sess.lastSeq + int64(len(entries))}, now)
	return nil
}

// read once, and only when the batch brings ids of its own.
func (t *writeTx) checkCallerIDs(sessionID string, pk int64, entries []*agentdv1.Entry) error {
	chosen := map[string]bool{}
	for _, e := range entries {
		if e.GetId() == "" {
			continue
		}
		if chosen[e.GetId()] {
			return &persistence.Error{Kind: persistence.ErrConflict, SessionID: sessionID, EntryID: e.GetId(), Detail: "the batch holds two entries with this id"}
		}
		chosen[e.GetId()] = true
	}
	if len(chosen) == 0 {
		return nil
	}
	rows, err := t.query(sqlEntryIDs, pk)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		if chosen[id] {
			return &persistence.Error{Kind: persistence.ErrConflict, SessionID: sessionID, EntryID: id, Detail: "an entry with this id exists in the session"}
		}
	}
	return rows.Err()
}

// SetLeaf implements [persistence.Store].
func (s *Store) SetLeaf(ctx context.Context, sessionID, entryID string) error {
	err := s.write(ctx, func(t *writeTx) error {
		sess, err := t.session(sessionID)
		if err != nil {
			return err
		}
		var leaf any // NULL: before the first entry
		if entryID != "" {
			var one int
			if err := t.queryRow(sqlEntryExists, sess.pk, entryID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
				return persistence.EntryNotFound(sessionID, entryID)
			} else if err != nil {
				return err
			}
			leaf = entryID
		}
		if _, err := t.exec(`UPDATE sessions SET leaf_entry_id = ?, leaf_seq = ?, update_time = ? WHERE pk = ?`,
			leaf, sess.lastSeq, s.now().UnixNano(), sess.pk); err != nil {
			return err
		}
		t.stage(sessionID, sessionCache{pk: sess.pk, leaf: entryID, lastSeq: sess.lastSeq})
		t.touch(sessionID)
		return nil
	})
	return opError(err, "move the leaf of session %q to entry %q", sessionID, entryID)
}

// GetEntry implements [persistence.Store].
func (s *Store) GetEntry(ctx context.Context, sessionID, entryID string) (*agentdv1.Entry, error) {
	var out *agentdv1.Entry
	err := s.read(ctx, func(tx *sql.Tx) error {
		pk, _, err := s.lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		out, err = s.entryInTx(ctx, tx, sessionID, pk, entryID)
		return err
	})
	return out, opError(err, "get entry %q of session %q", entryID, sessionID)
}

// entryInTx reads one entry of the session with key pk.
func (s *Store) entryInTx(ctx context.Context, tx *sql.Tx, sessionID string, pk int64, entryID string) (*agentdv1.Entry, error) {
	rows, err := tx.StmtContext(ctx, s.rEntry).QueryContext(ctx, pk, entryID)
	if err != nil {
		return nil, err
	}
	list, _, err := decodeRows(sessionID, rows, 1)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, persistence.EntryNotFound(sessionID, entryID)
	}
	return list[0], nil
}

// Path implements [persistence.Store].
func (s *Store) Path(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	out, err := s.path(ctx, sessionID, "")
	return out, opError(err, "load the path of session %q", sessionID)
}

// PathTo implements [persistence.Store].
func (s *Store) PathTo(ctx context.Context, sessionID, entryID string) ([]*agentdv1.Entry, error) {
	if entryID == "" {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, Detail: "entry id is empty"}
	}
	out, err := s.path(ctx, sessionID, entryID)
	return out, opError(err, "load the path to entry %q of session %q", entryID, sessionID)
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
	var all []rowcodec.Row
	var nodes []persistence.PathNode
	index := map[string]int{}
	var raw sql.RawBytes
	for rows.Next() {
		var r rowcodec.Row
		if err := rows.Scan(&r.Seq, &r.ID, &r.Parent, &r.Encoding, &raw); err != nil {
			rows.Close()
			return nil, err
		}
		r.Payload = bytes.Clone(raw)
		index[r.ID] = len(all)
		all = append(all, r)
		nodes = append(nodes, persistence.PathNode{Seq: r.Seq, ID: r.ID, Parent: r.Parent})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	at, ok := index[to]
	if !ok {
		return nil, persistence.EntryNotFound(sessionID, to)
	}
	path, err := persistence.WalkToRoot(ctx, sessionID, nodes, at, persistence.WalkOptions{})
	if err != nil {
		return nil, err
	}
	found := make([]rowcodec.Row, len(path))
	for i, at := range path {
		found[i] = all[at]
	}
	return rowcodec.DecodePath(sessionID, found)
}

// ContextPath implements [persistence.Store]: it reads the session's
// entries newest first, following the path from the leaf (a
// [persistence.Walker]), and stops where the context starts, so a long
// compacted session costs the entries since its latest compaction's first
// kept entry (and any branches among them), not its whole transcript. Only
// the entries on the path are decoded.
func (s *Store) ContextPath(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	out, err := s.contextPath(ctx, sessionID, false)
	return out, opError(err, "load the context path of session %q", sessionID)
}

// PathSinceAnswer implements [persistence.Store]: ContextPath's walk,
// ending at the latest assistant message too.
func (s *Store) PathSinceAnswer(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	out, err := s.contextPath(ctx, sessionID, true)
	return out, opError(err, "load the path since the latest answer of session %q", sessionID)
}

// contextPath reads the session's entries newest first, structure only,
// until the walk from the leaf ends at the context's start (or, with
// sinceAnswer, at the latest assistant message), and decodes the entries
// on the path.
func (s *Store) contextPath(ctx context.Context, sessionID string, sinceAnswer bool) ([]*agentdv1.Entry, error) {
	var out []*agentdv1.Entry
	err := s.read(ctx, func(tx *sql.Tx) error {
		pk, leaf, err := s.lookupSession(ctx, tx, sessionID)
		if err != nil || leaf == "" {
			out = []*agentdv1.Entry{}
			return err
		}
		rows, err := tx.StmtContext(ctx, s.rNewestFirst).QueryContext(ctx, pk)
		if err != nil {
			return err
		}
		defer rows.Close()
		var (
			path []rowcodec.Row // leaf first
			row  rowcodec.Row
			kind string
			raw  sql.RawBytes
		)
		walk := persistence.NewWalker(sessionID, leaf, persistence.WalkOptions{
			ContextOnly: true,
			SinceAnswer: sinceAnswer,
			// The summary is the row just read.
			FirstKept: func(context.Context, string) (string, error) {
				row.Payload = raw
				e, err := row.Decode(sessionID)
				return e.GetMessage().GetCompactionSummary().GetFirstKeptEntryId(), err
			},
		})
		for rows.Next() {
			if err := rows.Scan(&row.Seq, &row.ID, &row.Parent, &kind, &row.Encoding, &raw); err != nil {
				return err
			}
			onPath, done, err := walk.Offer(ctx, persistence.PathNode{Seq: row.Seq, ID: row.ID, Parent: row.Parent, Summary: kind == "compaction_summary", Answer: kind == "assistant"})
			if err != nil {
				return err
			}
			if onPath {
				row.Payload = bytes.Clone(raw)
				path = append(path, row)
			}
			if done {
				break
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if path, err = persistence.EndWalk(walk, path); err != nil {
			return err
		}
		out, err = rowcodec.DecodePath(sessionID, path)
		return err
	})
	return out, err
}

// Entries implements [persistence.Store]. Page tokens carry the seq of the
// last entry returned.
func (s *Store) Entries(ctx context.Context, sessionID string, req persistence.EntriesRequest) (*persistence.EntryPage, error) {
	size, after, err := req.Cursor(sessionID)
	if err != nil {
		return nil, err
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
			page.NextPageToken = req.NextPageToken(sessionID, seqs[size-1])
		}
		page.Entries = list
		return nil
	})
	if err != nil {
		return nil, opError(err, "list the entries of session %q", sessionID)
	}
	return page, nil
}

// Tree implements [persistence.Store]: the rows' columns, with payloads
// read and decoded only for rows written before previews were stored.
func (s *Store) Tree(ctx context.Context, sessionID string, req persistence.EntriesRequest) (*persistence.TreePage, error) {
	size, after, err := req.Cursor(sessionID)
	if err != nil {
		return nil, err
	}
	page := &persistence.TreePage{}
	err = s.read(ctx, func(tx *sql.Tx) error {
		pk, _, err := s.lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		rows, err := tx.StmtContext(ctx, s.rTreePage).QueryContext(ctx, pk, after, size+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		page.Nodes = make([]persistence.TreeNode, 0, min(size+1, 1024))
		var lastSeq int64
		for rows.Next() {
			var n persistence.TreeNode
			var created int64
			var preview sql.NullString
			var r rowcodec.Row
			var raw sql.RawBytes
			if err := rows.Scan(&r.Seq, &n.ID, &n.ParentID, &n.Kind, &created, &preview, &r.Encoding, &raw); err != nil {
				return err
			}
			n.Time = time.Unix(0, created)
			n.Preview = preview.String
			if !preview.Valid {
				r.ID, r.Parent, r.Payload = n.ID, n.ParentID, raw
				e, err := r.Decode(sessionID)
				if err != nil {
					return err
				}
				n.Preview = persistence.Preview(e)
			}
			if len(page.Nodes) == size {
				page.NextPageToken = req.NextPageToken(sessionID, lastSeq)
				break
			}
			page.Nodes = append(page.Nodes, n)
			lastSeq = r.Seq
		}
		return rows.Err()
	})
	if err != nil {
		return nil, opError(err, "list the tree of session %q", sessionID)
	}
	return page, nil
}

// Labels implements [persistence.Store].
func (s *Store) Labels(ctx context.Context, sessionID string) (map[string]string, error) {
	var out map[string]string
	err := s.read(ctx, func(tx *sql.Tx) error {
		pk, _, err := s.lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		rows, err := tx.StmtContext(ctx, s.rLabels).QueryContext(ctx, pk)
		if err != nil {
			return err
		}
		list, _, err := decodeRows(sessionID, rows, 0)
		if err != nil {
			return err
		}
		out = persistence.Labels(list)
		return nil
	})
	if err != nil {
		return nil, opError(err, "read the labels of session %q", sessionID)
	}
	return out, nil
}

// decodeRows decodes (seq, id, parent, encoding, payload) rows and returns
// them with their seqs. A row that does not decode fails the whole read
// with a *[persistence.CorruptEntryError].
func decodeRows(sessionID string, rows *sql.Rows, capHint int) ([]*agentdv1.Entry, []int64, error) {
	defer rows.Close()
	out := make([]*agentdv1.Entry, 0, capHint)
	seqs := make([]int64, 0, capHint)
	var raw sql.RawBytes
	for rows.Next() {
		var r rowcodec.Row
		if err := rows.Scan(&r.Seq, &r.ID, &r.Parent, &r.Encoding, &raw); err != nil {
			return nil, nil, err
		}
		r.Payload = raw
		e, err := r.Decode(sessionID)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, e)
		seqs = append(seqs, r.Seq)
	}
	return out, seqs, rows.Err()
}
