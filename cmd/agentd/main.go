// Command agentd serves the agentd.v1.AgentService over gRPC.
//
// Usage:
//
//	agentd --listen 127.0.0.1:7777 --db ./agentd.db
//
// AGENTD_LISTEN and AGENTD_DB are read when the flags are not given; flags
// win over environment variables. --listen accepts host:port or
// unix:///path/to/socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentd/agentd/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "agentd:", err)
		}
		os.Exit(1)
	}
}

// config is agentd's start-up configuration.
type config struct {
	listen        string
	dbPath        string
	logLevel      slog.Level
	logFormat     string
	shutdownGrace time.Duration
}

// parseConfig reads flags, falling back to environment variables for the
// values a flag did not set.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	envOr := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	var cfg config
	fs := flag.NewFlagSet("agentd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.listen, "listen", envOr("AGENTD_LISTEN", "127.0.0.1:7777"),
		"address to serve gRPC on: host:port or unix:///path (env AGENTD_LISTEN)")
	fs.StringVar(&cfg.dbPath, "db", envOr("AGENTD_DB", "./agentd.db"),
		"SQLite database file holding sessions and transcripts (env AGENTD_DB)")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.StringVar(&cfg.logFormat, "log-format", envOr("AGENTD_LOG_FORMAT", "text"), "log format: text or json (env AGENTD_LOG_FORMAT)")
	fs.DurationVar(&cfg.shutdownGrace, "shutdown-grace", service.ShutdownTimeout,
		"how long in-flight calls may take to finish on SIGINT/SIGTERM")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q: agentd takes only flags (see agentd -h)", fs.Arg(0))
	}
	if cfg.logFormat != "text" && cfg.logFormat != "json" {
		return config{}, fmt.Errorf("--log-format %q: want text or json", cfg.logFormat)
	}
	if cfg.dbPath == "" {
		return config{}, errors.New("--db is empty: give the path of the SQLite database file")
	}
	return cfg, nil
}

// run starts agentd and blocks until ctx is cancelled, then shuts down
// gracefully.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := newLogger(cfg, stderr)

	store, err := openStore(ctx, cfg.dbPath)
	if err != nil {
		return err
	}
	defer store.Close()

	lis, err := listen(cfg.listen)
	if err != nil {
		return err
	}
	srv := service.NewServer(logger, service.New())

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()
	logger.Info("agentd serving", "addr", listenAddr(lis), "db", cfg.dbPath)

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	logger.Info("agentd shutting down", "grace", cfg.shutdownGrace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.shutdownGrace)
	defer cancel()
	srv.Shutdown(shutdownCtx)
	if err := <-serveErr; err != nil {
		return err
	}
	logger.Info("agentd stopped")
	return nil
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.logLevel}
	if cfg.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// listen opens the listener for addr, which is host:port or unix:///path.
func listen(addr string) (net.Listener, error) {
	network, address := "tcp", addr
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		network, address = "unix", path
		if address == "" {
			return nil, fmt.Errorf("--listen %q: a unix socket address needs a path, as in unix:///run/agentd.sock", addr)
		}
		removeStaleSocket(address)
	}
	lis, err := net.Listen(network, address)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("cannot listen on %s: the address is already in use (is another agentd running?); choose another with --listen or AGENTD_LISTEN: %w", addr, err)
		}
		return nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	return lis, nil
}

// removeStaleSocket removes a unix socket file that no process listens on
// any more, left behind by an agentd that was killed.
func removeStaleSocket(path string) {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return
	}
	_ = os.Remove(path)
}

func listenAddr(lis net.Listener) string {
	if lis.Addr().Network() == "unix" {
		return "unix://" + lis.Addr().String()
	}
	return lis.Addr().String()
}
