package sqlite

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// Redact implements [persistence.Store]. The writer runs with SQLite's
// secure_delete, so the pages that held the replaced payloads (and the
// dropped event batches) are overwritten with zeros, and afterwards the
// WAL, which still holds their earlier versions, is checkpointed and
// emptied: at once, or as soon as no outside reader holds a snapshot from
// before. The file then keeps no copy of the replaced bytes.
func (s *Store) Redact(ctx context.Context, sessionID string, replacements []*agentdv1.Entry, notice *agentdv1.Entry) error {
	kinds, err := persistence.CheckRedact(sessionID, replacements, notice)
	if err != nil {
		return err
	}
	id, parent, at := notice.GetId(), notice.GetParentId(), notice.GetTime()
	restore := func() { notice.Id, notice.ParentId, notice.Time = id, parent, at }
	now := s.now()
	err = s.write(ctx, func(t *writeTx) error {
		restore()
		sess, err := t.session(sessionID)
		if err != nil {
			return err
		}
		for _, r := range replacements {
			if err := t.replace(sessionID, sess.pk, r); err != nil {
				return err
			}
		}
		if _, err := t.exec(`UPDATE runs AS r SET last_seq = `+runLastSeq+`, events_pruned = 1 WHERE r.session_pk = ? AND r.events_pruned = 0`, sess.pk); err != nil {
			return err
		}
		if _, err := t.exec(`DELETE FROM run_events WHERE run_id IN (SELECT id FROM runs WHERE session_pk = ?)`, sess.pk); err != nil {
			return err
		}
		return t.append(sessionID, kinds, []*agentdv1.Entry{notice}, now)
	})
	if err != nil {
		restore()
		return opError(err, "redact %d entries of session %q", len(replacements), sessionID)
	}
	s.scrubWAL()
	return nil
}

// replace writes the replacement of one entry over its row.
func (t *writeTx) replace(sessionID string, pk int64, replacement *agentdv1.Entry) error {
	rows, err := t.query(sqlEntryByID, pk, replacement.GetId())
	if err != nil {
		return err
	}
	list, seqs, err := decodeRows(sessionID, rows, 1)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return persistence.EntryNotFound(sessionID, replacement.GetId())
	}
	out, err := persistence.Replaced(sessionID, list[0], replacement)
	if err != nil {
		return err
	}
	t.w.buf, err = proto.MarshalOptions{}.MarshalAppend(t.w.buf[:0], out)
	if err != nil {
		return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, EntryID: out.Id, Detail: fmt.Sprintf("encode: %v", err)}
	}
	payload, encoding, err := t.w.payloads.Encode(t.w.buf)
	if err != nil {
		return err
	}
	_, err = t.exec(`UPDATE entries SET payload = ?, encoding = ?, preview = ? WHERE key = ? * 4294967296 + ?`,
		payload, encoding, persistence.Preview(out), pk, seqs[0])
	return err
}
