package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/internal/rowcodec"
)

// Option changes how Open configures the store.
type Option func(*options)

type options struct {
	maxConns    int32
	logger      *slog.Logger
	onNotifyLag func(time.Duration)
	now         func() time.Time
}

// WithMaxConns bounds the connection pool; 0 (the default) keeps
// pgxpool's default. The listener of Watch uses one more connection of
// its own.
func WithMaxConns(n int32) Option {
	return func(o *options) { o.maxConns = n }
}

// WithLogger sets where the listener's connection problems are reported;
// default (and nil) nowhere.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithNotifyLag sets a function called with the delay between the
// sending of each NOTIFY (the sender's clock_timestamp(), carried in the
// payload) and its receipt by this Store: a measure of how late watchers
// wake. It runs on the listener's goroutine and must return quickly.
// Default none.
func WithNotifyLag(fn func(time.Duration)) Option {
	return func(o *options) { o.onNotifyLag = fn }
}

// WithClock sets the clock of the times the Store interface fills
// (session, entry and run times); default time.Now. Lease times never
// use it: they are the database's clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// Store is the PostgreSQL [persistence.Shared]. Safe for concurrent use.
//
// The methods live in one file per role: sessions.go, entries.go,
// runs.go, events.go, shared.go (claims, fences, controls) and
// listen.go (Watch).
type Store struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	log    *slog.Logger
	schema int

	// encoders compress payloads on their callers' goroutines
	// (*rowcodec.Encoder).
	encoders sync.Pool

	listener *listener
	notifier *notifier

	closeOnce sync.Once
}

var _ persistence.Shared = (*Store)(nil)

// notifyChannel is the one channel every wake-up of every topic travels
// on; the payload names the topic (see listen.go).
const notifyChannel = "agentd"

// migrationLockKey is the pg_advisory_xact_lock key that serializes
// migrations of replicas starting at once ("agentdmg").
const migrationLockKey = 0x6167656e74646d67

//go:embed migrations/*.sql
var migrationFiles embed.FS

// SchemaVersionError refuses a database whose schema is newer than this
// build knows, because writing it with the old schema could lose data.
type SchemaVersionError struct {
	// Found is the database's schema version.
	Found int
	// Supported is the newest version this build knows.
	Supported int
}

// Error says what to do.
func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("the database's schema version %d is newer than this agentd supports (%d); upgrade agentd", e.Found, e.Supported)
}

// Open connects to the database at dsn (a postgres:// URL or key=value
// string, as pgx parses it), applies pending migrations and starts the
// listener of Watch. It fails when the database is unreachable, its
// schema is newer than this build, or it holds tables of another
// application.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	o := options{now: time.Now, logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: parse dsn: %w", err)
	}
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	}
	where := cfg.ConnConfig.Host + "/" + cfg.ConnConfig.Database
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	s := &Store{pool: pool, now: o.now, log: o.logger}
	if s.schema, err = s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	s.listener = newListener(cfg.ConnConfig.Copy(), s.log, o.onNotifyLag)
	if err := s.listener.start(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: listen for notifications: %w", where, err)
	}
	s.notifier = newNotifier(pool, s.log)
	return s, nil
}

// SchemaVersion is the database's schema version, which is this build's
// newest after Open.
func (s *Store) SchemaVersion() int { return s.schema }

// migration is one numbered schema step.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the embedded migrations, which must be numbered
// 1, 2, 3, ... without gaps (NNNN_name.sql).
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var ms []migration
	for _, name := range names {
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %s: name must start with a version number and '_'", base)
		}
		body, err := migrationFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, err)
		}
		ms = append(ms, migration{version: v, name: base, sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %d", m.name, i+1)
		}
	}
	return ms, nil
}

// migrate applies pending migrations in one transaction under an advisory
// lock, so replicas starting at once apply each migration once and a
// failure leaves the previous version intact. It returns the schema
// version.
func (s *Store) migrate(ctx context.Context) (int, error) {
	ms, err := loadMigrations()
	if err != nil {
		return 0, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLockKey)); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
			return fmt.Errorf("look for schema_migrations: %w", err)
		}
		version := 0
		if exists {
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&version); err != nil {
				return fmt.Errorf("read the schema version: %w", err)
			}
		} else {
			// Refuse to add agentd's tables to some other application's
			// schema.
			var tables int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&tables); err != nil {
				return fmt.Errorf("count tables: %w", err)
			}
			if tables > 0 {
				return fmt.Errorf("the schema already holds %d tables but no agentd schema_migrations; refusing to add agentd's tables to another database", tables)
			}
			// schema_migrations: one row per applied migration (its
			// version, file name and when it was applied); the schema
			// version is the highest. Created here rather than by a
			// migration because it says which migrations ran.
			if _, err := tx.Exec(ctx, `CREATE TABLE schema_migrations (
				version    integer     PRIMARY KEY,
				name       text        NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
				return fmt.Errorf("create schema_migrations: %w", err)
			}
		}
		if version > len(ms) {
			return &SchemaVersionError{Found: version, Supported: len(ms)}
		}
		for _, m := range ms[version:] {
			// Without arguments pgx uses the simple protocol, which runs
			// a file of several statements.
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return fmt.Errorf("record migration %s: %w", m.name, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	return len(ms), nil
}

// Close stops the listener and closes the pool's connections; it waits
// for connections in use to be released. Closing again does nothing;
// other calls after Close fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.notifier.stop()
		s.listener.stop()
		s.pool.Close()
	})
	return nil
}

// Ping implements [persistence.Shared].
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	return nil
}

// timeNow is the Store's clock at the precision of timestamptz, so a time
// returned by a write equals the one read back.
func (s *Store) timeNow() time.Time {
	return s.now().Truncate(time.Microsecond)
}

// write runs fn in a read-committed transaction and commits it unless fn
// fails. Row locks taken by fn (FOR UPDATE and friends) order concurrent
// writers, in this process and others.
func (s *Store) write(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// read runs fn in a read-only repeatable-read transaction, so all its
// queries see one snapshot.
func (s *Store) read(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// encoder takes a payload encoder from the pool; release gives it back.
func (s *Store) encoder() (enc *rowcodec.Encoder, release func()) {
	enc, _ = s.encoders.Get().(*rowcodec.Encoder)
	if enc == nil {
		enc = &rowcodec.Encoder{}
	}
	return enc, func() {
		enc.Trim()
		s.encoders.Put(enc)
	}
}

// opError wraps an error with the operation that failed, unless it is one
// of the store's typed errors, which name what they are about already.
func opError(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var pe *persistence.Error
	var ce *persistence.CorruptEntryError
	var ae *persistence.ActiveRunError
	if errors.As(err, &pe) || errors.As(err, &ce) || errors.As(err, &ae) {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// uniqueViolation returns the constraint (index) name when err is a
// unique violation, and "" otherwise.
func uniqueViolation(err error) (string, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return pe.ConstraintName, true
	}
	return "", false
}
