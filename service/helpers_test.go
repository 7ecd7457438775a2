package service_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/persistence/sqlite"
	"github.com/agentd/agentd/service"
)

// openStore opens a SQLite store in a fresh file, closed when the test ends.
func openStore(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newService returns a service over a fresh SQLite file.
func newService(t *testing.T) *service.Service {
	t.Helper()
	st := openStore(t, filepath.Join(t.TempDir(), "agentd.db"))
	a, err := agent.New(context.Background(), st, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return service.New(st, a, service.Options{})
}
