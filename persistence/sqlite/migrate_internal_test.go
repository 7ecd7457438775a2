package sqlite

import (
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var updateSchema = flag.Bool("update-schema", false, "rewrite schema.sql from the migrations")

// schemaRows returns what sqlite_schema holds, one "type name on table:
// SQL" line per object, by name.
func schemaRows(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, name, table, text string
		if err := rows.Scan(&typ, &name, &table, &text); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s on %s: %s", typ, name, table, text))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// emptyDB opens a new database file with the plain driver.
func emptyDB(t *testing.T, name string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// generatedSchema is schema.sql as the migrations make it: every object
// they leave in sqlite_schema in the order they created it, but for what
// SQLite makes by itself (automatic indexes, sqlite_sequence).
func generatedSchema(t *testing.T, migrated *sql.DB, version int) string {
	t.Helper()
	rows, err := migrated.Query(`SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name != 'sqlite_sequence' ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	fmt.Fprintf(&b, `-- The schema a new agentd database gets at version %d, in one step: what
-- migrations/0001 to %04d leave in sqlite_schema, in the order they make it.
-- Generated, do not edit: change the migrations (add one) and run
--   go test ./persistence/sqlite -run TestFreshSchemaIsTheMigrations -update-schema
-- What tables and columns mean is written in the migrations.
`, version, version)
	for rows.Next() {
		var text string
		if err := rows.Scan(&text); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "\n%s;\n", text)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A new database's one-step schema (schema.sql, what migrate gives an
// empty file) is what the migrations, applied in order, make.
func TestFreshSchemaIsTheMigrations(t *testing.T) {
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	migrated := emptyDB(t, "migrated.db")
	for _, m := range ms {
		if _, err := migrated.Exec(m.sql); err != nil {
			t.Fatalf("migration %s: %v", m.name, err)
		}
	}
	want := generatedSchema(t, migrated, len(ms))
	if *updateSchema {
		if err := os.WriteFile("schema.sql", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, freshSchema); diff != "" {
		t.Fatalf("schema.sql is not what the migrations make (-migrations +schema.sql); run go test ./persistence/sqlite -run TestFreshSchemaIsTheMigrations -update-schema:\n%s", diff)
	}
	fresh := emptyDB(t, "fresh.db")
	if _, err := fresh.Exec(freshSchema); err != nil {
		t.Fatalf("schema.sql: %v", err)
	}
	if diff := cmp.Diff(schemaRows(t, migrated), schemaRows(t, fresh)); diff != "" {
		t.Fatalf("schema.sql makes another schema than the migrations (-migrations +schema.sql):\n%s", diff)
	}
}
