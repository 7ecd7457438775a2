package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/internal/rowcodec"
)

// entryColumns are what decoding an entry needs.
const entryColumns = `seq, id, coalesce(parent_id, ''), encoding, payload`

// Append implements [persistence.Store].
func (s *Store) Append(ctx context.Context, sessionID string, entries ...*agentdv1.Entry) error {
	return s.append(ctx, nil, sessionID, entries)
}

// append stores entries under fence f when it is not nil. The session's
// row is locked first (then the run's, by the fence), the order every
// write of a session takes, so appends of several processes queue up
// instead of racing for a seq.
func (s *Store) append(ctx context.Context, f *persistence.Fence, sessionID string, entries []*agentdv1.Entry) error {
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
	enc, release := s.encoder()
	defer release()
	now := s.timeNow()
	err = s.write(ctx, func(tx pgx.Tx) error {
		return appendInTx(ctx, tx, f, sessionID, kinds, entries, enc, now)
	})
	if err != nil {
		restore()
		return opError(err, "append %d entries to session %q", len(entries), sessionID)
	}
	return nil
}

// appendInTx stores checked entries (of kinds) as append does, in tx.
func appendInTx(ctx context.Context, tx pgx.Tx, f *persistence.Fence, sessionID string, kinds []string, entries []*agentdv1.Entry, enc *rowcodec.Encoder, now time.Time) error {
	var sess sessionState
	err := tx.QueryRow(ctx, `SELECT pk, coalesce(leaf_entry_id, ''), last_seq FROM sessions WHERE id = $1 FOR NO KEY UPDATE`, sessionID).Scan(&sess.pk, &sess.leaf, &sess.lastSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return persistence.SessionNotFound(sessionID)
	} else if err != nil {
		return err
	}
	if f != nil {
		if err := checkFence(ctx, tx, *f, sess.pk, sessionID); err != nil {
			return err
		}
	}
	parent := sess.leaf
	if p := entries[0].GetParentId(); p != "" {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM entries WHERE session_pk = $1 AND id = $2`, sess.pk, p).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return persistence.ParentNotInSession(sessionID, p)
		} else if err != nil {
			return err
		}
		parent = p
	}
	if err := checkCallerIDs(ctx, tx, sessionID, sess.pk, entries); err != nil {
		return err
	}
	leaf, err := persistence.LinkBatch(sessionID, entries, parent, now)
	if err != nil {
		return err
	}
	var batch pgx.Batch
	var buf []byte
	for i, e := range entries {
		var err error
		buf, err = proto.MarshalOptions{}.MarshalAppend(buf[:0], e)
		if err != nil {
			return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, EntryID: e.Id, Detail: fmt.Sprintf("encode: %v", err)}
		}
		payload, encoding, err := enc.Encode(buf)
		if err != nil {
			return err
		}
		var parentCol *string
		if e.ParentId != "" {
			parentCol = &e.ParentId
		}
		// The batch is sent after the loop: the bytes must outlive
		// the encoder's and buf's next use.
		batch.Queue(`INSERT INTO entries (session_pk, seq, id, parent_id, kind, create_time, append_time, encoding, preview, payload) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			sess.pk, sess.lastSeq+int64(i)+1, e.Id, parentCol, kinds[i], e.Time.AsTime().UnixNano(), now, int16(encoding), persistence.Preview(e), slices.Clone(payload))
		if spent, ok := persistence.EntrySpend(e); ok {
			batch.Queue(`INSERT INTO spend (session_pk, tenant, time, tokens, cost) SELECT pk, tenant, $2, $3, $4 FROM sessions WHERE pk = $1`,
				sess.pk, now, spent.Tokens, spent.CostUSD)
		}
	}
	batch.Queue(`UPDATE sessions SET leaf_entry_id = $2, last_seq = $3, update_time = greatest(update_time, $4) WHERE pk = $1`,
		sess.pk, leaf, sess.lastSeq+int64(len(entries)), now)
	return tx.SendBatch(ctx, &batch).Close()
}

// checkCallerIDs refuses ids a caller chose that the session or the batch
// already uses, naming the id (the unique index would only say that one
// of them clashed).
func checkCallerIDs(ctx context.Context, tx pgx.Tx, sessionID string, pk int64, entries []*agentdv1.Entry) error {
	chosen := map[string]bool{}
	var list []string
	for _, e := range entries {
		if e.GetId() == "" {
			continue
		}
		if chosen[e.GetId()] {
			return &persistence.Error{Kind: persistence.ErrConflict, SessionID: sessionID, EntryID: e.GetId(), Detail: "the batch holds two entries with this id"}
		}
		chosen[e.GetId()] = true
		list = append(list, e.GetId())
	}
	if len(list) == 0 {
		return nil
	}
	var taken string
	err := tx.QueryRow(ctx, `SELECT id FROM entries WHERE session_pk = $1 AND id = ANY($2) LIMIT 1`, pk, list).Scan(&taken)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	} else if err != nil {
		return err
	}
	return &persistence.Error{Kind: persistence.ErrConflict, SessionID: sessionID, EntryID: taken, Detail: "an entry with this id exists in the session"}
}

// SetLeaf implements [persistence.Store].
func (s *Store) SetLeaf(ctx context.Context, sessionID, entryID string) error {
	return s.setLeaf(ctx, nil, sessionID, entryID)
}

func (s *Store) setLeaf(ctx context.Context, f *persistence.Fence, sessionID, entryID string) error {
	err := s.write(ctx, func(tx pgx.Tx) error {
		pk, err := lockSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		if f != nil {
			if err := checkFence(ctx, tx, *f, pk, sessionID); err != nil {
				return err
			}
		}
		var leaf *string // NULL: before the first entry
		if entryID != "" {
			var one int
			if err := tx.QueryRow(ctx, `SELECT 1 FROM entries WHERE session_pk = $1 AND id = $2`, pk, entryID).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
				return persistence.EntryNotFound(sessionID, entryID)
			} else if err != nil {
				return err
			}
			leaf = &entryID
		}
		_, err = tx.Exec(ctx, `UPDATE sessions SET leaf_entry_id = $2, update_time = greatest(update_time, $3) WHERE pk = $1`, pk, leaf, s.timeNow())
		return err
	})
	return opError(err, "move the leaf of session %q to entry %q", sessionID, entryID)
}

// GetEntry implements [persistence.Store].
func (s *Store) GetEntry(ctx context.Context, sessionID, entryID string) (*agentdv1.Entry, error) {
	var out *agentdv1.Entry
	err := s.read(ctx, func(tx pgx.Tx) error {
		sess, err := lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		out, err = entryInTx(ctx, tx, sessionID, sess.pk, entryID)
		return err
	})
	return out, opError(err, "get entry %q of session %q", entryID, sessionID)
}

// entryInTx reads one entry of the session with key pk.
func entryInTx(ctx context.Context, tx pgx.Tx, sessionID string, pk int64, entryID string) (*agentdv1.Entry, error) {
	rows, err := tx.Query(ctx, `SELECT `+entryColumns+` FROM entries WHERE session_pk = $1 AND id = $2`, pk, entryID)
	if err != nil {
		return nil, err
	}
	list, _, err := decodeRows(sessionID, rows)
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
	out, err := s.path(ctx, sessionID, "", persistence.WalkOptions{})
	return out, opError(err, "load the path of session %q", sessionID)
}

// PathTo implements [persistence.Store].
func (s *Store) PathTo(ctx context.Context, sessionID, entryID string) ([]*agentdv1.Entry, error) {
	if entryID == "" {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, Detail: "entry id is empty"}
	}
	out, err := s.path(ctx, sessionID, entryID, persistence.WalkOptions{})
	return out, opError(err, "load the path to entry %q of session %q", entryID, sessionID)
}

// ContextPath implements [persistence.Store]: it walks the session's tree
// without payloads, decodes the latest compaction summary on the path to
// find its first kept entry, and reads and decodes only the entries from
// there to the leaf.
func (s *Store) ContextPath(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	out, err := s.path(ctx, sessionID, "", persistence.WalkOptions{ContextOnly: true})
	return out, opError(err, "load the context path of session %q", sessionID)
}

// PathSinceAnswer implements [persistence.Store]: ContextPath's walk,
// ending at the latest assistant message too.
func (s *Store) PathSinceAnswer(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	out, err := s.path(ctx, sessionID, "", persistence.WalkOptions{ContextOnly: true, SinceAnswer: true})
	return out, opError(err, "load the path since the latest answer of session %q", sessionID)
}

// path loads the entries from the root to entry to (the leaf when
// empty), or only the part walk's options keep (its FirstKept is set
// here). The tree is read without payloads, newest first, only as far as
// the path goes; only the entries on the path are read whole and decoded.
func (s *Store) path(ctx context.Context, sessionID, to string, walk persistence.WalkOptions) ([]*agentdv1.Entry, error) {
	var out []*agentdv1.Entry
	err := s.read(ctx, func(tx pgx.Tx) error {
		sess, err := lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		if to == "" {
			to = sess.leaf
		}
		if to == "" {
			out = []*agentdv1.Entry{}
			return nil
		}
		walk.FirstKept = func(ctx context.Context, id string) (string, error) {
			e, err := entryInTx(ctx, tx, sessionID, sess.pk, id)
			return e.GetMessage().GetCompactionSummary().GetFirstKeptEntryId(), err
		}
		path, err := walkNewestFirst(ctx, tx, sessionID, sess.pk, to, walk)
		if err != nil {
			return err
		}
		seqs := make([]int64, len(path))
		want := make(map[int64]int, len(path)) // seq → position
		for i, n := range path {
			seqs[i] = n.Seq
			want[n.Seq] = i
		}
		rows, err := tx.Query(ctx, `SELECT `+entryColumns+` FROM entries WHERE session_pk = $1 AND seq = ANY($2)`, sess.pk, seqs)
		if err != nil {
			return err
		}
		found := make([]rowcodec.Row, len(path))
		for rows.Next() {
			var r rowcodec.Row
			if err := rows.Scan(&r.Seq, &r.ID, &r.Parent, &r.Encoding, &r.Payload); err != nil {
				rows.Close()
				return err
			}
			found[want[r.Seq]] = r
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		out, err = rowcodec.DecodePath(sessionID, found)
		return err
	})
	return out, err
}

// walkNewestFirst reads the session's tree without payloads, newest first
// in pages that grow from 64 rows, offering each node to a walk from to
// until it ends, and returns the nodes of the path, root first: a path
// that ends near the leaf (a compacted context, the tail since the last
// answer) reads only that far.
func walkNewestFirst(ctx context.Context, tx pgx.Tx, sessionID string, pk int64, to string, opts persistence.WalkOptions) ([]persistence.PathNode, error) {
	w := persistence.NewWalker(sessionID, to, opts)
	var path []persistence.PathNode // leaf first
	below := int64(math.MaxInt64)
	for size, done := 64, false; !done; size = min(size*2, 4096) {
		// A page is read whole before it is offered: the walk may query
		// (FirstKept) and a connection runs one query at a time.
		rows, err := tx.Query(ctx, `SELECT seq, id, coalesce(parent_id, ''), kind = 'compaction_summary', kind = 'assistant' FROM entries
			WHERE session_pk = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`, pk, below, size)
		if err != nil {
			return nil, err
		}
		page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (persistence.PathNode, error) {
			var n persistence.PathNode
			err := r.Scan(&n.Seq, &n.ID, &n.Parent, &n.Summary, &n.Answer)
			return n, err
		})
		if err != nil {
			return nil, err
		}
		done = len(page) < size
		for _, n := range page {
			below = n.Seq
			onPath, end, err := w.Offer(ctx, n)
			if err != nil {
				return nil, err
			}
			if onPath {
				path = append(path, n)
			}
			if end {
				done = true
				break
			}
		}
	}
	return persistence.EndWalk(w, path)
}

// Entries implements [persistence.Store]. Page tokens carry the seq of the
// last entry returned.
func (s *Store) Entries(ctx context.Context, sessionID string, req persistence.EntriesRequest) (*persistence.EntryPage, error) {
	size, after, err := req.Cursor(sessionID)
	if err != nil {
		return nil, err
	}
	page := &persistence.EntryPage{}
	err = s.read(ctx, func(tx pgx.Tx) error {
		sess, err := lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+entryColumns+` FROM entries WHERE session_pk = $1 AND seq > $2 ORDER BY seq LIMIT $3`, sess.pk, after, size+1)
		if err != nil {
			return err
		}
		list, seqs, err := decodeRows(sessionID, rows)
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

// Tree implements [persistence.Store], from the rows' columns alone.
func (s *Store) Tree(ctx context.Context, sessionID string, req persistence.EntriesRequest) (*persistence.TreePage, error) {
	size, after, err := req.Cursor(sessionID)
	if err != nil {
		return nil, err
	}
	page := &persistence.TreePage{}
	err = s.read(ctx, func(tx pgx.Tx) error {
		sess, err := lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT seq, id, coalesce(parent_id, ''), kind, create_time, preview FROM entries WHERE session_pk = $1 AND seq > $2 ORDER BY seq LIMIT $3`, sess.pk, after, size+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		page.Nodes = make([]persistence.TreeNode, 0, min(size+1, 1024))
		var lastSeq int64
		for rows.Next() {
			var n persistence.TreeNode
			var seq, created int64
			if err := rows.Scan(&seq, &n.ID, &n.ParentID, &n.Kind, &created, &n.Preview); err != nil {
				return err
			}
			if len(page.Nodes) == size {
				page.NextPageToken = req.NextPageToken(sessionID, lastSeq)
				break
			}
			n.Time = timeFromNanos(created)
			page.Nodes = append(page.Nodes, n)
			lastSeq = seq
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
	err := s.read(ctx, func(tx pgx.Tx) error {
		sess, err := lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+entryColumns+` FROM entries WHERE session_pk = $1 AND kind = 'label' ORDER BY seq`, sess.pk)
		if err != nil {
			return err
		}
		list, _, err := decodeRows(sessionID, rows)
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

// decodeRows decodes rows of entryColumns and returns them with their
// seqs. A row that does not decode fails the whole read with a
// *[persistence.CorruptEntryError].
func decodeRows(sessionID string, rows pgx.Rows) ([]*agentdv1.Entry, []int64, error) {
	defer rows.Close()
	var out []*agentdv1.Entry
	var seqs []int64
	for rows.Next() {
		var r rowcodec.Row
		if err := rows.Scan(&r.Seq, &r.ID, &r.Parent, &r.Encoding, &r.Payload); err != nil {
			return nil, nil, err
		}
		e, err := r.Decode(sessionID)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, e)
		seqs = append(seqs, r.Seq)
	}
	return out, seqs, rows.Err()
}
