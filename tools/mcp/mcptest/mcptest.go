// Package mcptest gives tests the real MCP servers the project pins in its
// package-lock.json (installed into node_modules by `make tools`), run with
// node over stdio.
package mcptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/tools/mcp"
)

// Everything returns the configuration of @modelcontextprotocol/server-everything
// over stdio. Without node or the package the test is skipped with a
// message, except in CI (CI=true), where that is a failure.
func Everything(t testing.TB) *mcp.ServerConfig {
	t.Helper()
	return &mcp.ServerConfig{Command: node(t), Args: []string{script(t, "server-everything", "dist/index.js"), "stdio"}}
}

// Filesystem returns the configuration of @modelcontextprotocol/server-filesystem
// over stdio, allowed to work in dir. Skipped as Everything.
func Filesystem(t testing.TB, dir string) *mcp.ServerConfig {
	t.Helper()
	return &mcp.ServerConfig{Command: node(t), Args: []string{script(t, "server-filesystem", "dist/index.js"), dir}}
}

func node(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node is not installed")
	}
	return path
}

// script finds a package's file in the repository's node_modules.
func script(t testing.TB, pkg, file string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("mcptest: no go.mod above the test's directory")
		}
		dir = parent
	}
	path := filepath.Join(dir, "node_modules", "@modelcontextprotocol", pkg, file)
	if _, err := os.Stat(path); err != nil {
		missing(t, "@modelcontextprotocol/"+pkg+" is not installed (run `make tools`)")
	}
	return path
}

func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("mcptest: %s, and CI=true needs the real MCP servers", why)
	}
	t.Skipf("mcptest: %s; skipping the MCP server tests", why)
}
