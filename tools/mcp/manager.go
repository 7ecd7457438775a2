package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools/sandbox"
)

// Back-off before connecting again to a server that failed: it doubles
// with each failure in a row, from backoffMin up to backoffMax. The first
// use after a single failure waits backoffMin, so a crash is followed by a
// restart for the very next call, while a server that crashes at every
// start is not started in a tight loop.
const (
	backoffMin = 250 * time.Millisecond
	backoffMax = 30 * time.Second
)

// stdioTerminateWait is how long closing a stdio server waits after
// closing its stdin before signalling it (then its whole group is
// killed).
const stdioTerminateWait = 2 * time.Second

// Options configure a Manager.
type Options struct {
	// Logger receives the servers' lifecycle and their stderr lines; nil
	// discards them.
	Logger *slog.Logger
	// Version is agentd's version, sent in the MCP initialize request.
	Version string
	// Sandbox confines the stdio servers whose config asks for it; nil
	// fails their start.
	Sandbox *sandbox.Sandbox
}

// Manager holds one connection per configured server, shared by every
// session that enables it. It is safe for concurrent use.
type Manager struct {
	opts    Options
	servers map[string]*server
	tokens  atomic.Uint64 // progress tokens
}

// NewManager returns a manager of cfg's servers; nothing starts until a
// server is first used. A nil cfg configures no server.
func NewManager(cfg *Config, opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{opts: opts, servers: map[string]*server{}}
	if cfg != nil {
		for name, sc := range cfg.Servers {
			m.servers[name] = &server{m: m, name: name, cfg: sc, stale: true}
		}
	}
	return m
}

// Names returns the configured servers' names, sorted.
func (m *Manager) Names() []string {
	return slices.Sorted(maps.Keys(m.servers))
}

// Server returns the configuration of the server named name.
func (m *Manager) Server(name string) (*ServerConfig, bool) {
	s, ok := m.servers[name]
	if !ok {
		return nil, false
	}
	return s.cfg, true
}

// errUnknownServer is wrapped by the errors about a server name that is
// not configured.
var errUnknownServer = errors.New("no such MCP server")

func (m *Manager) server(name string) (*server, error) {
	s, ok := m.servers[name]
	if !ok {
		return nil, fmt.Errorf("%w %q in this agentd's --mcp-config", errUnknownServer, name)
	}
	return s, nil
}

// Tools returns the tools the server named name offers (minus those the
// operator hides), connecting to it when needed. The list is cached until
// the server announces a change (tools/list_changed) or is reconnected.
func (m *Manager) Tools(ctx context.Context, name string) ([]*agentdv1.McpTool, error) {
	s, err := m.server(name)
	if err != nil {
		return nil, err
	}
	return s.listTools(ctx)
}

// Close stops every server (killing stdio servers' process groups) and
// refuses later uses.
func (m *Manager) Close() error {
	var wg sync.WaitGroup
	for _, s := range m.servers {
		wg.Go(s.shutdown)
	}
	wg.Wait()
	return nil
}

// server is one configured server and its connection.
type server struct {
	m    *Manager
	name string
	cfg  *ServerConfig

	progress sync.Map // progress token → ProgressFunc

	mu         sync.Mutex
	conn       *conn
	connecting chan struct{} // closed when the connect under way ends
	tools      []*agentdv1.McpTool
	stale      bool // tools must be listed again
	failures   int  // in a row
	retryAt    time.Time
	lastErr    string
	restarts   uint32
	inFlight   int
	idle       *time.Timer
	closed     bool
}

// conn is one connection to a server.
type conn struct {
	session *mcpsdk.ClientSession
	cmd     *exec.Cmd   // stdio servers
	stderr  *tailBuffer // stdio servers
	// workspace is the directory made for a sandboxed server without a
	// cwd, removed with the connection.
	workspace string
	done      chan struct{}
	// dropped is set when agentd closed the connection on purpose (idle,
	// shutdown), so its end is no failure.
	dropped atomic.Bool
}

// connect returns the server's connection, connecting (after the back-off
// of earlier failures) when there is none.
func (s *server) connect(ctx context.Context) (*conn, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, fmt.Errorf("MCP server %q is not available: agentd is shutting down", s.name)
		}
		if s.conn != nil {
			c := s.conn
			s.mu.Unlock()
			return c, nil
		}
		if wait := s.connecting; wait != nil {
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		delay := time.Until(s.retryAt)
		if s.failures > 0 && delay > 0 {
			if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < delay {
				err := fmt.Errorf("MCP server %q failed (%s); agentd connects to it again in %s", s.name, s.lastErr, delay.Round(time.Millisecond))
				s.mu.Unlock()
				return nil, err
			}
		}
		done := make(chan struct{})
		s.connecting = done
		failedBefore := s.failures > 0
		s.mu.Unlock()

		c, err := s.dial(ctx, delay)

		s.mu.Lock()
		s.connecting = nil
		close(done)
		if err != nil {
			if ctx.Err() == nil {
				s.failed(err.Error())
			}
			s.mu.Unlock()
			return nil, err
		}
		if s.closed {
			s.mu.Unlock()
			c.close()
			return nil, fmt.Errorf("MCP server %q is not available: agentd is shutting down", s.name)
		}
		s.conn = c
		s.stale = true
		if failedBefore {
			s.restarts++
		}
		s.mu.Unlock()
		go s.watch(c)
		return c, nil
	}
}

// failed records a failure; s.mu is held.
func (s *server) failed(reason string) {
	s.failures++
	s.lastErr = reason
	s.retryAt = time.Now().Add(min(backoffMax, backoffMin<<min(s.failures-1, 16)))
}

// dial waits delay, then starts or reaches the server and initializes the
// MCP session.
func (s *server) dial(ctx context.Context, delay time.Duration) (*conn, error) {
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.connectTimeout())
	defer cancel()
	client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "agentd", Version: s.m.opts.Version}, &mcpsdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcpsdk.ToolListChangedRequest) {
			s.mu.Lock()
			s.stale = true
			s.mu.Unlock()
			s.m.opts.Logger.Info("MCP server changed its tools; the next run of each session sees the new list", "server", s.name)
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcpsdk.ProgressNotificationClientRequest) {
			p := req.Params
			if fn, ok := s.progress.Load(fmt.Sprint(p.ProgressToken)); ok {
				fn.(ProgressFunc)(Progress{Progress: p.Progress, Total: p.Total, Message: p.Message})
			}
		},
	})
	c := &conn{done: make(chan struct{})}
	var transport mcpsdk.Transport
	switch s.cfg.transport() {
	case TransportStdio:
		cmd, release, err := s.command(c)
		if err != nil {
			return nil, fmt.Errorf("cannot start MCP server %q: %w", s.name, err)
		}
		defer release()
		c.stderr = &tailBuffer{log: s.m.opts.Logger.With("server", s.name)}
		cmd.Stderr = c.stderr
		c.cmd = cmd
		transport = &mcpsdk.CommandTransport{Command: cmd, TerminateDuration: stdioTerminateWait}
	case TransportHTTP:
		transport = &mcpsdk.StreamableClientTransport{
			Endpoint:   s.cfg.URL,
			HTTPClient: &http.Client{Transport: headerTransport{headers: s.cfg.Headers, base: http.DefaultTransport}},
		}
	}
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		if c.cmd != nil && c.cmd.Process != nil {
			killProcessGroup(c.cmd)
		}
		c.removeWorkspace()
		return nil, fmt.Errorf("cannot start MCP server %q: %w%s", s.name, err, c.stderrNote())
	}
	c.session = session
	if c.cmd != nil {
		s.m.opts.Logger.Info("MCP server started", "server", s.name, "pid", c.cmd.Process.Pid)
	}
	return c, nil
}

// command is the process of a stdio server for connection c: confined
// when its config asks for the sandbox, in a process group of its own
// either way, with Env and PATH, HOME and LANG as its whole environment.
// release closes agentd's copies of what a confined server inherits, once
// it started.
func (s *server) command(c *conn) (cmd *exec.Cmd, release func(), err error) {
	env := func(home string) []string {
		base := map[string]string{"PATH": os.Getenv("PATH"), "HOME": home, "LANG": os.Getenv("LANG")}
		maps.Copy(base, s.cfg.Env)
		var out []string
		for _, k := range slices.Sorted(maps.Keys(base)) {
			if base[k] != "" {
				out = append(out, k+"="+base[k])
			}
		}
		return out
	}
	if !s.cfg.Sandbox {
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Dir = s.cfg.Cwd
		cmd.Env = env(os.Getenv("HOME"))
		ownProcessGroup(cmd)
		return cmd, func() {}, nil
	}
	if s.m.opts.Sandbox == nil {
		return nil, nil, errors.New("its config asks for the sandbox, and agentd has none")
	}
	path, err := exec.LookPath(s.cfg.Command)
	if err != nil {
		return nil, nil, err
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, nil, err
	}
	dir := s.cfg.Cwd
	if dir == "" {
		if dir, err = os.MkdirTemp("", "agentd-mcp-"+s.name+"-"); err != nil {
			return nil, nil, err
		}
		c.workspace = dir
	}
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		c.removeWorkspace()
		return nil, nil, err
	}
	sc, err := s.m.opts.Sandbox.Command(sandbox.Spec{Dir: dir, ReadPaths: s.cfg.ReadPaths, Network: s.cfg.SandboxNetwork, Env: env(dir)},
		append([]string{path}, s.cfg.Args...))
	if err != nil {
		c.removeWorkspace()
		return nil, nil, err
	}
	return sc.Cmd, sc.Release, nil
}

// removeWorkspace removes the directory made for a sandboxed server.
func (c *conn) removeWorkspace() {
	if c.workspace != "" {
		_ = os.RemoveAll(c.workspace)
	}
}

// watch waits for the connection to end; an end agentd did not ask for is
// a failure, and the next use connects again.
func (s *server) watch(c *conn) {
	err := c.session.Wait()
	if c.cmd != nil {
		// The server's children may outlive it.
		killProcessGroup(c.cmd)
	}
	c.removeWorkspace()
	// The failure is recorded before done closes, so a call that saw its
	// connection end finds the reason.
	defer close(c.done)
	if c.dropped.Load() {
		return
	}
	reason := "the connection ended"
	if err != nil {
		reason = err.Error()
	}
	if c.cmd != nil && c.cmd.ProcessState != nil {
		reason = "the server exited (" + c.cmd.ProcessState.String() + ")"
	}
	reason += c.stderrNote()
	s.mu.Lock()
	if s.conn == c {
		s.conn = nil
		s.failed(reason)
	}
	s.mu.Unlock()
	s.m.opts.Logger.Warn("MCP server stopped", "server", s.name, "reason", reason)
}

// drop ends the connection c on purpose.
func (s *server) drop(c *conn) {
	c.dropped.Store(true)
	c.close()
}

// close ends the session (for a stdio server: stdin closed, then SIGTERM,
// then SIGKILL) and kills what is left of its process group.
func (c *conn) close() {
	_ = c.session.Close()
	if c.cmd != nil {
		killProcessGroup(c.cmd)
	}
	<-c.done
}

func (c *conn) stderrNote() string {
	if c.stderr == nil {
		return ""
	}
	if tail := c.stderr.lastLine(); tail != "" {
		return "; its last stderr line: " + tail
	}
	return ""
}

// shutdown stops the server for good.
func (s *server) shutdown() {
	s.mu.Lock()
	s.closed = true
	c := s.conn
	s.conn = nil
	if s.idle != nil {
		s.idle.Stop()
	}
	s.mu.Unlock()
	if c != nil {
		s.drop(c)
	}
}

// begin and end bracket a use of the server, so an idle stdio server is
// stopped only when no call runs.
func (s *server) begin() {
	s.mu.Lock()
	s.inFlight++
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	s.mu.Unlock()
}

func (s *server) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	idle := s.cfg.idleTimeout()
	if s.inFlight > 0 || idle <= 0 || s.cfg.transport() != TransportStdio || s.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(idle, func() {
		s.mu.Lock()
		if s.idle != t || s.inFlight > 0 || s.conn == nil {
			s.mu.Unlock()
			return
		}
		c := s.conn
		s.conn = nil
		s.idle = nil
		s.mu.Unlock()
		s.m.opts.Logger.Info("MCP server stopped after being idle", "server", s.name, "idle", idle)
		s.drop(c)
	})
	s.idle = t
}

// listTools lists the server's tools when the cached list is stale.
func (s *server) listTools(ctx context.Context) ([]*agentdv1.McpTool, error) {
	s.begin()
	defer s.end()
	c, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if !s.stale {
		tools := s.tools
		s.mu.Unlock()
		return tools, nil
	}
	s.stale = false // a change announced while listing marks it again
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.callTimeout())
	defer cancel()
	var tools []*agentdv1.McpTool
	for t, err := range c.session.Tools(ctx, nil) {
		if err != nil {
			s.mu.Lock()
			s.stale = true
			s.mu.Unlock()
			return nil, fmt.Errorf("MCP server %q did not list its tools: %w", s.name, err)
		}
		if !s.cfg.Allowed(t.Name) {
			continue
		}
		mt, err := toolFromSDK(t)
		if err != nil {
			s.m.opts.Logger.Warn("MCP tool left out: its input schema is not a JSON object", "server", s.name, "tool", t.Name, "err", err)
			continue
		}
		tools = append(tools, mt)
	}
	s.mu.Lock()
	s.tools = tools
	s.failures = 0
	s.lastErr = ""
	s.mu.Unlock()
	return tools, nil
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.headers {
			req.Header.Set(k, v)
		}
	}
	return t.base.RoundTrip(req)
}

// tailBuffer keeps a stdio server's last stderr line for error texts and
// logs every line.
type tailBuffer struct {
	log  *slog.Logger
	mu   sync.Mutex
	part []byte
	last string
}

// maxStderrLine bounds what one stderr line may hold in memory.
const maxStderrLine = 1024

// Write implements io.Writer.
func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ch := range p {
		if ch == '\n' {
			if line := strings.TrimSpace(string(b.part)); line != "" {
				b.last = line
				b.log.Debug("MCP server stderr", "line", line)
			}
			b.part = b.part[:0]
			continue
		}
		if len(b.part) < maxStderrLine {
			b.part = append(b.part, ch)
		}
	}
	return len(p), nil
}

func (b *tailBuffer) lastLine() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if line := strings.TrimSpace(string(b.part)); line != "" {
		return line
	}
	return b.last
}

// Known returns the tools the server named name offered when last listed,
// without connecting, when that list is current (the server is connected
// and announced no change since).
func (m *Manager) Known(name string) ([]*agentdv1.McpTool, bool) {
	s, ok := m.servers[name]
	if !ok {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil || s.stale {
		return nil, false
	}
	return s.tools, true
}
