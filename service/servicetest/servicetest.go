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
	"github.com/agentd/agentd/daemon"
)

// Start serves agentd for t and returns its address.
func Start(t testing.TB, opts agent.Options) string {
	t.Helper()
	d, err := daemon.New(context.Background(), filepath.Join(t.TempDir(), "agentd.db"), daemon.WithAgentOptions(opts))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = d.Shutdown(context.Background())
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String()
}
