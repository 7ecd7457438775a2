package postgres_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/postgres"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
	"github.com/agentd/agentd/persistence/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// harness opens stores on new databases and remembers each store's DSN,
// so Reopen and CorruptPayload can find it.
type harness struct {
	mu   sync.Mutex
	dsns map[persistence.Store]string
}

func (h *harness) open(t *testing.T, dsn string) persistence.Store {
	t.Helper()
	s := openStore(t, dsn)
	h.mu.Lock()
	h.dsns[s] = dsn
	h.mu.Unlock()
	return s
}

func (h *harness) dsn(s persistence.Store) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dsns[s]
}

func TestConformance(t *testing.T) {
	h := &harness{dsns: map[persistence.Store]string{}}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) persistence.Store { return h.open(t, pgtest.DSN(t)) },
		Reopen: func(t *testing.T, s persistence.Store) persistence.Store {
			dsn := h.dsn(s)
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return h.open(t, dsn)
		},
		CorruptPayload: func(t *testing.T, s persistence.Store, sessionID, entryID string, payload []byte) {
			// The suite's bytes are a plain protobuf: store them as such.
			tag, err := rawConn(t, h.dsn(s)).Exec(context.Background(),
				`UPDATE entries SET payload = $1, encoding = 0 WHERE id = $2 AND session_pk = (SELECT pk FROM sessions WHERE id = $3)`, payload, entryID, sessionID)
			if err != nil {
				t.Fatal(err)
			}
			if n := tag.RowsAffected(); n != 1 {
				t.Fatalf("corrupted %d rows, want 1", n)
			}
		},
	})
}

// openStore opens a store on dsn that is not closed by the test's end
// unless the caller does (the suite closes its own); stores of the
// Shared tests use newStore.
func openStore(t *testing.T, dsn string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// newStore opens a store on dsn that is closed when the test ends.
func newStore(t *testing.T, dsn string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	s := openStore(t, dsn, opts...)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// rawConn connects to dsn outside the store, for tampering and for
// reading the database's clock.
func rawConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestSchema(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	// Replicas starting at once on an empty database: the migration runs
	// once, under the advisory lock, and every Open succeeds.
	const replicas = 4
	stores := make([]*postgres.Store, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = postgres.Open(ctx, dsn)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		if v := stores[i].SchemaVersion(); v != 6 {
			t.Fatalf("SchemaVersion = %d, want 6", v)
		}
		if err := stores[i].Ping(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		stores[i].Close()
	}
	raw := rawConn(t, dsn)
	var applied int
	if err := raw.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&applied); err != nil || applied != 6 {
		t.Fatalf("schema_migrations holds %d rows (%v), want 6", applied, err)
	}
	if _, err := raw.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES (7, '0007_future.sql')`); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.Open(ctx, dsn)
	var sv *postgres.SchemaVersionError
	if !errors.As(err, &sv) || sv.Found != 7 || sv.Supported != 6 {
		t.Fatalf("Open of a newer schema: %v, want *SchemaVersionError{Found: 7, Supported: 6}", err)
	}

	other := pgtest.DSN(t)
	if _, err := rawConn(t, other).Exec(ctx, `CREATE TABLE notes (x int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Open(ctx, other); err == nil {
		t.Fatal("Open of another application's database succeeded")
	} else {
		t.Logf("Open of another application's database: %v", err)
	}
}

func TestCloseTwice(t *testing.T) {
	s := openStore(t, pgtest.DSN(t))
	if err := s.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.GetSession(context.Background(), "x"); err == nil {
		t.Fatal("GetSession after Close succeeded")
	}
}

// TestPayloadFormat checks what lands in the tables: the same bytes the
// SQLite engine stores, so a row means the same in both (long entries
// and event batches as zlib streams of the protobuf, short ones plain).
func TestPayloadFormat(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := newStore(t, dsn)
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	entries := transcriptgen.Transcript(7, 2)
	long := &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{
		User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: strings.Repeat("a long tool output line\n", 400)}}}}},
	}}}}
	entries = append(entries, long)
	if err := s.Append(ctx, sess.ID, entries...); err != nil {
		t.Fatal(err)
	}
	if err := s.StartRun(ctx, sess.ID, "r1", nil); err != nil {
		t.Fatal(err)
	}
	var events []persistence.Event
	for seq := uint64(1); seq <= 200; seq++ {
		events = append(events, persistence.Event{Seq: seq, Data: []byte(fmt.Sprintf("session %s run r1 event %d", sess.ID, seq))})
	}
	if err := s.AppendEvents(ctx, "r1", events); err != nil {
		t.Fatal(err)
	}

	raw := rawConn(t, dsn)
	inflate := func(encoding int16, stored []byte) []byte {
		t.Helper()
		if encoding == 0 {
			return stored
		}
		zr, err := zlib.NewReader(bytes.NewReader(stored))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		return plain
	}
	rows, err := raw.Query(ctx, `SELECT id, kind, preview, encoding, payload FROM entries ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var encodings []int16
	i := 0
	for rows.Next() {
		var id, kind, preview string
		var encoding int16
		var payload []byte
		if err := rows.Scan(&id, &kind, &preview, &encoding, &payload); err != nil {
			t.Fatal(err)
		}
		var e agentdv1.Entry
		if err := proto.Unmarshal(inflate(encoding, payload), &e); err != nil || !proto.Equal(&e, entries[i]) {
			t.Fatalf("row %d does not hold the entry: %v", i, err)
		}
		wantKind, _ := persistence.EntryKind(entries[i])
		if id != entries[i].Id || kind != wantKind || preview != persistence.Preview(entries[i]) {
			t.Fatalf("row %d: id %q kind %q preview %q", i, id, kind, preview)
		}
		encodings = append(encodings, encoding)
		i++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(encodings, []int16{0, 0, 1}) {
		t.Fatalf("entry encodings %v, want [0 0 1]", encodings)
	}
	var encoding int16
	var payload []byte
	if err := raw.QueryRow(ctx, `SELECT encoding, payload FROM run_events WHERE run_id = 'r1'`).Scan(&encoding, &payload); err != nil {
		t.Fatal(err)
	}
	plain := inflate(encoding, payload)
	for _, ev := range events {
		data, n := protowire.ConsumeBytes(plain)
		if n < 0 || !bytes.Equal(data, ev.Data) {
			t.Fatalf("event %d is not next in the batch", ev.Seq)
		}
		plain = plain[n:]
	}
	if encoding != 1 || len(plain) != 0 {
		t.Fatalf("batch encoding %d with %d bytes left over; want a zlib stream of exactly the events", encoding, len(plain))
	}
}
