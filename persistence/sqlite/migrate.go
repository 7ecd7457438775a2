package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// freshSchema is what the migrations, applied in order to an empty file,
// leave in sqlite_schema, as one script: a new database gets it in one
// step, ~2 ms instead of ~10 for the eleven migrations' table rebuilds,
// each of which makes SQLite parse the schema again. The migrations stay
// the definition: TestFreshSchemaIsTheMigrations fails when this script
// says anything else, and `go test -run TestFreshSchemaIsTheMigrations
// -update-schema` rewrites it from them.
//
//go:embed schema.sql
var freshSchema string

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
		return nil, err
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
			return nil, err
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

// SchemaVersion is the schema version this build creates and understands.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// migrate applies pending migrations in one immediate transaction, so a
// crash mid-migration leaves the previous version intact. It always writes
// (user_version), which makes a read-only or locked file fail here, at
// start-up, rather than on the first request.
func migrate(ctx context.Context, conn *sql.Conn, dbPath string) (err error) {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil) // BEGIN IMMEDIATE (see dsn)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var version, appID int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return err
	}
	if appID != 0 && appID != applicationID {
		return fmt.Errorf("the file is an SQLite database of another application (application_id %#x), not agentd's", appID)
	}
	if version > len(ms) {
		return &SchemaVersionError{Path: dbPath, Found: version, Supported: len(ms)}
	}
	if version == 0 {
		var tables int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'").Scan(&tables); err != nil {
			return err
		}
		if tables > 0 {
			return fmt.Errorf("the file already holds %d tables but no agentd schema version; refusing to add agentd's tables to another database", tables)
		}
	}
	if version == 0 {
		if _, err := tx.ExecContext(ctx, freshSchema); err != nil {
			return fmt.Errorf("create the schema (schema.sql): %w", err)
		}
	} else {
		for _, m := range ms[version:] {
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.name, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d", applicationID)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(ms))); err != nil {
		return err
	}
	return tx.Commit()
}
