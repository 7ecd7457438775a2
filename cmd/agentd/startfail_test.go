package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A start that cannot serve fails before it opens the store: no database
// file is created (and migrated) for an agentd that never ran.
func TestFailedStartCreatesNoDatabase(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"gRPC port taken", []string{"--listen", taken.Addr().String()}, "already in use"},
		{"metrics port taken", []string{"--listen", "127.0.0.1:0", "--metrics-listen", taken.Addr().String()}, "--metrics-listen"},
		{"bad models config", []string{"--listen", "127.0.0.1:0", "--models-config", "/no/such/models.json"}, "--models-config"},
		{"bad log format", []string{"--listen", "127.0.0.1:0", "--log-format", "xml"}, "--log-format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "agentd.db")
			err := run(context.Background(), append(tt.args, "--db", db), env(nil), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("run = %v, want an error naming %q", err, tt.wantErr)
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Fatalf("the failed start left %s behind (stat: %v)", db, err)
			}
		})
	}
}
