package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// Redact implements [persistence.Store]. The replaced row versions stay in
// PostgreSQL's files until VACUUM reclaims them (autovacuum, or VACUUM
// entries, run_events): the operator's to schedule where the bytes must
// be gone at once.
func (s *Store) Redact(ctx context.Context, sessionID string, replacements []*agentdv1.Entry, notice *agentdv1.Entry) error {
	kinds, err := persistence.CheckRedact(sessionID, replacements, notice)
	if err != nil {
		return err
	}
	id, parent, at := notice.GetId(), notice.GetParentId(), notice.GetTime()
	restore := func() { notice.Id, notice.ParentId, notice.Time = id, parent, at }
	enc, release := s.encoder()
	defer release()
	now := s.timeNow()
	err = s.write(ctx, func(tx pgx.Tx) error {
		restore()
		// The session's row first, the order every write of a session
		// takes.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE`, sessionID); err != nil {
			return err
		}
		sess, err := lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		for _, r := range replacements {
			stored, err := entryInTx(ctx, tx, sessionID, sess.pk, r.GetId())
			if err != nil {
				return err
			}
			out, err := persistence.Replaced(sessionID, stored, r)
			if err != nil {
				return err
			}
			raw, err := proto.Marshal(out)
			if err != nil {
				return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, EntryID: out.Id, Detail: fmt.Sprintf("encode: %v", err)}
			}
			payload, encoding, err := enc.Encode(raw)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE entries SET payload = $3, encoding = $4, preview = $5 WHERE session_pk = $1 AND id = $2`,
				sess.pk, out.Id, payload, int16(encoding), persistence.Preview(out)); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `WITH doomed AS (SELECT id FROM runs WHERE session_pk = $1), gone AS (
				DELETE FROM run_events e USING doomed d WHERE e.run_id = d.id
			) UPDATE runs r SET events_pruned = true FROM doomed d WHERE r.id = d.id`, sess.pk); err != nil {
			return err
		}
		return appendInTx(ctx, tx, nil, sessionID, kinds, []*agentdv1.Entry{notice}, enc, now)
	})
	if err != nil {
		restore()
		return opError(err, "redact %d entries of session %q", len(replacements), sessionID)
	}
	return nil
}
