package sqlite_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"database/sql"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/sqlite"
)

// TestPayloadEncoding checks what lands in the file: long entries as a
// zlib stream that inflates, with any zlib implementation, to the entry's
// protobuf; short ones, and all with compression off, as the plain
// protobuf.
func TestPayloadEncoding(t *testing.T) {
	tests := []struct {
		name      string
		opts      []sqlite.Option
		encodings map[int64]int // how many entries of each encoding
	}{
		{"default", nil, map[int64]int{0: 2, 1: 1}},
		{"compression off", []sqlite.Option{sqlite.WithPayloadCompression(false)}, map[int64]int{0: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { testPayloadEncoding(t, tc.opts, tc.encodings) })
	}
}

func testPayloadEncoding(t *testing.T, opts []sqlite.Option, wantEncodings map[int64]int) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentd.db")
	s, err := sqlite.Open(ctx, path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	// user (~300 B), assistant with tool call (~1 KB), tool result (~4 KB).
	entries := transcriptgen.Transcript(3, 3)
	if err := s.Append(ctx, sess.ID, entries...); err != nil {
		t.Fatal(err)
	}
	rows, err := rawDB(t, path).Query(`SELECT id, encoding, payload FROM entries ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	encodings := map[int64]int{}
	for i := 0; rows.Next(); i++ {
		var id string
		var encoding int64
		var payload []byte
		if err := rows.Scan(&id, &encoding, &payload); err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(entries[i])
		if err != nil {
			t.Fatal(err)
		}
		plain := payload
		switch encoding {
		case 0:
		case 1:
			zr, err := zlib.NewReader(bytes.NewReader(payload))
			if err != nil {
				t.Fatalf("entry %s: encoding 1 but not a zlib stream: %v", id, err)
			}
			var out bytes.Buffer
			if _, err := out.ReadFrom(zr); err != nil {
				t.Fatalf("entry %s: inflate: %v", id, err)
			}
			plain = out.Bytes()
			if len(payload) >= len(want) {
				t.Fatalf("entry %s: compressed %d bytes to %d", id, len(want), len(payload))
			}
		default:
			t.Fatalf("entry %s: encoding %d", id, encoding)
		}
		encodings[encoding]++
		got := &agentdv1.Entry{}
		if err := proto.Unmarshal(plain, got); err != nil || !proto.Equal(got, entries[i]) {
			t.Fatalf("entry %s: stored payload decodes to %v (%v), want %v", id, got, err, entries[i])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(encodings, wantEncodings) {
		t.Fatalf("entries per encoding: %v, want %v", encodings, wantEncodings)
	}
	// Whatever the encoding, the store reads back what was appended.
	got, err := s.Path(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range entries {
		if !proto.Equal(got[i], entries[i]) {
			t.Fatalf("Path entry %d: got %v, want %v", i, got[i], entries[i])
		}
	}
}

// TestCorruptCompressedPayload damages compressed payloads in ways a plain
// protobuf cannot be damaged; every read must name the session and entry.
func TestCorruptCompressedPayload(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		tamper string // run with ?1 = the entry id
	}{
		{"not a zlib stream", `UPDATE entries SET payload = x'0a0a0a0a' WHERE id = ?1`},
		{"truncated stream", `UPDATE entries SET payload = substr(payload, 1, length(payload) / 2) WHERE id = ?1`},
		// The last byte belongs to the checksum; it is changed whatever it
		// was (the transcript, and so the checksum, differs per run).
		{"bad checksum", `UPDATE entries SET payload = substr(payload, 1, length(payload) - 1) || CASE WHEN substr(payload, -1) = x'00' THEN x'01' ELSE x'00' END WHERE id = ?1`},
		{"trailing bytes", `UPDATE entries SET payload = payload || x'00' WHERE id = ?1`},
		{"unknown encoding", `PRAGMA ignore_check_constraints = 1; UPDATE entries SET encoding = 7 WHERE id = ?1`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agentd.db")
			s, err := sqlite.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
			if err != nil {
				t.Fatal(err)
			}
			entries := transcriptgen.Transcript(4, 3)
			if err := s.Append(ctx, sess.ID, entries...); err != nil {
				t.Fatal(err)
			}
			victim := entries[2].Id // the ~4 KB tool result
			db := rawDB(t, path)
			var encoding int64
			if err := db.QueryRow(`SELECT encoding FROM entries WHERE id = ?`, victim).Scan(&encoding); err != nil || encoding != 1 {
				t.Fatalf("victim encoding = %d, %v; want 1", encoding, err)
			}
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			res, err := conn.ExecContext(ctx, tc.tamper, victim)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("tampered with %d rows, want 1", n)
			}
			reads := map[string]func() error{
				"Path":     func() error { _, err := s.Path(ctx, sess.ID); return err },
				"GetEntry": func() error { _, err := s.GetEntry(ctx, sess.ID, victim); return err },
				"Entries":  func() error { _, err := s.Entries(ctx, sess.ID, persistence.EntriesRequest{}); return err },
			}
			for name, read := range reads {
				err := read()
				var ce *persistence.CorruptEntryError
				if !errors.As(err, &ce) || !errors.Is(err, persistence.ErrCorrupt) || ce.SessionID != sess.ID || ce.EntryID != victim {
					t.Fatalf("%s: %v, want a *CorruptEntryError naming session %s and entry %s", name, err, sess.ID, victim)
				}
			}
		})
	}
}

// TestMigrateFromVersion1 opens a database written by schema version 1
// (plain payloads, no encoding column): the migration must keep its
// entries readable and new appends may compress.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v1.db")
	schema, err := os.ReadFile(filepath.Join("migrations", "0001_init.sql"))
	if err != nil {
		t.Fatal(err)
	}
	old := transcriptgen.Transcript(5, 3)
	for i, e := range old {
		e.Id = []string{"o1", "o2", "o3"}[i]
		if i > 0 {
			e.ParentId = old[i-1].Id
		}
	}
	db := rawDB(t, path)
	stmts := []rawStatement{
		{string(schema), nil},
		{`PRAGMA application_id = 1634168420`, nil}, // "agnd"
		{`PRAGMA user_version = 1`, nil},
		{`INSERT INTO sessions (id, create_time, update_time, leaf_entry_id, next_seq, config) VALUES ('old', 1, 1, 'o3', 4, x'')`, nil},
		// A session whose leaf was moved back to its first entry.
		{`INSERT INTO sessions (id, create_time, update_time, leaf_entry_id, next_seq, config) VALUES ('moved', 1, 7, 'o1', 3, x'')`, nil},
	}
	for i, e := range old {
		pb, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var parent any
		if e.ParentId != "" {
			parent = e.ParentId
		}
		stmts = append(stmts, rawStatement{`INSERT INTO entries (key, session_pk, seq, id, parent_id, kind, create_time, payload) VALUES (4294967296 + ?1, 1, ?1, ?2, ?3, 'x', 0, ?4)`, []any{i + 1, e.Id, parent, pb}})
	}
	for i, e := range old[:2] {
		pb, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var parent any
		if e.ParentId != "" {
			parent = e.ParentId
		}
		stmts = append(stmts, rawStatement{`INSERT INTO entries (key, session_pk, seq, id, parent_id, kind, create_time, payload) VALUES (2 * 4294967296 + ?1, 2, ?1, ?2, ?3, 'x', 0, ?4)`, []any{i + 1, e.Id, parent, pb}})
	}
	s := openAfterRawWrites(t, db, path, stmts)
	var version int
	if err := sqlite.InspectWriter(ctx, s, func(q func(string, any) error) error { return q("PRAGMA user_version", &version) }); err != nil || version != sqlite.SchemaVersion() {
		t.Fatalf("user_version after open = %d, %v; want %d", version, err, sqlite.SchemaVersion())
	}
	// The moved leaf survives the migration (schema 3 no longer writes
	// the leaf on append), and the next append continues from it.
	moved, err := s.GetSession(ctx, "moved")
	if err != nil || moved.LeafEntryID != "o1" || moved.UpdateTime.UnixNano() != 7 {
		t.Fatalf("moved session after migration = %+v, %v; want leaf o1, update time 7", moved, err)
	}
	branch := transcriptgen.Transcript(7, 1)
	if err := s.Append(ctx, "moved", branch...); err != nil || branch[0].ParentId != "o1" {
		t.Fatalf("append to the moved session: parent %q, %v; want o1", branch[0].ParentId, err)
	}
	if moved, err := s.GetSession(ctx, "moved"); err != nil || moved.LeafEntryID != branch[0].Id {
		t.Fatalf("leaf after the append = %+v, %v; want the new entry", moved, err)
	}
	more := transcriptgen.Transcript(6, 3)
	if err := s.Append(ctx, "old", more...); err != nil {
		t.Fatal(err)
	}
	// Rows from before previews were stored get theirs from the payload;
	// new rows from the column. Both equal persistence.Preview.
	tree, err := s.Tree(ctx, "old", persistence.EntriesRequest{})
	if err != nil || len(tree.Nodes) != len(old)+len(more) {
		t.Fatalf("tree after the migration: %+v, %v", tree, err)
	}
	for i, e := range append(append([]*agentdv1.Entry(nil), old...), more...) {
		if n := tree.Nodes[i]; n.ID != e.GetId() || n.Preview != persistence.Preview(e) || n.Preview == "" {
			t.Fatalf("node %d: %+v; want id %s, preview %q", i, n, e.GetId(), persistence.Preview(e))
		}
	}
	path2, err := s.Path(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	want := append(old, more...)
	if len(path2) != len(want) {
		t.Fatalf("path has %d entries, want %d", len(path2), len(want))
	}
	for i := range want {
		if !proto.Equal(path2[i], want[i]) {
			t.Fatalf("entry %d: got %v, want %v", i, path2[i], want[i])
		}
	}
	var compressed int
	if err := rawDB(t, path).QueryRow(`SELECT count(*) FROM entries WHERE encoding = 1`).Scan(&compressed); err != nil || compressed == 0 {
		t.Fatalf("%d compressed entries after appending to the migrated file (%v); want some", compressed, err)
	}
}

// TestEventBatchEncoding checks what lands in run_events: a batch of many
// small events as a zlib stream of their length-delimited protobufs, a
// batch of one short event plain, everything plain with compression off;
// and that every batch reads back as the events appended.
func TestEventBatchEncoding(t *testing.T) {
	tests := []struct {
		name      string
		opts      []sqlite.Option
		encodings []int64 // of the two batches, in order
	}{
		{"default", nil, []int64{1, 0}},
		{"compression off", []sqlite.Option{sqlite.WithPayloadCompression(false)}, []int64{0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "agentd.db")
			s, err := sqlite.Open(ctx, path, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.StartRun(ctx, sess.ID, "r", nil); err != nil {
				t.Fatal(err)
			}
			var events []persistence.Event
			for seq := uint64(1); seq <= 501; seq++ {
				data, err := proto.Marshal(&agentdv1.AgentEvent{SessionId: sess.ID, RunId: "r", Seq: seq, Event: &agentdv1.AgentEvent_MessageUpdate{
					MessageUpdate: &agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{Delta: "port 3000, "}}}}})
				if err != nil {
					t.Fatal(err)
				}
				events = append(events, persistence.Event{Seq: seq, Data: data})
			}
			if err := s.AppendEvents(ctx, "r", events[:500]); err != nil {
				t.Fatal(err)
			}
			if err := s.AppendEvents(ctx, "r", events[500:]); err != nil {
				t.Fatal(err)
			}
			rows, err := rawDB(t, path).Query(`SELECT encoding, payload FROM run_events WHERE run_id = 'r' ORDER BY first_seq`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var encodings []int64
			var plainBatch0 []byte
			for rows.Next() {
				var encoding int64
				var payload []byte
				if err := rows.Scan(&encoding, &payload); err != nil {
					t.Fatal(err)
				}
				if len(encodings) == 0 {
					plainBatch0 = payload
					if encoding == 1 {
						// Any zlib implementation inflates it.
						zr, err := zlib.NewReader(bytes.NewReader(payload))
						if err != nil {
							t.Fatal(err)
						}
						if plainBatch0, err = io.ReadAll(zr); err != nil {
							t.Fatal(err)
						}
						if len(payload)*4 > len(plainBatch0) {
							t.Errorf("a batch of 500 deltas compressed to %d of %d bytes; want under a quarter", len(payload), len(plainBatch0))
						}
					}
				}
				encodings = append(encodings, encoding)
			}
			if !slices.Equal(encodings, tc.encodings) {
				t.Fatalf("batch encodings %v, want %v", encodings, tc.encodings)
			}
			var want []byte
			for _, ev := range events[:500] {
				want = protowire.AppendBytes(want, ev.Data)
			}
			if !bytes.Equal(plainBatch0, want) {
				t.Fatal("the first batch is not the events' length-delimited protobufs")
			}
			got, err := s.Events(ctx, "r", 0, 1000)
			if err != nil || len(got) != len(events) {
				t.Fatalf("read back %d events, %v; want %d", len(got), err, len(events))
			}
			for i := range got {
				if got[i].Seq != events[i].Seq || !bytes.Equal(got[i].Data, events[i].Data) {
					t.Fatalf("event %d read back differs", i+1)
				}
			}
		})
	}
}

// TestMigrateFromVersion3 opens a database of schema version 3, whose
// run_events allowed plain batches only: its batches stay readable, and
// new batches may be compressed.
func TestMigrateFromVersion3(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v3.db")
	db := rawDB(t, path)
	for _, name := range []string{"0001_init.sql", "0002_payload_encoding.sql", "0003_event_log_and_implied_leaf.sql"} {
		schema, err := os.ReadFile(filepath.Join("migrations", name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(schema)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var events []persistence.Event
	var batch []byte
	for seq := uint64(1); seq <= 2000; seq++ {
		data, err := proto.Marshal(&agentdv1.AgentEvent{RunId: "r", Seq: seq, Event: &agentdv1.AgentEvent_TurnStart{TurnStart: &agentdv1.TurnStart{}}})
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, persistence.Event{Seq: seq, Data: data})
		if seq <= 1000 {
			batch = protowire.AppendBytes(batch, data)
		}
	}
	s := openAfterRawWrites(t, db, path, []rawStatement{
		{`PRAGMA application_id = 1634168420`, nil}, // "agnd"
		{`PRAGMA user_version = 3`, nil},
		{`INSERT INTO sessions (id, create_time, update_time, config) VALUES ('s', 1, 1, x'')`, nil},
		{`INSERT INTO runs (id, session_pk, start_time) VALUES ('r', 1, 1)`, nil},
		{`INSERT INTO run_events (run_id, first_seq, last_seq, payload) VALUES ('r', 1, 1000, ?)`, []any{batch}},
	})
	if err := s.AppendEvents(ctx, "r", events[1000:]); err != nil {
		t.Fatalf("append after the migration: %v", err)
	}
	got, err := s.Events(ctx, "r", 0, 5000)
	if err != nil || len(got) != len(events) {
		t.Fatalf("read %d events, %v; want %d", len(got), err, len(events))
	}
	for i := range got {
		if got[i].Seq != events[i].Seq || !bytes.Equal(got[i].Data, events[i].Data) {
			t.Fatalf("event %d differs after the migration", i+1)
		}
	}
	var compressed int
	if err := sqlite.InspectWriter(ctx, s, func(q func(string, any) error) error {
		return q("SELECT count(*) FROM run_events WHERE encoding = 1", &compressed)
	}); err != nil || compressed != 1 {
		t.Fatalf("%d compressed batches after the migration, %v; want the new one", compressed, err)
	}
}

// rawStatement is one statement of a database written the way an older
// agentd did.
type rawStatement struct {
	q    string
	args []any
}

// openAfterRawWrites runs stmts on db (the raw connection to path), closes
// it, and opens path as a store, which migrates it.
func openAfterRawWrites(t *testing.T, db *sql.DB, path string, stmts []rawStatement) *sqlite.Store {
	t.Helper()
	for _, st := range stmts {
		if _, err := db.Exec(st.q, st.args...); err != nil {
			t.Fatalf("%.60s: %v", st.q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open the older database: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
