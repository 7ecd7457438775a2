package daemon_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestLayering keeps the dependency one way: the assembly (daemon)
// imports the layers, and no layer imports the assembly. Package
// service's external tests (package service_test) may start agentd
// through daemon; the package and its internal tests may not. Package
// metrics stays a leaf the layers do not need: it imports none of them.
func TestLayering(t *testing.T) {
	const mod = "github.com/agentd/agentd/"
	check := func(dir string, forbidden []string, tests bool) {
		t.Helper()
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("read the package in %s: %v", dir, err)
		}
		imports := pkg.Imports
		if tests {
			imports = append(imports, pkg.TestImports...)
		}
		for _, imp := range imports {
			for _, f := range forbidden {
				if imp == f || strings.HasPrefix(imp, f+"/") {
					t.Errorf("package %s imports %s", pkg.ImportPath, imp)
				}
			}
		}
	}
	for _, dir := range []string{"../service", "../agent", "../agentloop", "../persistence", "../persistence/sqlite", "../persistence/postgres", "../persistence/memory"} {
		check(dir, []string{mod + "daemon"}, true)
	}
	check("../metrics", []string{mod + "daemon", mod + "service", mod + "agent", mod + "persistence"}, false)
}
