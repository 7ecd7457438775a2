// Package pgtest gives tests a brand-new, empty PostgreSQL database each.
//
// The server is the one named by the admin DSN in AGENTD_TEST_POSTGRES
// (default DefaultAdminDSN), whose role must be allowed to create
// databases. Without a reachable server the tests are skipped, unless CI
// is "true", where they fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultAdminDSN is the admin DSN used when AGENTD_TEST_POSTGRES is not
// set: a local server as the project's development setup runs it.
const DefaultAdminDSN = "postgres://agentd:agentd@127.0.0.1:5432/agentd?sslmode=disable"

// EnvAdminDSN names the environment variable holding the admin DSN.
const EnvAdminDSN = "AGENTD_TEST_POSTGRES"

// connectTimeout bounds how long a test waits for the server before
// deciding it is not there.
const connectTimeout = 5 * time.Second

// AdminDSN returns the admin DSN the tests use.
func AdminDSN() string {
	if dsn := os.Getenv(EnvAdminDSN); dsn != "" {
		return dsn
	}
	return DefaultAdminDSN
}

// DSN creates a database with a unique name and returns its DSN; the
// database is dropped (with any connections left to it) when the test
// ends. It skips the test when the server is unreachable, or fails it
// when CI=true.
func DSN(t testing.TB) string {
	t.Helper()
	admin := AdminDSN()
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		msg := "PostgreSQL is not reachable at " + EnvAdminDSN + "=" + redact(admin) + ": " + err.Error() +
			"\nstart one: ./.ci/postgres (as root) installs and starts Debian's with the default role and database" +
			"\nor point " + EnvAdminDSN + " at a server whose role may CREATE DATABASE"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	defer conn.Close(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24).
	name := "agentd_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// withDatabase returns dsn naming database name instead of its own, for
// URLs (postgres://...) and key=value strings alike.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	// key=value: a later dbname wins.
	return dsn + " dbname=" + name, nil
}

// redact hides the password of a URL DSN in messages.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		return u.Redacted()
	}
	return dsn
}
