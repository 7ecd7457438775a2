// Command agentd serves the agentd.v1.AgentService over gRPC.
//
// Usage:
//
//	agentd --listen 127.0.0.1:7777 --db ./agentd.db
//	agentd export [--addr 127.0.0.1:7777] [--format agentd|pi] [-o FILE] SESSION_ID
//	agentd import [--addr 127.0.0.1:7777] FILE
//	agentd backup [--db ./agentd.db] --to OUT
//	agentd restore --from BACKUP [--db ./agentd.db]
//
// export and import talk to a running agentd: they write and read a
// session as length-delimited agentd.v1.SessionRecord messages, or as a pi
// session file (JSON lines). backup copies the SQLite database, also while
// an agentd serves it; restore puts a backup in place of a database no
// agentd serves.
//
// AGENTD_LISTEN and AGENTD_DB are read when the flags are not given; flags
// win over environment variables. --listen accepts host:port or
// unix:///path/to/socket.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/daemon"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/sqlite"
	"github.com/agentd/agentd/provider/catalog"
	"github.com/agentd/agentd/service"
	"github.com/agentd/agentd/service/console"
	"github.com/agentd/agentd/tools/mcp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		if errors.Is(err, errVersion) {
			fmt.Println("agentd", version)
			return
		}
		if errors.Is(err, flag.ErrHelp) {
			return // asked for help: not a failure
		}
		fmt.Fprintln(os.Stderr, "agentd:", err)
		os.Exit(1)
	}
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// errVersion ends a run that printed the version.
var errVersion = errors.New("version printed")

// config is agentd's start-up configuration.
type config struct {
	listen          string
	dbPath          string
	logLevel        slog.Level
	logFormat       string
	shutdownGrace   time.Duration
	authToken       string
	authConfig      string
	tlsClientCA     string
	tlsCert         string
	tlsKey          string
	metricsListen   string
	maxRuns         int
	contextCacheMiB int
	maxMessageBytes int
	syncFull        bool
	plainPayloads   bool
	modelsConfig    string
	mcpConfig       string
	otelTraces      bool
	otelContent     bool
	workspaceRoots  []string
	eventRetention  time.Duration
	retention       time.Duration
	replicaID       string
	lease           time.Duration
	dbMaxConns      int
	confine         confinement
	web             webConfig
}

// defaultReplicaID is the host name and the process id: unique among the
// processes that run at once.
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "agentd"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
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
	fs.Usage = func() {
		fmt.Fprint(stderr, "agentd runs LLM agent loops behind a gRPC API (agentd.v1.AgentService), storing every session in SQLite (one agentd) or PostgreSQL (several replicas).\n\n"+
			"usage: agentd [flags]\n       agentd export|import ... (agentd export -h)\n       agentd backup|restore ... (agentd backup -h)\n\nflags:\n")
		fs.PrintDefaults()
	}
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&cfg.listen, "listen", envOr("AGENTD_LISTEN", "127.0.0.1:7777"),
		"address to serve gRPC on: host:port or unix:///path (env AGENTD_LISTEN)")
	fs.StringVar(&cfg.dbPath, "db", envOr("AGENTD_DB", "./agentd.db"),
		"where sessions and transcripts live: a SQLite database file, or a postgres:// URL shared by several agentd replicas (env AGENTD_DB)")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.StringVar(&cfg.logFormat, "log-format", envOr("AGENTD_LOG_FORMAT", "text"), "log format: text or json (env AGENTD_LOG_FORMAT)")
	fs.DurationVar(&cfg.shutdownGrace, "shutdown-grace", service.ShutdownTimeout,
		"how long in-flight calls may take to finish on SIGINT/SIGTERM")
	fs.StringVar(&cfg.authToken, "auth-token", getenv("AGENTD_AUTH_TOKEN"),
		"require this bearer token on every AgentService call; empty disables auth (env AGENTD_AUTH_TOKEN)")
	fs.StringVar(&cfg.authConfig, "auth-config", getenv("AGENTD_AUTH_CONFIG"),
		"JSON file mapping credentials (SHA-256 of bearer tokens, client certificate subjects) to tenants and roles; each tenant sees only its sessions (env AGENTD_AUTH_CONFIG)")
	fs.StringVar(&cfg.tlsClientCA, "tls-client-ca", getenv("AGENTD_TLS_CLIENT_CA"),
		"PEM file of the CAs whose client certificates agentd verifies (mTLS), for --auth-config certificates; needs --tls-cert (env AGENTD_TLS_CLIENT_CA)")
	fs.StringVar(&cfg.tlsCert, "tls-cert", getenv("AGENTD_TLS_CERT"), "PEM certificate file; with --tls-key serves TLS (env AGENTD_TLS_CERT)")
	fs.StringVar(&cfg.tlsKey, "tls-key", getenv("AGENTD_TLS_KEY"), "PEM private key file for --tls-cert (env AGENTD_TLS_KEY)")
	fs.StringVar(&cfg.metricsListen, "metrics-listen", getenv("AGENTD_METRICS_LISTEN"),
		"host:port to serve Prometheus metrics on at /metrics, and Go profiles at /debug/pprof/; empty disables (env AGENTD_METRICS_LISTEN)")
	fs.IntVar(&cfg.maxRuns, "max-runs", 1024, "most runs active at once; more Prompts get RESOURCE_EXHAUSTED")
	fs.IntVar(&cfg.contextCacheMiB, "context-cache-mib", agent.DefaultContextCacheBytes>>20,
		"MiB of context paths kept in memory for the sessions that ran last, so their next prompt does not read the conversation from the database again (an entry counts its encoded size and 1 KiB; 0 keeps none)")
	fs.IntVar(&cfg.maxMessageBytes, "max-message-bytes", 32<<20, "largest gRPC message agentd accepts or sends")
	fs.BoolVar(&cfg.syncFull, "sync-full", false, "fsync the database on every commit (SQLite synchronous=FULL) instead of NORMAL")
	fs.BoolVar(&cfg.plainPayloads, "plain-payloads", false,
		"store every entry payload as plain protobuf: faster loads of long sessions, about 1.4x the disk (default: zlib for payloads of 2 KiB or more)")
	fs.StringVar(&cfg.modelsConfig, "models-config", getenv("AGENTD_MODELS_CONFIG"),
		"JSON file adding or overriding providers and models (env AGENTD_MODELS_CONFIG)")
	fs.StringVar(&cfg.mcpConfig, "mcp-config", getenv("AGENTD_MCP_CONFIG"),
		"JSON file of MCP servers (\"mcpServers\": stdio command or HTTP url) whose tools sessions may enable by name (env AGENTD_MCP_CONFIG)")
	fs.BoolVar(&cfg.otelTraces, "otel-traces", getenv("AGENTD_OTEL_TRACES") == "true",
		"export OpenTelemetry traces over OTLP (configured by the standard OTEL_EXPORTER_OTLP_* variables): runs, model calls and tool calls (env AGENTD_OTEL_TRACES=true)")
	fs.BoolVar(&cfg.otelContent, "otel-capture-content", false,
		"record prompts, answers, tool arguments and results on the spans (off: they may hold personal data)")
	fs.DurationVar(&cfg.retention, "retention", 0,
		"delete sessions no one touched for this long, such as 2160h for 90 days (tenants' retentionDays in --auth-config override it); 0 keeps them")
	fs.DurationVar(&cfg.eventRetention, "event-retention", agent.DefaultEventRetention,
		"how long the events of a finished run stay available to Attach; the transcript is kept regardless")
	fs.StringVar(&cfg.replicaID, "replica-id", envOr("AGENTD_REPLICA_ID", defaultReplicaID()),
		"this replica's name among those sharing a PostgreSQL database, recorded as the owner of its runs; unique per process (env AGENTD_REPLICA_ID)")
	fs.DurationVar(&cfg.lease, "lease", agent.DefaultLease,
		"PostgreSQL: how long a replica's claim on a run lasts without renewal; after it another replica closes the run as interrupted")
	fs.IntVar(&cfg.dbMaxConns, "db-max-conns", 0, "PostgreSQL: most pooled connections (0: the driver's default, the larger of 4 and the CPUs)")
	if roots := getenv("AGENTD_WORKSPACE_ROOTS"); roots != "" {
		cfg.workspaceRoots = filepath.SplitList(roots)
	}
	fs.Var(pathListFlag{&cfg.workspaceRoots}, "workspace-roots",
		"directories the workspace_root of sessions of no tenant must lie in (tenants have their own in --auth-config), separated by "+string(os.PathListSeparator)+"; empty allows any (env AGENTD_WORKSPACE_ROOTS)")
	confinementFlags(fs, &cfg.confine, getenv)
	webFlags(fs, &cfg.web, getenv)
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if err := cfg.confine.check(); err != nil {
		return config{}, err
	}
	if err := cfg.web.check(); err != nil {
		return config{}, err
	}
	if *showVersion {
		return config{}, errVersion
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q: agentd takes flags, or the subcommands export, import, backup and restore (see agentd -h)", fs.Arg(0))
	}
	if cfg.logFormat != "text" && cfg.logFormat != "json" {
		return config{}, fmt.Errorf("--log-format %q: want text or json", cfg.logFormat)
	}
	if cfg.dbPath == "" {
		return config{}, errors.New("--db is empty: give the path of a SQLite database file or a postgres:// URL")
	}
	if cfg.lease < time.Second {
		return config{}, fmt.Errorf("--lease %v: want at least 1s", cfg.lease)
	}
	if cfg.dbMaxConns < 0 || cfg.dbMaxConns > 10000 {
		return config{}, fmt.Errorf("--db-max-conns %d: want 0 (the default) to 10000", cfg.dbMaxConns)
	}
	if cfg.replicaID == "" || len(cfg.replicaID) > persistence.MaxIDLength {
		return config{}, fmt.Errorf("--replica-id must be 1 to %d bytes", persistence.MaxIDLength)
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return config{}, errors.New("--tls-cert and --tls-key go together: give both or neither")
	}
	if cfg.tlsClientCA != "" && cfg.tlsCert == "" {
		return config{}, errors.New("--tls-client-ca needs --tls-cert and --tls-key: client certificates come with TLS")
	}
	if cfg.maxRuns < 1 {
		return config{}, fmt.Errorf("--max-runs %d: want at least 1", cfg.maxRuns)
	}
	if cfg.contextCacheMiB < 0 || cfg.contextCacheMiB > maxContextCacheMiB {
		return config{}, fmt.Errorf("--context-cache-mib %d: want 0 (no cache) to %d", cfg.contextCacheMiB, maxContextCacheMiB)
	}
	if cfg.retention < 0 {
		return config{}, fmt.Errorf("--retention %v: want 0 (keep sessions) or a positive duration", cfg.retention)
	}
	if cfg.eventRetention <= 0 {
		return config{}, fmt.Errorf("--event-retention %v: want a positive duration such as 24h", cfg.eventRetention)
	}
	if cfg.maxMessageBytes < 1<<20 {
		return config{}, fmt.Errorf("--max-message-bytes %d: want at least 1 MiB (1048576)", cfg.maxMessageBytes)
	}
	return cfg, nil
}

// run starts agentd and blocks until ctx is cancelled, then shuts down
// gracefully.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "export" || args[0] == "import") {
		return transfer(ctx, args[0], args[1:], getenv, os.Stdout, stderr)
	}
	if len(args) > 0 && (args[0] == "backup" || args[0] == "restore") {
		return backup(ctx, args[0], args[1:], getenv, os.Stdout, stderr)
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := newLogger(cfg, stderr)

	var grpcOpts []grpc.ServerOption
	var tlsCfg *tls.Config
	if cfg.tlsCert != "" {
		if tlsCfg, err = serverTLS(cfg); err != nil {
			return err
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	var authCfg *service.AuthConfig
	if cfg.authConfig != "" {
		if authCfg, err = service.LoadAuthConfig(cfg.authConfig); err != nil {
			return fmt.Errorf("--auth-config: %w", err)
		}
	}
	models, err := loadModels(cfg.modelsConfig)
	if err != nil {
		return err
	}
	var mcpCfg *mcp.Config
	if cfg.mcpConfig != "" {
		if mcpCfg, err = mcp.LoadConfig(cfg.mcpConfig, nil); err != nil {
			return fmt.Errorf("--mcp-config: %w", err)
		}
	}
	protected := protectedFiles(cfg)
	toolSandbox := newSandbox(cfg.confine, protected, logger)
	if toolSandbox != nil {
		defer toolSandbox.Close()
	}
	toolEnv, err := toolEnvironment(cfg.confine.toolEnv, getenv)
	if err != nil {
		return err
	}
	if toolSandbox == nil && mcpCfg != nil {
		for _, name := range slices.Sorted(maps.Keys(mcpCfg.Servers)) {
			if mcpCfg.Servers[name].Sandbox {
				return fmt.Errorf("--mcp-config: server %q asks for the sandbox (\"sandbox\": true), which --sandbox=off turned off", name)
			}
		}
	}
	// Stopped after the runs, so no call is cut by agentd's own shutdown.
	mcpServers := mcp.NewManager(mcpCfg, mcp.Options{Logger: logger, Version: version, Sandbox: toolSandbox})
	defer mcpServers.Close()
	var tracing *sdktrace.TracerProvider
	if cfg.otelTraces {
		if tracing, err = newTracerProvider(ctx); err != nil {
			return err
		}
		defer func() {
			// After the runs ended, so their spans are in the last batch.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tracing.Shutdown(sctx); err != nil {
				logger.Warn("could not flush the last spans", "err", err)
			}
		}()
	}

	reg := metrics.New()
	opts := []daemon.Option{
		daemon.WithLogger(logger),
		daemon.WithMetrics(reg),
		daemon.WithPostgresMaxConns(cfg.dbMaxConns),
		daemon.WithMaxMessageBytes(cfg.maxMessageBytes),
		daemon.WithAgentOptions(agent.Options{
			ReplicaID:         cfg.replicaID,
			Lease:             cfg.lease,
			MaxConcurrentRuns: cfg.maxRuns,
			ContextCacheBytes: contextCacheBytes(cfg.contextCacheMiB),
			Models:            models,
			Sandbox:           toolSandbox,
			ToolEnv:           toolEnv,
			Protected:         protected,
			Ceilings:          ceilings(cfg, authCfg),
			Retention:         retention(cfg, authCfg),
			EventRetention:    cfg.eventRetention,
			MCP:               mcpServers,
			CaptureContent:    cfg.otelContent,
		}),
		daemon.WithServerOptions(service.ServerOptions{AuthToken: cfg.authToken, Auth: authCfg, GRPC: grpcOpts}),
	}
	if authCfg != nil {
		opts = append(opts, daemon.WithServiceOptions(service.Options{Tenants: authCfg.Tenants}))
	}
	if cfg.syncFull {
		opts = append(opts, daemon.WithSQLiteOptions(sqlite.WithSynchronous(sqlite.SyncFull)))
	}
	if cfg.plainPayloads {
		opts = append(opts, daemon.WithSQLiteOptions(sqlite.WithPayloadCompression(false)))
	}
	if tracing != nil {
		opts = append(opts, daemon.WithTracerProvider(tracing))
	}
	// The listeners are bound before the store opens, so a start that
	// cannot serve (the port is taken) leaves no database file behind.
	lis, err := listen(cfg.listen)
	if err != nil {
		return err
	}
	var mlis net.Listener
	if cfg.metricsListen != "" {
		if mlis, err = net.Listen("tcp", cfg.metricsListen); err != nil {
			lis.Close()
			return fmt.Errorf("cannot listen for metrics on %s (--metrics-listen): %w", cfg.metricsListen, err)
		}
	}
	d, err := daemon.New(ctx, cfg.dbPath, opts...)
	if err != nil {
		lis.Close()
		if mlis != nil {
			mlis.Close()
		}
		return err
	}
	replica := ""
	if d.Engine() == daemon.Postgres {
		replica = cfg.replicaID
	}

	serveErr := make(chan error, 3)
	go func() { serveErr <- d.Serve(lis) }()
	if cfg.web.listen != "" {
		wlis, err := net.Listen("tcp", cfg.web.listen)
		if err != nil {
			_ = d.Shutdown(ctx) // problems are logged
			return fmt.Errorf("cannot listen for HTTP on %s (--http-listen): %w", cfg.web.listen, err)
		}
		streams, closeStreams, err := uiStreams(d, logger)
		if err != nil {
			_ = wlis.Close()
			_ = d.Shutdown(ctx) // problems are logged
			return err
		}
		defer closeStreams()
		consoleURL := ""
		if cfg.web.serveUI {
			if err := consoleMounts(streams); err != nil {
				_ = wlis.Close()
				_ = d.Shutdown(ctx) // problems are logged
				return err
			}
			scheme := "http"
			if tlsCfg != nil {
				scheme = "https"
			}
			consoleURL = scheme + "://" + wlis.Addr().String() + console.Path
		}
		go func() {
			serveErr <- d.ServeWeb(wlis, service.WebOptions{CORSOrigins: cfg.web.corsOrigins, TLS: tlsCfg, MaxMessageBytes: cfg.maxMessageBytes, Mounts: streams})
		}()
		logger.Info("http serving: gRPC-Web, Connect and REST, and the AG-UI and AI SDK streams", "addr", wlis.Addr().String(), "cors_origins", cfg.web.corsOrigins, "console", consoleURL)
	}
	var metricsSrv *http.Server
	if mlis != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", reg.Handler())
		// Profiles for operators, on the same listener as the metrics
		// (bind it to a private address): /debug/pprof/heap?gc=1 shows the
		// heap after a collection.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := metricsSrv.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("serve metrics: %w", err)
			}
		}()
		logger.Info("metrics serving", "addr", mlis.Addr().String())
	}
	logger.Info("agentd serving", "addr", listenAddr(lis), "db", d.StoreName(), "replica", replica, "auth", cfg.authToken != "" || authCfg != nil, "tenants", authCfg != nil, "tls", cfg.tlsCert != "", "mtls", cfg.tlsClientCA != "")
	reported := make(chan struct{})
	reportCtx, stopReport := context.WithCancel(ctx)
	go func() {
		defer close(reported)
		reportSandbox(reportCtx, toolSandbox, sandboxTryDelay, logger)
	}()
	defer func() { stopReport(); <-reported }() // before the sandbox closes

	var runErr error
	select {
	case runErr = <-serveErr:
	case <-ctx.Done():
	}
	logger.Info("agentd shutting down", "grace", cfg.shutdownGrace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.shutdownGrace)
	defer cancel()
	// Runs first, so every stream ends with agent_end and every run is
	// recorded as ended; then the calls drain and the store closes. A run
	// that did not end within the grace is closed as interrupted at the
	// next start: logged by Shutdown, not a failure of this one.
	_ = d.Shutdown(shutdownCtx)
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(shutdownCtx)
	}
	if runErr == nil {
		select {
		case runErr = <-serveErr:
		default:
		}
	}
	if runErr != nil {
		return runErr
	}
	logger.Info("agentd stopped")
	return nil
}

// serverTLS loads the server's certificate and, with --tls-client-ca, the
// CAs whose client certificates it verifies when a client offers one
// (callers without one authenticate with a bearer token).
func serverTLS(cfg config) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.tlsCert, cfg.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s and key %s: %w", cfg.tlsCert, cfg.tlsKey, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.tlsClientCA != "" {
		pem, err := os.ReadFile(cfg.tlsClientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-client-ca %s: no PEM certificate in it", cfg.tlsClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

// loadModels builds the model catalog: the built-in one, extended or
// overridden by the config file when one is given. API keys come from the
// environment or the file and are never logged.
func loadModels(path string) (*catalog.Registry, error) {
	cfg := catalog.Builtin()
	if path != "" {
		file, err := catalog.LoadConfig(path)
		if err != nil {
			return nil, fmt.Errorf("--models-config: %w", err)
		}
		cfg = catalog.Merge(cfg, file)
	}
	reg, err := catalog.NewRegistry(cfg, catalog.Options{})
	if err != nil {
		return nil, fmt.Errorf("model catalog: %w", err)
	}
	return reg, nil
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.logLevel}
	if cfg.logFormat == "json" {
		return slog.New(traceHandler{slog.NewJSONHandler(w, opts)})
	}
	return slog.New(traceHandler{slog.NewTextHandler(w, opts)})
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

// maxContextCacheMiB bounds --context-cache-mib (1 TiB).
const maxContextCacheMiB = 1 << 20

// contextCacheBytes is agent.Options.ContextCacheBytes for
// --context-cache-mib: negative keeps no cache.
func contextCacheBytes(mib int) int {
	if mib == 0 {
		return -1
	}
	return mib << 20
}
