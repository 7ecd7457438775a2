package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// CreateSession implements [persistence.Store].
func (s *Store) CreateSession(ctx context.Context, p persistence.CreateSessionParams) (*persistence.Session, error) {
	id, cfgBytes, err := p.Prepare()
	if err != nil {
		return nil, err
	}
	now := s.now()
	created := p.Created(id, time.Unix(0, now.UnixNano()))
	err = s.write(ctx, func(t *writeTx) error {
		var originSession, originEntry, originRun, originCall, originProfile any
		if o := p.Origin; o.SessionID != "" {
			originSession, originEntry = o.SessionID, o.EntryID
			if o.RunID != "" {
				originRun, originCall, originProfile = o.RunID, o.ToolCallID, o.Profile
			}
		}
		res, err := t.exec(`INSERT INTO sessions (id, create_time, update_time, title, config, origin_session_id, origin_entry_id, origin_run_id, origin_tool_call_id, origin_profile, tenant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			id, now.UnixNano(), now.UnixNano(), p.Title, cfgBytes, originSession, originEntry, originRun, originCall, originProfile, p.Tenant)
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
			if _, err := t.exec(`INSERT INTO session_labels (session_pk, key, value) VALUES (?, ?, ?)`, pk, k, v); err != nil {
				return err
			}
		}
		t.stage(id, sessionCache{pk: pk})
		t.created(id, created)
		return nil
	})
	if err != nil {
		return nil, opError(err, "create session %q", id)
	}
	// The record cache keeps created: the caller gets a copy.
	return copySession(created), nil
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
	err := s.write(ctx, func(t *writeTx) error {
		sess, err := t.session(sessionID)
		if err != nil {
			return err
		}
		if u.Title != nil {
			if _, err := t.exec(`UPDATE sessions SET title = ? WHERE pk = ?`, *u.Title, sess.pk); err != nil {
				return err
			}
		}
		if cfg != nil {
			if _, err := t.exec(`UPDATE sessions SET config = ? WHERE pk = ?`, cfg, sess.pk); err != nil {
				return err
			}
		}
		if u.SetLabels {
			if _, err := t.exec(`DELETE FROM session_labels WHERE session_pk = ?`, sess.pk); err != nil {
				return err
			}
			for k, v := range u.Labels {
				if _, err := t.exec(`INSERT INTO session_labels (session_pk, key, value) VALUES (?, ?, ?)`, sess.pk, k, v); err != nil {
					return err
				}
			}
		}
		if _, err = t.exec(`UPDATE sessions SET update_time = ? WHERE pk = ?`, s.now().UnixNano(), sess.pk); err != nil {
			return err
		}
		t.stage(sessionID, sess)
		t.touch(sessionID)
		return nil
	})
	if err != nil {
		return nil, opError(err, "update session %q", sessionID)
	}
	return s.GetSession(ctx, sessionID)
}

// GetSession implements [persistence.Store].
func (s *Store) GetSession(ctx context.Context, sessionID string) (*persistence.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if sess, ok := s.records.get(sessionID); ok {
		return sess, nil
	}
	gen := s.records.generation(sessionID)
	sess, err := s.readSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	s.records.fill(gen, sess)
	return sess, nil
}

// readSession reads the session's record from the database.
func (s *Store) readSession(ctx context.Context, sessionID string) (*persistence.Session, error) {
	// A point read is over in microseconds: a cancellable context would
	// only make database/sql and go-sqlite3 watch it from goroutines of
	// their own.
	var labels []byte
	sess, _, err := scanSession(s.rSessions.QueryRowContext(context.WithoutCancel(ctx), sessionID), &labels)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, persistence.SessionNotFound(sessionID)
	}
	if err == nil && len(labels) > len("{}") {
		if jerr := json.Unmarshal(labels, &sess.Labels); jerr != nil {
			err = &persistence.Error{Kind: persistence.ErrCorrupt, SessionID: sessionID, Detail: fmt.Sprintf("labels: %v", jerr)}
		}
	}
	if err != nil {
		return nil, opError(err, "get session %q", sessionID)
	}
	return sess, nil
}

// ListSessions implements [persistence.Store]. Page tokens carry the pk of
// the last session returned: pks only grow, so pages never repeat or skip a
// session when others are created or deleted between calls.
func (s *Store) ListSessions(ctx context.Context, req persistence.ListSessionsRequest) (*persistence.SessionPage, error) {
	size, before, err := req.Cursor()
	if err != nil {
		return nil, err
	}
	q := strings.Builder{}
	q.WriteString(`SELECT ` + sessionColumns + sessionFrom + ` WHERE s.session_pk < ?`)
	args := []any{before}
	if !req.AllTenants {
		q.WriteString(` AND s.tenant = ?`)
		args = append(args, req.Tenant)
	}
	if req.OriginSessionID != "" {
		q.WriteString(` AND s.origin_session_id = ?`)
		args = append(args, req.OriginSessionID)
	}
	for _, k := range slices.Sorted(maps.Keys(req.LabelFilter)) {
		q.WriteString(` AND EXISTS (SELECT 1 FROM session_labels l WHERE l.session_pk = s.session_pk AND l.key = ? AND l.value = ?)`)
		args = append(args, k, req.LabelFilter[k])
	}
	q.WriteString(` ORDER BY s.session_pk DESC LIMIT ?`)
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
func scanSessions(rows *sql.Rows) ([]*persistence.Session, []int64, error) {
	defer rows.Close()
	var list []*persistence.Session
	var pks []int64
	for rows.Next() {
		sess, pk, err := scanSession(rows)
		if err != nil {
			return nil, nil, err
		}
		list = append(list, sess)
		pks = append(pks, pk)
	}
	return list, pks, rows.Err()
}

// scanSession reads a row of sessionColumns, followed by the columns extra
// reads, and returns the session (with no labels yet) and its pk.
func scanSession(row interface{ Scan(...any) error }, extra ...any) (*persistence.Session, int64, error) {
	var (
		pk, lastSeq, created, updated int64
		sess                          persistence.Session
		cfg                           []byte
	)
	var originSession, originEntry, originRun, originCall, originProfile sql.NullString
	if err := row.Scan(append([]any{&pk, &sess.LeafEntryID, &lastSeq, &sess.ID, &created, &updated, &sess.Title, &cfg, &originSession, &originEntry, &sess.Tenant,
		&originRun, &originCall, &originProfile}, extra...)...); err != nil {
		return nil, 0, err
	}
	sess.CreateTime, sess.UpdateTime, sess.LastSeq = time.Unix(0, created), time.Unix(0, updated), uint64(lastSeq)
	sess.Origin = persistence.Origin{SessionID: originSession.String, EntryID: originEntry.String,
		RunID: originRun.String, ToolCallID: originCall.String, Profile: originProfile.String}
	sess.Config = &agentdv1.SessionConfig{}
	if err := proto.Unmarshal(cfg, sess.Config); err != nil {
		return nil, 0, &persistence.Error{Kind: persistence.ErrCorrupt, SessionID: sess.ID, Detail: fmt.Sprintf("config: %v", err)}
	}
	sess.Labels = map[string]string{}
	return &sess, pk, nil
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

// DeleteSession implements [persistence.Store].
func (s *Store) DeleteSession(ctx context.Context, sessionID string) error {
	err := s.write(ctx, func(t *writeTx) error {
		t.forget(sessionID)
		res, err := t.exec(`DELETE FROM sessions WHERE id = ?`, sessionID)
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
	return opError(err, "delete session %q", sessionID)
}

// sqlInsertSpend records what a stored message cost, with its session's
// tenant.
const sqlInsertSpend = `INSERT INTO spend (session_pk, tenant, time, tokens, cost) SELECT pk, tenant, ?, ?, ? FROM sessions WHERE pk = ?`

// SessionSpend implements [persistence.Store].
func (s *Store) SessionSpend(ctx context.Context, sessionID string) (persistence.Spend, error) {
	var out persistence.Spend
	err := s.read(ctx, func(tx *sql.Tx) error {
		pk, _, err := s.lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT coalesce(sum(tokens), 0), coalesce(sum(cost), 0) FROM spend WHERE session_pk = ?`, pk).Scan(&out.Tokens, &out.CostUSD)
	})
	return out, opError(err, "sum the spending of session %q", sessionID)
}

// TenantSpend implements [persistence.Store].
func (s *Store) TenantSpend(ctx context.Context, tenant string, since time.Time) (persistence.Spend, error) {
	var out persistence.Spend
	err := s.read(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT coalesce(sum(tokens), 0), coalesce(sum(cost), 0) FROM spend WHERE tenant = ? AND time >= ?`, tenant, since.UnixNano()).Scan(&out.Tokens, &out.CostUSD)
	})
	return out, opError(err, "sum the spending of tenant %q", tenant)
}

// lookupSession finds a session's pk and leaf in a read transaction.
func (s *Store) lookupSession(ctx context.Context, tx *sql.Tx, sessionID string) (pk int64, leaf string, err error) {
	var lastSeq int64
	if err := tx.StmtContext(ctx, s.rSession).QueryRowContext(ctx, sessionID).Scan(&pk, &leaf, &lastSeq); errors.Is(err, sql.ErrNoRows) {
		return 0, "", persistence.SessionNotFound(sessionID)
	} else if err != nil {
		return 0, "", err
	}
	return pk, leaf, nil
}
