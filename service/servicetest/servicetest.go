// Package servicetest starts a real agentd for the tests of its clients:
// the agent over a SQLite file, served over gRPC on a free loopback port,
// stopped when the test ends.
package servicetest

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/persistence/sqlite"
	"github.com/agentd/agentd/service"
)

// Start serves agentd for t and returns its address.
func Start(t testing.TB, opts agent.Options) string {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agentd.db"))
	if err != nil {
		t.Fatal(err)
	}
	if opts.SchemaVersion == 0 {
		opts.SchemaVersion = sqlite.SchemaVersion()
	}
	a, err := agent.New(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := service.NewServer(service.New(st, a, service.Options{}), service.ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("agent close: %v", err)
		}
		srv.Shutdown(ctx)
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("store close: %v", err)
		}
	})
	return lis.Addr().String()
}
