package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// sessionColumns are a whole session record, with its pk.
const sessionColumns = `s.pk, s.id, s.create_time, s.update_time, coalesce(s.leaf_entry_id, ''), s.title, s.config, coalesce(s.origin_session_id, ''), coalesce(s.origin_entry_id, ''), s.tenant, coalesce(s.origin_run_id, ''), coalesce(s.origin_tool_call_id, ''), coalesce(s.origin_profile, ''), s.last_seq`

// CreateSession implements [persistence.Store].
func (s *Store) CreateSession(ctx context.Context, p persistence.CreateSessionParams) (*persistence.Session, error) {
	id, cfgBytes, err := p.Prepare()
	if err != nil {
		return nil, err
	}
	now := s.timeNow()
	err = s.write(ctx, func(tx pgx.Tx) error {
		var originSession, originEntry, originRun, originCall, originProfile *string
		if o := p.Origin; o.SessionID != "" {
			originSession, originEntry = &o.SessionID, &o.EntryID
			if o.RunID != "" {
				originRun, originCall, originProfile = &o.RunID, &o.ToolCallID, &o.Profile
			}
		}
		var pk int64
		err := tx.QueryRow(ctx, `INSERT INTO sessions (id, create_time, update_time, title, config, origin_session_id, origin_entry_id, origin_run_id, origin_tool_call_id, origin_profile, tenant) VALUES ($1, $2, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING pk`,
			id, now, p.Title, cfgBytes, originSession, originEntry, originRun, originCall, originProfile, p.Tenant).Scan(&pk)
		if _, ok := uniqueViolation(err); ok {
			return &persistence.Error{Kind: persistence.ErrConflict, SessionID: id, Detail: "a session with this id exists"}
		} else if err != nil {
			return err
		}
		return insertLabels(ctx, tx, pk, p.Labels)
	})
	if err != nil {
		return nil, opError(err, "create session %q", id)
	}
	return p.Created(id, now), nil
}

// insertLabels stores a session's labels in one statement.
func insertLabels(ctx context.Context, tx pgx.Tx, pk int64, labels map[string]string) error {
	if len(labels) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(labels))
	values := make([]string, len(keys))
	for i, k := range keys {
		values[i] = labels[k]
	}
	_, err := tx.Exec(ctx, `INSERT INTO session_labels (session_pk, key, value) SELECT $1, k, v FROM unnest($2::text[], $3::text[]) AS l (k, v)`, pk, keys, values)
	return err
}

// UpdateSession implements [persistence.Store].
func (s *Store) UpdateSession(ctx context.Context, sessionID string, u persistence.SessionUpdate) (*persistence.Session, error) {
	var cfg []byte
	if u.Config != nil {
		var err error
		if cfg, err = proto.Marshal(u.Config); err != nil {
			return nil, &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, Detail: fmt.Sprintf("config: %v", err)}
		}
	}
	var out *persistence.Session
	err := s.write(ctx, func(tx pgx.Tx) error {
		pk, err := lockSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		var title *string
		if u.Title != nil {
			title = u.Title
		}
		if _, err := tx.Exec(ctx, `UPDATE sessions SET title = coalesce($2, title), config = coalesce($3, config), update_time = greatest(update_time, $4) WHERE pk = $1`,
			pk, title, cfg, s.timeNow()); err != nil {
			return err
		}
		if u.SetLabels {
			if _, err := tx.Exec(ctx, `DELETE FROM session_labels WHERE session_pk = $1`, pk); err != nil {
				return err
			}
			if err := insertLabels(ctx, tx, pk, u.Labels); err != nil {
				return err
			}
		}
		out, err = getSession(ctx, tx, sessionID)
		return err
	})
	if err != nil {
		return nil, opError(err, "update session %q", sessionID)
	}
	return out, nil
}

// lockSession returns the pk of a session and locks its row until the
// transaction ends, ordering the writes of the session. FOR NO KEY
// UPDATE, not FOR UPDATE: inserts of runs and entries that reference
// the row (foreign key checks take FOR KEY SHARE) need not wait.
func lockSession(ctx context.Context, tx pgx.Tx, sessionID string) (int64, error) {
	var pk int64
	err := tx.QueryRow(ctx, `SELECT pk FROM sessions WHERE id = $1 FOR NO KEY UPDATE`, sessionID).Scan(&pk)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, persistence.SessionNotFound(sessionID)
	}
	return pk, err
}

// GetSession implements [persistence.Store].
func (s *Store) GetSession(ctx context.Context, sessionID string) (*persistence.Session, error) {
	var out *persistence.Session
	err := s.read(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = getSession(ctx, tx, sessionID)
		return err
	})
	return out, opError(err, "get session %q", sessionID)
}

// getSession reads one session with its labels.
func getSession(ctx context.Context, tx pgx.Tx, sessionID string) (*persistence.Session, error) {
	rows, err := tx.Query(ctx, `SELECT `+sessionColumns+` FROM sessions s WHERE s.id = $1`, sessionID)
	if err != nil {
		return nil, err
	}
	list, pks, err := scanSessions(rows)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, persistence.SessionNotFound(sessionID)
	}
	return list[0], loadLabels(ctx, tx, list, pks)
}

// ListSessions implements [persistence.Store]. Page tokens carry the pk of
// the last session returned: pks only grow, so pages never repeat or skip
// a session when others are created or deleted between calls.
func (s *Store) ListSessions(ctx context.Context, req persistence.ListSessionsRequest) (*persistence.SessionPage, error) {
	size, before, err := req.Cursor()
	if err != nil {
		return nil, err
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + sessionColumns + ` FROM sessions s WHERE s.pk < $1`)
	args := []any{before}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if !req.AllTenants {
		q.WriteString(` AND s.tenant = ` + arg(req.Tenant))
	}
	if req.OriginSessionID != "" {
		q.WriteString(` AND s.origin_session_id = ` + arg(req.OriginSessionID))
	}
	for _, k := range slices.Sorted(maps.Keys(req.LabelFilter)) {
		q.WriteString(` AND EXISTS (SELECT 1 FROM session_labels l WHERE l.session_pk = s.pk AND l.key = ` + arg(k) + ` AND l.value = ` + arg(req.LabelFilter[k]) + `)`)
	}
	q.WriteString(` ORDER BY s.pk DESC LIMIT ` + arg(size+1))

	page := &persistence.SessionPage{}
	err = s.read(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, q.String(), args...)
		if err != nil {
			return err
		}
		list, pks, err := scanSessions(rows)
		if err != nil {
			return err
		}
		if len(list) > size {
			list, pks = list[:size], pks[:size]
			page.NextPageToken = req.NextPageToken(pks[size-1])
		}
		page.Sessions = list
		return loadLabels(ctx, tx, list, pks)
	})
	if err != nil {
		return nil, opError(err, "list sessions")
	}
	return page, nil
}

// scanSessions reads rows of sessionColumns.
func scanSessions(rows pgx.Rows) ([]*persistence.Session, []int64, error) {
	defer rows.Close()
	var list []*persistence.Session
	var pks []int64
	for rows.Next() {
		var (
			pk               int64
			sess             persistence.Session
			cfg              []byte
			created, updated time.Time
		)
		if err := rows.Scan(&pk, &sess.ID, &created, &updated, &sess.LeafEntryID, &sess.Title, &cfg, &sess.Origin.SessionID, &sess.Origin.EntryID, &sess.Tenant,
			&sess.Origin.RunID, &sess.Origin.ToolCallID, &sess.Origin.Profile, &sess.LastSeq); err != nil {
			return nil, nil, err
		}
		sess.CreateTime, sess.UpdateTime = created, updated
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
func loadLabels(ctx context.Context, tx pgx.Tx, list []*persistence.Session, pks []int64) error {
	if len(list) == 0 {
		return nil
	}
	byPK := make(map[int64]*persistence.Session, len(list))
	for i, pk := range pks {
		byPK[pk] = list[i]
	}
	rows, err := tx.Query(ctx, `SELECT session_pk, key, value FROM session_labels WHERE session_pk = ANY($1)`, pks)
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

// SessionSpend implements [persistence.Store].
func (s *Store) SessionSpend(ctx context.Context, sessionID string) (persistence.Spend, error) {
	var out persistence.Spend
	err := s.read(ctx, func(tx pgx.Tx) error {
		sess, err := lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT coalesce(sum(tokens), 0)::bigint, coalesce(sum(cost), 0) FROM spend WHERE session_pk = $1`, sess.pk).Scan(&out.Tokens, &out.CostUSD)
	})
	return out, opError(err, "sum the spending of session %q", sessionID)
}

// TenantSpend implements [persistence.Store].
func (s *Store) TenantSpend(ctx context.Context, tenant string, since time.Time) (persistence.Spend, error) {
	var out persistence.Spend
	err := s.read(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT coalesce(sum(tokens), 0)::bigint, coalesce(sum(cost), 0) FROM spend WHERE tenant = $1 AND time >= $2`, tenant, since).Scan(&out.Tokens, &out.CostUSD)
	})
	return out, opError(err, "sum the spending of tenant %q", tenant)
}

// DeleteSession implements [persistence.Store]. Its entries, runs, event
// logs and controls go with it (ON DELETE CASCADE).
func (s *Store) DeleteSession(ctx context.Context, sessionID string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, sessionID)
	if err == nil && tag.RowsAffected() == 0 {
		err = persistence.SessionNotFound(sessionID)
	}
	return opError(err, "delete session %q", sessionID)
}

// sessionState is what reads need to find a session's entries.
type sessionState struct {
	pk      int64
	leaf    string
	lastSeq int64
}

// lookupSession finds a session's pk, leaf and last seq.
func lookupSession(ctx context.Context, tx pgx.Tx, sessionID string) (sessionState, error) {
	var st sessionState
	err := tx.QueryRow(ctx, `SELECT pk, coalesce(leaf_entry_id, ''), last_seq FROM sessions WHERE id = $1`, sessionID).Scan(&st.pk, &st.leaf, &st.lastSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, persistence.SessionNotFound(sessionID)
	}
	return st, err
}
