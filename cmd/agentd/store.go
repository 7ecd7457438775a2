package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/postgres"
	"github.com/agentd/agentd/persistence/sqlite"
)

// openedStore is the store --db names, with what the rest of agentd needs
// to know about it.
type openedStore struct {
	store         persistence.Store
	schemaVersion int
	// name is --db for logs, without a password.
	name string
	// replica is the replica id on a shared store; empty otherwise.
	replica string
	// probe checks that the database is reachable; nil for an embedded
	// one.
	probe func(context.Context) error
}

// isPostgres reports whether --db names a PostgreSQL database.
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// openStore opens the SQLite file or the PostgreSQL database --db names.
func openStore(ctx context.Context, cfg config, logger *slog.Logger, metrics *metrics.Metrics) (*openedStore, error) {
	if isPostgres(cfg.dbPath) {
		name := cfg.dbPath
		if u, err := url.Parse(cfg.dbPath); err == nil {
			name = u.Redacted()
		}
		s, err := postgres.Open(ctx, cfg.dbPath, postgres.Options{
			MaxConns:    int32(cfg.dbMaxConns),
			Logger:      logger,
			OnNotifyLag: metrics.NotifyLag,
		})
		if err != nil {
			return nil, fmt.Errorf("open PostgreSQL database %s (--db): %w", name, err)
		}
		return &openedStore{store: s, schemaVersion: s.SchemaVersion(), name: name, replica: cfg.replicaID, probe: s.Ping}, nil
	}
	opts := []sqlite.Option{sqlite.WithLogger(logger)}
	if cfg.syncFull {
		opts = append(opts, sqlite.WithSynchronous(sqlite.SyncFull))
	}
	if cfg.plainPayloads {
		opts = append(opts, sqlite.WithPayloadCompression(false))
	}
	s, err := sqlite.Open(ctx, cfg.dbPath, opts...)
	if err != nil {
		return nil, err
	}
	return &openedStore{store: s, schemaVersion: sqlite.SchemaVersion(), name: cfg.dbPath}, nil
}

// defaultReplicaID is the host name and the process id: unique among the
// processes that run at once.
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "agentd"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}
