package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/daemon"
	"github.com/agentd/agentd/persistence/sqlite"
	"github.com/agentd/agentd/service"
	"github.com/agentd/agentd/tools/sandbox"
)

// confinement is what bounds tool calls: the sandbox of bash commands and
// MCP servers, and the operator's default ceilings.
type confinement struct {
	sandbox          string // on or off
	sandboxNetwork   string // none or allowed: the default network ceiling
	sandboxUID       int
	sandboxGID       int
	sandboxReadPaths []string
	limits           sandbox.Options
	toolEnv          []string // names
	allowedTools     []string
	allowedMCP       []string
	allowedModels    []string
	requireApproval  []string
}

// listFlag is a comma-separated list flag; unset is nil.
type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}

func (l listFlag) Set(s string) error {
	*l.v = nil
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l.v = append(*l.v, item)
		}
	}
	return nil
}

// pathListFlag is a list of paths separated by the OS's list separator.
type pathListFlag struct{ v *[]string }

func (l pathListFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, string(os.PathListSeparator))
}

func (l pathListFlag) Set(s string) error {
	*l.v = filepath.SplitList(s)
	return nil
}

// confinementFlags declares the flags of c on fs, with environment
// fallbacks for the ones an operator sets per host.
func confinementFlags(fs *flag.FlagSet, c *confinement, getenv func(string) string) {
	envOr := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&c.sandbox, "sandbox", envOr("AGENTD_SANDBOX", "on"),
		"on: run every bash command (and MCP servers marked sandbox) confined to its workspace, failing closed when the machine cannot; off: run them with agentd's own authority (env AGENTD_SANDBOX)")
	fs.StringVar(&c.sandboxNetwork, "sandbox-network", "none",
		"none: sessions' commands never get the network; allowed: sessions may ask for it (SandboxSettings.network), unless their tenant's network says otherwise")
	fs.IntVar(&c.sandboxUID, "sandbox-uid", sandbox.DefaultUID, "the unprivileged user id confined commands run as when agentd runs as root")
	fs.IntVar(&c.sandboxGID, "sandbox-gid", sandbox.DefaultGID, "the group id confined commands run as when agentd runs as root")
	fs.Var(pathListFlag{&c.sandboxReadPaths}, "sandbox-read-paths",
		"more directories confined commands may read and run programs from (besides /usr, /bin, /lib* and /etc), separated by "+string(os.PathListSeparator))
	fs.IntVar(&c.limits.MaxProcesses, "sandbox-max-processes", sandbox.DefaultMaxProcesses, "most processes and threads one confined command may have")
	fs.Int64Var(&c.limits.MaxMemoryBytes, "sandbox-max-memory", sandbox.DefaultMaxMemoryBytes, "most private memory, in bytes, each process of a confined command may use")
	fs.Int64Var(&c.limits.MaxFileBytes, "sandbox-max-file-size", sandbox.DefaultMaxFileBytes, "largest file, in bytes, a confined command may write")
	fs.Int64Var(&c.limits.TmpBytes, "sandbox-tmp-size", sandbox.DefaultTmpBytes, "size, in bytes, of the private /tmp of one confined command")
	fs.Var(listFlag{&c.toolEnv}, "tool-env",
		"names of agentd's environment variables to pass to bash commands, comma-separated (they get only PATH, HOME, LANG, TERM and TMPDIR otherwise)")
	fs.Var(listFlag{&c.allowedTools}, "allowed-tools", "the server tools sessions may enable, comma-separated; unset allows every one")
	fs.Var(listFlag{&c.allowedMCP}, "allowed-mcp-servers", "the MCP servers sessions may enable, comma-separated; unset allows every one")
	fs.Var(listFlag{&c.allowedModels}, "allowed-models",
		"patterns of the models sessions may use, comma-separated, such as anthropic/*,faux/* (the faux model is faux/faux); unset allows every one")
	fs.Var(listFlag{&c.requireApproval}, "require-approval",
		"patterns of tool names whose calls always ask for approval, comma-separated, such as bash,write_file,mcp__*; a session may not set ALLOW for them")
}

// check validates the values of the confinement flags.
func (c *confinement) check() error {
	switch c.sandbox {
	case "on", "off":
	default:
		return fmt.Errorf("--sandbox %q: want on or off", c.sandbox)
	}
	switch c.sandboxNetwork {
	case "none", "allowed":
	default:
		return fmt.Errorf("--sandbox-network %q: want none or allowed", c.sandboxNetwork)
	}
	if c.sandboxUID <= 0 || c.sandboxGID <= 0 {
		return fmt.Errorf("--sandbox-uid %d and --sandbox-gid %d: confined commands never run as root; want ids above 0", c.sandboxUID, c.sandboxGID)
	}
	for _, p := range c.sandboxReadPaths {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("--sandbox-read-paths: %q is not an absolute path", p)
		}
	}
	return nil
}

// protectedFiles are the files no workspace may expose and no confined
// command may see: agentd's database, its configuration files, its
// socket.
func protectedFiles(cfg config) []agent.Protected {
	var out []agent.Protected
	add := func(path, what string) {
		if path == "" {
			return
		}
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		out = append(out, agent.Protected{Path: path, What: what})
	}
	if daemon.EngineOf(cfg.dbPath) != daemon.Postgres {
		for _, f := range sqlite.Files(cfg.dbPath) {
			add(f, "database")
		}
	}
	add(cfg.authConfig, "--auth-config file")
	add(cfg.modelsConfig, "--models-config file")
	add(cfg.mcpConfig, "--mcp-config file")
	add(cfg.tlsCert, "TLS certificate")
	add(cfg.tlsKey, "TLS key")
	add(cfg.tlsClientCA, "TLS client CA file")
	if path, ok := strings.CutPrefix(cfg.listen, "unix://"); ok {
		add(path, "socket")
	}
	return out
}

// newSandbox makes the tool sandbox --sandbox asks for (reportSandbox
// says what confines tool calls); nil when the operator turned it off.
func newSandbox(c confinement, protected []agent.Protected, logger *slog.Logger) *sandbox.Sandbox {
	if c.sandbox == "off" {
		logger.Warn("tool sandbox off (--sandbox=off): bash commands and MCP servers run with agentd's own authority, its environment excepted: they can read agentd's database, configuration and every workspace, and reach the network")
		return nil
	}
	opts := c.limits
	opts.UID, opts.GID = c.sandboxUID, c.sandboxGID
	opts.ReadPaths = c.sandboxReadPaths
	for _, p := range protected {
		opts.Hidden = append(opts.Hidden, p.Path)
	}
	return sandbox.New(opts)
}

// sandboxTryDelay is how long after agentd serves the sandbox tries
// itself, unless a call needs it sooner: the try starts agentd's binary
// three times (holder, spawn stage, helper) and a shell, tens of
// milliseconds of CPU that would otherwise compete with a restart's
// first requests on a small machine: beside it the first GetContext of a
// long session took ~45 ms instead of ~34 (BenchmarkRestore, 2 cores),
// and 75-100 ms while the try still forked agentd.
const sandboxTryDelay = 2 * time.Second

// reportSandbox has the sandbox try itself, which takes tens of
// milliseconds, and says in the log what it found. agentd calls it once it
// serves; the try waits delay, so that it neither delays nor competes with
// the start-up and the first requests, or until a call that needed the
// sandbox made it try. It returns without trying when ctx ends first.
func reportSandbox(ctx context.Context, sb *sandbox.Sandbox, delay time.Duration, logger *slog.Logger) {
	if sb == nil {
		return
	}
	wait := time.NewTimer(delay)
	defer wait.Stop()
	select {
	case <-wait.C:
	case <-sb.Tried():
	case <-ctx.Done():
		return
	}
	if err := sb.Available(); err != nil {
		logger.Warn("tool sandbox unavailable: sessions enabling bash are refused, MCP servers marked sandbox fail to start; --sandbox=off runs them unconfined", "reason", sb.Status().Reason)
	} else {
		logger.Info("tool sandbox active", "confinement", sb.Status().String())
	}
}

// toolEnvironment reads the values of the --tool-env names from agentd's
// environment.
func toolEnvironment(names []string, getenv func(string) string) ([]string, error) {
	var env []string
	for _, n := range names {
		v := getenv(n)
		if v == "" {
			return nil, fmt.Errorf("--tool-env %s: agentd's environment has no %s (or it is empty)", n, n)
		}
		env = append(env, n+"="+v)
	}
	return env, nil
}

// ceilings are the operator's ceilings: the flags as the default, the
// tenants' own from --auth-config over them.
func ceilings(cfg config, auth *service.AuthConfig) agent.Ceilings {
	c := cfg.confine
	allowed := c.sandboxNetwork == "allowed"
	def := agent.Ceiling{
		WorkspaceRoots:  agent.Limit{Values: cfg.workspaceRoots, Setting: "--workspace-roots"},
		Tools:           agent.Limit{Values: c.allowedTools, Setting: "--allowed-tools"},
		MCPServers:      agent.Limit{Values: c.allowedMCP, Setting: "--allowed-mcp-servers"},
		Models:          agent.Limit{Values: c.allowedModels, Setting: "--allowed-models"},
		RequireApproval: agent.Limit{Values: c.requireApproval, Setting: "--require-approval"},
		Network:         agent.Permit{Allowed: &allowed, Setting: "--sandbox-network"},
	}
	if auth == nil {
		return agent.Ceilings{Default: def}
	}
	return auth.Ceilings(def)
}

// retention is how long idle sessions are kept: --retention, the tenants'
// retentionDays over it.
func retention(cfg config, auth *service.AuthConfig) agent.Retention {
	if auth == nil {
		return agent.Retention{Default: cfg.retention}
	}
	return auth.Retention(cfg.retention)
}
