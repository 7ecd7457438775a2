package agent_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestLayering keeps the run machinery free of transports and SQL: the
// agent and the loop under it import no gRPC package and no SQL driver, so
// the gRPC layer and the store engines stay replaceable, and neither the
// assembly (daemon) nor the Prometheus metrics (metrics), which build on
// them. (The generated message package carries the gRPC stubs beside the
// types; that one is allowed.)
func TestLayering(t *testing.T) {
	forbidden := []string{"google.golang.org/grpc", "database/sql", "github.com/mattn/go-sqlite3", "github.com/agentd/agentd/service", "github.com/agentd/agentd/persistence/sqlite", "github.com/agentd/agentd/daemon", "github.com/agentd/agentd/metrics"}
	for _, dir := range []string{".", "../agentloop"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("read the package in %s: %v", dir, err)
		}
		for _, imp := range append(pkg.Imports, pkg.TestImports...) {
			for _, f := range forbidden {
				if imp == f || strings.HasPrefix(imp, f+"/") {
					t.Errorf("package %s imports %s", pkg.ImportPath, imp)
				}
			}
		}
	}
}
