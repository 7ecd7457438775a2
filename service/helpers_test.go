package service_test

import (
	"context"
	"path/filepath"
	"testing"

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
func newService(t *testing.T, opts service.Options) *service.Service {
	t.Helper()
	svc, err := service.New(context.Background(), openStore(t, filepath.Join(t.TempDir(), "agentd.db")), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	return svc
}
