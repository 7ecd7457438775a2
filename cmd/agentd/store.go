package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
)

// openStore opens (creating if needed) the SQLite database at path and
// checks that it is writable, so a bad --db fails at start-up rather than on
// the first request.
func openStore(ctx context.Context, path string) (*sql.DB, error) {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", "5000")
	db, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	// Taking the write lock once proves the file and its directory are
	// writable and not locked by another process.
	if _, err := db.ExecContext(ctx, "BEGIN IMMEDIATE; ROLLBACK"); err != nil {
		db.Close()
		return nil, fmt.Errorf("open database %s (is the file and its directory writable, and no other agentd using it?): %w", path, err)
	}
	return db, nil
}
