package daemon

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/postgres"
	"github.com/agentd/agentd/persistence/sqlite"
)

// Engine is a store engine.
type Engine string

// The store engines.
const (
	// SQLite keeps sessions in a database file that one agentd owns.
	SQLite Engine = "sqlite"
	// Postgres keeps sessions in a PostgreSQL database that several
	// agentd replicas share.
	Postgres Engine = "postgres"
)

// EngineOf reports the engine dsn names by its form: Postgres for a
// postgres:// or postgresql:// URL, SQLite (a file path) otherwise.
func EngineOf(dsn string) Engine {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return Postgres
	}
	return SQLite
}

// openedStore is an open store, with what the rest of the assembly needs
// to know about it.
type openedStore struct {
	store         persistence.Store
	schemaVersion int
	// name is the DSN for logs, without a password.
	name string
	// probe checks that the database is reachable; nil for an embedded
	// one.
	probe func(context.Context) error
}

// openStore opens the SQLite file or the PostgreSQL database dsn names.
func openStore(ctx context.Context, dsn string, o *options) (*openedStore, error) {
	switch o.engine {
	case Postgres:
		name := redactDSN(dsn)
		s, err := openPostgres(ctx, dsn, o)
		if err != nil {
			return nil, fmt.Errorf("open PostgreSQL database %s (--db): %w", name, err)
		}
		return &openedStore{store: s, schemaVersion: s.SchemaVersion(), name: name, probe: s.Ping}, nil
	case SQLite:
		var opts []sqlite.Option
		if o.logger != nil {
			opts = append(opts, sqlite.WithLogger(o.logger))
		}
		s, err := sqlite.Open(ctx, dsn, append(opts, o.sqlite...)...)
		if err != nil {
			return nil, err
		}
		return &openedStore{store: s, schemaVersion: sqlite.SchemaVersion(), name: dsn}, nil
	default:
		return nil, fmt.Errorf("unknown store engine %q: want %q or %q", o.engine, SQLite, Postgres)
	}
}

// openPostgres opens the PostgreSQL store with the options that concern
// it: the pool size, the logger and the notification-lag metric.
func openPostgres(ctx context.Context, dsn string, o *options) (*postgres.Store, error) {
	opts := []postgres.Option{postgres.WithMaxConns(int32(o.pgMaxConns)), postgres.WithLogger(o.logger)}
	if o.metrics != nil {
		opts = append(opts, postgres.WithNotifyLag(o.metrics.NotifyLag))
	}
	return postgres.Open(ctx, dsn, opts...)
}

// redactDSN is dsn without its password, for logs and errors: a URL
// without the password (one that does not parse as it is), or of a
// key=value string only its host, port, dbname and user.
func redactDSN(dsn string) string {
	if EngineOf(dsn) == Postgres {
		if u, err := url.Parse(dsn); err == nil {
			return u.Redacted()
		}
		return dsn
	}
	var kept []string
	for _, f := range strings.Fields(dsn) {
		key, _, _ := strings.Cut(f, "=")
		switch key {
		case "host", "port", "dbname", "user":
			kept = append(kept, f)
		}
	}
	return strings.Join(kept, " ")
}
