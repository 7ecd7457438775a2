package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Synchronous is SQLite's commit durability setting.
type Synchronous int

const (
	// SyncNormal does not fsync on commit in WAL mode: nothing committed is
	// lost when the process dies; a power loss may drop the latest commits
	// but never corrupts the database. The default.
	SyncNormal Synchronous = iota
	// SyncFull fsyncs the WAL on every commit, so a commit survives a power
	// loss too, at the price of one fsync per append.
	SyncFull
)

func (s Synchronous) pragma() string {
	if s == SyncFull {
		return "FULL"
	}
	return "NORMAL"
}

// Defaults used when Open gets no option for them.
const (
	// DefaultBusyTimeout is how long a statement waits for a lock held by
	// another connection or process before failing.
	DefaultBusyTimeout = 5 * time.Second
	// pageSize is the page size of new databases. SQLite's default; every
	// commit writes whole pages to the WAL, so larger pages make appends
	// slower (8 KiB: ~59 instead of ~43 µs per append uncompressed; 16 KiB
	// about twice the time) for little space (with compressed tool
	// results, 8 KiB measured 0.66-0.71 instead of 0.71-0.75 of the JSONL
	// size). 2 KiB pages were larger on disk (0.76-0.79).
	pageSize = 4096
	// checkpointEvery is how many commits pass between background
	// checkpoints: about 1000 WAL pages for typical appends, SQLite's own
	// default.
	checkpointEvery = 256
	// DefaultWALSizeLimit is the WAL size past which checkpoints try to
	// empty it, and the size SQLite cuts the file back to when the WAL
	// starts over (journal_size_limit).
	DefaultWALSizeLimit = 64 << 20
	// backstopCheckpointPages lets the writer checkpoint by itself (SQLite's
	// auto-checkpoint) only if the WAL grows past 32 MiB anyway, for
	// example while a long read pins old pages.
	backstopCheckpointPages = 8192
	// applicationID marks the file as an agentd database ("agnd"), so Open
	// refuses some other program's SQLite file instead of adding tables to
	// it.
	applicationID = 0x61676e64
)

// ErrLocked means another connection or process held the database lock for
// longer than the busy timeout while Open needed it; typically a second
// agentd using the same file.
var ErrLocked = errors.New("database is locked by another process")

// ErrReadOnly means the database file or its directory is not writable.
// agentd needs to write both (WAL mode keeps -wal and -shm files beside the
// database).
var ErrReadOnly = errors.New("database is not writable")

// SchemaVersionError refuses a database whose schema is newer than this
// build knows, because reading it with the old schema could lose data.
type SchemaVersionError struct {
	// Path is the database file.
	Path string
	// Found is the version recorded in the file.
	Found int
	// Supported is the newest version this build knows.
	Supported int
}

// Error names both versions and what to do.
func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("database %s: schema version %d is newer than this agentd supports (%d); upgrade agentd", e.Path, e.Found, e.Supported)
}

// Option changes how Open configures the store.
type Option func(*options)

type options struct {
	synchronous Synchronous
	busyTimeout time.Duration
	readers     int
	compress    bool
	walLimit    int64
	logger      *slog.Logger
	// memoryIdle is MemoryIdle, or shorter in this package's tests.
	memoryIdle time.Duration
}

// WithSynchronous selects commit durability; see SyncNormal and SyncFull.
func WithSynchronous(s Synchronous) Option {
	return func(o *options) { o.synchronous = s }
}

// WithBusyTimeout sets how long statements wait for another connection's or
// process's lock; also how long Open waits before failing with ErrLocked.
func WithBusyTimeout(d time.Duration) Option {
	return func(o *options) { o.busyTimeout = d }
}

// WithPayloadCompression turns compression of new long entries (see the
// package doc) on or off; it is on by default. Off trades about 0.3x the
// transcript's JSONL size on disk for faster appends and loads (measured
// with 10,000 messages: ~4 µs less per append, a path load ~56 ms instead
// of ~71 ms). Entries already stored are read either way.
func WithPayloadCompression(on bool) Option {
	return func(o *options) { o.compress = on }
}

// WithWALSizeLimit sets the size of the WAL file past which background
// checkpoints try to empty it (default DefaultWALSizeLimit); see
// Store.checkpoint for the policy.
func WithWALSizeLimit(bytes int64) Option {
	return func(o *options) { o.walLimit = bytes }
}

// WithLogger sets where the store reports what an operator should know,
// such as a WAL held large by a reader; default nowhere.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithReaderPoolSize sets how many connections serve reads concurrently
// (default: the number of CPUs, at least 4).
func WithReaderPoolSize(n int) Option {
	return func(o *options) { o.readers = n }
}

// Open opens the database at path, creating it when missing, applies
// pending migrations and returns a ready store. It fails with a message fit
// for a start-up log when the directory is missing, the file or directory is
// read-only (ErrReadOnly), another process holds the lock (ErrLocked), the
// file is not an agentd database, or its schema is newer than this build
// (*SchemaVersionError). Open does no work proportional to the number of
// sessions. Close the store when done.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	o := options{synchronous: SyncNormal, busyTimeout: DefaultBusyTimeout, readers: max(4, runtime.NumCPU()), compress: true, memoryIdle: MemoryIdle,
		walLimit: DefaultWALSizeLimit, logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("open database %q: give the path of a database file", path)
	}
	if o.readers < 1 {
		return nil, fmt.Errorf("open database %s: reader pool size %d must be at least 1", path, o.readers)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	if fi, err := os.Stat(filepath.Dir(abs)); err != nil {
		return nil, fmt.Errorf("open database %s: directory %s: %w", path, filepath.Dir(abs), err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("open database %s: %s is not a directory", path, filepath.Dir(abs))
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("open database %s: is a directory, not a database file", path)
	}

	// A second agentd on the same file must not start: fail at once,
	// naming the process that has it, rather than after the busy timeout.
	owner, err := lockOwner(path, abs)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, path, abs, o)
	if err != nil {
		owner.release()
		return nil, err
	}
	s.owner = owner
	return s, nil
}

// open opens the store once this process owns the database.
func open(ctx context.Context, path, abs string, o options) (*Store, error) {
	writerDB := sql.OpenDB(connector{dsn: dsn(abs, o, false), pragmas: []string{
		// A backstop only: checkpoints normally run in the background (see
		// checkpointLoop), so appends do not pay for their fsyncs.
		fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", backstopCheckpointPages),
		// The writer touches the last pages of many sessions and runs; with
		// SQLite's default 2 MB cache it reads them back from the file
		// again and again (a pread each) under concurrent load.
		fmt.Sprintf("PRAGMA cache_size = -%d", writerCacheKiB),
		fmt.Sprintf("PRAGMA journal_size_limit = %d", o.walLimit),
		// What is deleted or overwritten (a redacted payload, a deleted
		// session, a pruned event log) is overwritten with zeros, not
		// left in free space.
		"PRAGMA secure_delete = ON",
	}})
	writerDB.SetMaxOpenConns(1)
	writerDB.SetMaxIdleConns(1)
	writerDB.SetConnMaxLifetime(0)
	writerDB.SetConnMaxIdleTime(0)
	writerConn, err := writerDB.Conn(ctx)
	if err == nil {
		err = initialize(ctx, writerConn, abs)
	}
	if err != nil {
		if writerConn != nil {
			writerConn.Close()
		}
		writerDB.Close()
		return nil, classify(path, abs, o, err)
	}

	// Readers map the database file into memory: loading a long transcript
	// then copies no pages through read() (a 10,000-message path loads in
	// ~49 ms instead of ~56), and readers keep no page caches of their own.
	// Pages still in the WAL are read as before. A mapping is remapped when
	// a checkpoint grows the file, which makes a point read after a write
	// slower (50 -> 230 us): the session records, read most, are cached instead
	// (records.go).
	reader := sql.OpenDB(connector{dsn: dsn(abs, o, true), pragmas: []string{fmt.Sprintf("PRAGMA mmap_size = %d", readerMmapBytes)}})
	reader.SetMaxOpenConns(o.readers)
	reader.SetMaxIdleConns(o.readers)
	reader.SetConnMaxLifetime(0)
	reader.SetConnMaxIdleTime(0)
	// Checkpoints copy the WAL back into the database file; they need a
	// connection of their own so they never wait for, or hold up, appends.
	// It never waits for locks: a checkpoint that cannot proceed now is
	// tried again later (Store.checkpoint).
	checkpointer := sql.OpenDB(connector{dsn: dsn(abs, o, false), pragmas: []string{"PRAGMA wal_autocheckpoint = 0", "PRAGMA busy_timeout = 0"}})
	checkpointer.SetMaxOpenConns(1)
	checkpointer.SetMaxIdleConns(1)
	checkpointer.SetConnMaxLifetime(0)
	checkpointer.SetConnMaxIdleTime(0)
	closeAll := func() {
		writerConn.Close()
		writerDB.Close()
		reader.Close()
		checkpointer.Close()
	}
	for _, db := range []*sql.DB{reader, checkpointer} {
		if err := db.PingContext(ctx); err != nil {
			closeAll()
			return nil, classify(path, abs, o, err)
		}
	}
	s, err := newStore(ctx, abs, o, newWriter(writerDB, writerConn, o.compress), reader, checkpointer)
	if err != nil {
		closeAll()
		return nil, classify(path, abs, o, err)
	}
	return s, nil
}

// dsn builds a go-sqlite3 URI. The path is percent-encoded so names with
// '?', '#' or '%' reach SQLite intact.
func dsn(abs string, o options, readOnly bool) string {
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(o.busyTimeout.Milliseconds(), 10))
	q.Set("_foreign_keys", "1")
	q.Set("_synchronous", o.synchronous.pragma())
	// database/sql already serializes use of each connection.
	q.Set("_mutex", "no")
	// SQLite's normal WAL locking: the owner's lock (lock.go) keeps a
	// second agentd out, and outside readers in any language read
	// consistent snapshots beside this process's writer.
	if readOnly {
		q.Set("_query_only", "1")
	} else {
		// Migrations take the write lock at BEGIN, so they fail at once on
		// a file they cannot write.
		q.Set("_txlock", "immediate")
	}
	u := url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}
	return u.String()
}

// writerCacheKiB is the writer connection's page cache. 16 MiB holds the
// last pages of a thousand streaming sessions and runs: at 64 MiB the
// writer used no less CPU under that load (33.8-42.1 us per event at 16,
// 35.6-35.9 at 64). The cache is emptied once the writer is idle
// (Store.releaseIdleMemory), so its size bounds memory under load only.
const writerCacheKiB = 16 << 10

// readerMmapBytes is how much of the database file each reader maps.
const readerMmapBytes = 256 << 20

// connector opens go-sqlite3 connections without registering a driver
// name (which would be process-global state).
type connector struct {
	dsn     string
	pragmas []string // run on every new connection
}

// Connect implements driver.Connector.
func (c connector) Connect(context.Context) (driver.Conn, error) {
	conn, err := (&sqlite3.SQLiteDriver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	for _, p := range c.pragmas {
		if _, err := conn.(*sqlite3.SQLiteConn).Exec(p, nil); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}

// Driver implements driver.Connector.
func (c connector) Driver() driver.Driver { return &sqlite3.SQLiteDriver{} }

// initialize switches a new or existing database to WAL, checks it is ours
// and applies migrations.
func initialize(ctx context.Context, conn *sql.Conn, path string) error {
	// page_size only takes effect while the file is still empty, so it must
	// come before the first write (which switching to WAL is).
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA page_size = %d", pageSize)); err != nil {
		return err
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("cannot switch to WAL mode (journal mode stays %q): %w", mode, ErrReadOnly)
	}
	return migrate(ctx, conn, path)
}

// classify turns low-level open errors into the ones an operator can act
// on.
func classify(path, abs string, o options, err error) error {
	var sv *SchemaVersionError
	if errors.As(err, &sv) {
		return err
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrBusy, sqlite3.ErrLocked:
			// No owner's lock, yet SQLite's lock is held: an agentd of an
			// earlier version, which held SQLite's exclusive lock instead,
			// or a program writing the file.
			if pid := sqliteLockHolder(abs); pid > 0 {
				return lockedBy(path, pid)
			}
			return fmt.Errorf("open database %s: %w (waited %v; is another program writing it?)", path, ErrLocked, o.busyTimeout)
		case sqlite3.ErrReadonly, sqlite3.ErrPerm:
			return fmt.Errorf("open database %s: %w: agentd needs write access to the file and its directory (for the -wal and -shm files): %v", path, ErrReadOnly, err)
		case sqlite3.ErrCantOpen:
			return fmt.Errorf("open database %s: %w: cannot create or open the file; is its directory writable? (%v)", path, ErrReadOnly, err)
		case sqlite3.ErrNotADB:
			return fmt.Errorf("open database %s: the file is not an SQLite database: %w", path, err)
		}
	}
	return fmt.Errorf("open database %s: %w", path, err)
}
