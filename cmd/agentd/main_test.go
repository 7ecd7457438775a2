package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if code == 0 {
		// The Gemini SDK's dependencies start an opencensus worker at load.
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestParseConfigFlagsWinOverEnvironment(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		wantListen string
		wantDB     string
	}{
		{"defaults", nil, nil, "127.0.0.1:7777", "./agentd.db"},
		{"environment", nil, map[string]string{"AGENTD_LISTEN": "127.0.0.1:9000", "AGENTD_DB": "/tmp/x.db"}, "127.0.0.1:9000", "/tmp/x.db"},
		{"flags", []string{"--listen", "unix:///tmp/a.sock", "--db", "b.db"}, nil, "unix:///tmp/a.sock", "b.db"},
		{"flags win", []string{"--listen=0.0.0.0:1", "--db=f.db"}, map[string]string{"AGENTD_LISTEN": "127.0.0.1:9000", "AGENTD_DB": "e.db"}, "0.0.0.0:1", "f.db"},
		{"one flag, one variable", []string{"--db", "f.db"}, map[string]string{"AGENTD_LISTEN": "127.0.0.1:9000", "AGENTD_DB": "e.db"}, "127.0.0.1:9000", "f.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseConfig(tt.args, env(tt.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.listen != tt.wantListen || cfg.dbPath != tt.wantDB {
				t.Errorf("listen, db = %q, %q; want %q, %q", cfg.listen, cfg.dbPath, tt.wantListen, tt.wantDB)
			}
		})
	}
}

func TestParseConfigRejectsBadInput(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"serve"}, `unexpected argument "serve"`},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--db", ""}, "--db is empty"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"--http-listen", "8080"}, "--http-listen \"8080\": want host:port"},
		{[]string{"--cors-origins", "http://a.example"}, "--cors-origins needs --http-listen"},
		{[]string{"--http-listen", "127.0.0.1:0", "--cors-origins", "app.example"}, `origin "app.example": want scheme://host[:port]`},
		{[]string{"--http-listen", "127.0.0.1:0", "--cors-origins", "http://a.example/path"}, `origin "http://a.example/path"`},
		{[]string{"--ui"}, "--ui needs --http-listen"},
		{[]string{"--context-cache-mib", "-1"}, "--context-cache-mib -1: want 0 (no cache) to"},
		{[]string{"--context-cache-mib", "2000000"}, "--context-cache-mib 2000000"},
		{[]string{"--http-listen", "127.0.0.1:0", "--ui=maybe"}, "-ui: want true or false"},
	}
	for _, tt := range tests {
		_, err := parseConfig(tt.args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("parseConfig(%q) = %v, want an error mentioning %q", tt.args, err, tt.wantErr)
		}
	}
}

func TestListenRefusesAPortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = listen(taken.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "already in use") || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("listen on a taken port = %v, want a clear 'already in use' error naming --listen", err)
	}
}

func TestListenUnixRemovesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.sock")
	first, err := listen("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	// A killed agentd leaves its socket file behind.
	first.(*net.UnixListener).SetUnlinkOnClose(false)
	first.Close()
	second, err := listen("unix://" + path)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	second.Close()
	if _, err := listen("unix://"); err == nil {
		t.Error("listen(unix://) with no path succeeded")
	}
}

func TestRunServesHealthOnUnixSocketAndStopsOnCancel(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agentd.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "unix://" + sock, "--db", filepath.Join(dir, "a.db")}, env(nil), io.Discard)
	}()

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	checkCtx, checkCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer checkCancel()
	resp, err := healthpb.NewHealthClient(conn).Check(checkCtx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, want SERVING", resp.GetStatus())
	}
	if _, err := os.Stat(filepath.Join(dir, "a.db")); err != nil {
		t.Errorf("database file not created: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after cancel", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
	}
}

func TestRunFailsClearlyOnUnwritableDatabase(t *testing.T) {
	err := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "missing", "dir", "a.db")}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "open database") {
		t.Fatalf("run with a database in a missing directory = %v, want an 'open database' error", err)
	}
}

// lockedBuffer collects run's log output from its goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRunServesPrometheusMetrics(t *testing.T) {
	dir := t.TempDir()
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "unix://" + filepath.Join(dir, "s.sock"), "--db", filepath.Join(dir, "a.db"),
			"--metrics-listen", "127.0.0.1:0"}, env(nil), logs)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	addrRE := regexp.MustCompile(`msg="metrics serving" addr=(\S+)`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := addrRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("no metrics address logged:\n%s", logs.String())
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"agentd_active_runs 0", "agentd_events_sent_total 0", "agentd_context_cache_bytes 0", "grpc_server_handled_total", "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// The console is served by default only on a loopback HTTP listener; --ui
// and --ui=false (or AGENTD_UI) decide otherwise.
func TestUIDefaultsToLoopback(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{[]string{}, nil, false},
		{[]string{"--http-listen", "127.0.0.1:0"}, nil, true},
		{[]string{"--http-listen", "[::1]:0"}, nil, true},
		{[]string{"--http-listen", "localhost:0"}, nil, true},
		{[]string{"--http-listen", "0.0.0.0:8080"}, nil, false},
		{[]string{"--http-listen", ":8080"}, nil, false},
		{[]string{"--http-listen", "10.1.2.3:8080"}, nil, false},
		{[]string{"--http-listen", "0.0.0.0:8080", "--ui"}, nil, true},
		{[]string{"--http-listen", "127.0.0.1:0", "--ui=false"}, nil, false},
		{[]string{"--http-listen", "0.0.0.0:8080"}, map[string]string{"AGENTD_UI": "true"}, true},
		{[]string{"--http-listen", "127.0.0.1:0"}, map[string]string{"AGENTD_UI": "false"}, false},
		{[]string{"--http-listen", "127.0.0.1:0", "--ui"}, map[string]string{"AGENTD_UI": "false"}, true},
	}
	for _, tt := range tests {
		cfg, err := parseConfig(tt.args, env(tt.env), io.Discard)
		if err != nil {
			t.Fatalf("parseConfig(%q, %v): %v", tt.args, tt.env, err)
		}
		if cfg.web.serveUI != tt.want {
			t.Errorf("parseConfig(%q, %v): serve the console = %v, want %v", tt.args, tt.env, cfg.web.serveUI, tt.want)
		}
	}
	if _, err := parseConfig([]string{"--http-listen", "127.0.0.1:0"}, env(map[string]string{"AGENTD_UI": "sometimes"}), io.Discard); err == nil || !strings.Contains(err.Error(), "AGENTD_UI") {
		t.Errorf("AGENTD_UI=sometimes: %v, want an error naming AGENTD_UI", err)
	}
}
