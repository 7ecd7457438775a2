package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Defaults of a server's settings.
const (
	// DefaultCallTimeout bounds one tools/call.
	DefaultCallTimeout = 60 * time.Second
	// DefaultIdleTimeout stops a stdio server nobody called for this long.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultConnectTimeout bounds starting and initializing a server.
	DefaultConnectTimeout = 30 * time.Second
)

// Config is the operator's --mcp-config file.
type Config struct {
	// Servers by name.
	Servers map[string]*ServerConfig `json:"mcpServers"`
}

// ServerConfig is one server of the file: a stdio command or an HTTP URL.
type ServerConfig struct {
	// Type is "stdio" or "http" ("streamable-http" and "streamableHttp"
	// are accepted for the same); empty infers it from command or url.
	Type string `json:"type,omitempty"`

	// Command starts a stdio server; Args, Env and Cwd go with it. Its
	// environment is Env with PATH, HOME and LANG, never the rest of
	// agentd's.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	// Sandbox runs a stdio server confined like a bash command: Cwd (or an
	// empty directory of its own) is its writable workspace, ReadPaths
	// are more directories it may read (its own code, say), and it has no
	// network unless SandboxNetwork.
	Sandbox        bool     `json:"sandbox,omitempty"`
	ReadPaths      []string `json:"readPaths,omitempty"`
	SandboxNetwork bool     `json:"sandboxNetwork,omitempty"`

	// URL is a streamable HTTP server's endpoint; Headers go with every
	// request.
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`

	// AllowTools, when set, are the only tools of the server sessions may
	// see; DenyTools are never seen. Both take the server's own names.
	AllowTools []string `json:"allowTools,omitempty"`
	DenyTools  []string `json:"denyTools,omitempty"`
	// ReadOnly marks a server whose tools change nothing: they run
	// without approval unless a session asks otherwise.
	ReadOnly bool `json:"readOnly,omitempty"`

	// Timeout bounds one call (default DefaultCallTimeout), IdleTimeout
	// stops an unused stdio server (default DefaultIdleTimeout; "0s"
	// keeps it running), ConnectTimeout bounds a start (default
	// DefaultConnectTimeout). Go durations, such as "90s".
	Timeout        Duration  `json:"timeout,omitzero"`
	IdleTimeout    *Duration `json:"idleTimeout,omitempty"`
	ConnectTimeout Duration  `json:"connectTimeout,omitzero"`
}

// Duration is a time.Duration written as a Go duration string in JSON.
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Transports a server may use.
const (
	TransportStdio = "stdio"
	TransportHTTP  = "http"
)

// transport returns the server's transport, inferred when Type is empty.
func (c *ServerConfig) transport() string {
	switch c.Type {
	case "http", "streamable-http", "streamableHttp":
		return TransportHTTP
	case "stdio":
		return TransportStdio
	case "":
		if c.URL != "" {
			return TransportHTTP
		}
		return TransportStdio
	}
	return c.Type
}

// callTimeout, idleTimeout and connectTimeout apply the defaults.
func (c *ServerConfig) callTimeout() time.Duration {
	return cmp(time.Duration(c.Timeout), DefaultCallTimeout)
}

func (c *ServerConfig) idleTimeout() time.Duration {
	if c.IdleTimeout == nil {
		return DefaultIdleTimeout
	}
	return time.Duration(*c.IdleTimeout)
}

func (c *ServerConfig) connectTimeout() time.Duration {
	return cmp(time.Duration(c.ConnectTimeout), DefaultConnectTimeout)
}

func cmp(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Allowed reports whether the operator lets sessions see the server's tool
// named name.
func (c *ServerConfig) Allowed(name string) bool {
	if slices.Contains(c.DenyTools, name) {
		return false
	}
	return len(c.AllowTools) == 0 || slices.Contains(c.AllowTools, name)
}

// ServerNamePattern is what a server's name may be: it becomes part of
// the tool names the model sees, so it keeps to the characters every
// provider accepts, and it has no "__", which separates it from the tool.
var ServerNamePattern = regexp.MustCompile(`^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*$`)

// maxServerName leaves room for a tool name within the [provider.MaxToolNameLength]
// characters of a model-visible name.
const maxServerName = 32

// envRef matches ${NAME} in env and header values.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// LoadConfig reads and checks a --mcp-config file. ${NAME} in env values
// and header values is replaced by the environment variable NAME, read with
// lookupEnv (os.LookupEnv when nil), so secrets stay out of the file; a
// variable that is not set is an error naming it.
func LoadConfig(path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	cfg, err := ParseConfig(raw, lookupEnv)
	if err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig is LoadConfig on the file's bytes.
func ParseConfig(raw []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return nil, err
	}
	if cfg.Servers == nil {
		return nil, errors.New(`no "mcpServers" object`)
	}
	for name, s := range cfg.Servers {
		if err := s.check(name, lookupEnv); err != nil {
			return nil, fmt.Errorf("mcpServers.%s: %w", name, err)
		}
	}
	return &cfg, nil
}

func (c *ServerConfig) check(name string, lookupEnv func(string) (string, bool)) error {
	if c == nil {
		return errors.New("is null")
	}
	if !ServerNamePattern.MatchString(name) || len(name) > maxServerName {
		return fmt.Errorf("the name must be 1 to %d characters of a-z A-Z 0-9 - and single _ (it becomes part of the tool names the model sees)", maxServerName)
	}
	switch c.transport() {
	case TransportStdio:
		if c.Command == "" {
			return errors.New(`"command" is required for a stdio server (or give "url" for an HTTP one)`)
		}
		if c.URL != "" || len(c.Headers) > 0 {
			return errors.New(`"url" and "headers" belong to an HTTP server, not a stdio one`)
		}
		if !c.Sandbox && (len(c.ReadPaths) > 0 || c.SandboxNetwork) {
			return errors.New(`"readPaths" and "sandboxNetwork" go with "sandbox": true`)
		}
		for _, p := range append(append([]string(nil), c.ReadPaths...), c.Cwd) {
			if c.Sandbox && p != "" && !filepath.IsAbs(p) {
				return fmt.Errorf("%q: a sandboxed server's cwd and readPaths must be absolute paths", p)
			}
		}
	case TransportHTTP:
		if c.URL == "" {
			return errors.New(`"url" is required for an HTTP server`)
		}
		if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
			return fmt.Errorf("url %q is not an http:// or https:// URL", c.URL)
		}
		if c.Command != "" || len(c.Args) > 0 || len(c.Env) > 0 || c.Cwd != "" || c.Sandbox {
			return errors.New(`"command", "args", "env", "cwd" and "sandbox" belong to a stdio server, not an HTTP one`)
		}
	default:
		return fmt.Errorf("unknown type %q: want \"stdio\" or \"http\"", c.Type)
	}
	for _, vals := range []struct {
		field string
		m     map[string]string
	}{{"env", c.Env}, {"headers", c.Headers}} {
		for k, v := range vals.m {
			expanded, err := expandEnv(v, lookupEnv)
			if err != nil {
				return fmt.Errorf("%s.%s: %w", vals.field, k, err)
			}
			vals.m[k] = expanded
		}
	}
	return nil
}

// expandEnv replaces ${NAME} references with the environment's values.
func expandEnv(v string, lookupEnv func(string) (string, bool)) (string, error) {
	var missing []string
	out := envRef.ReplaceAllStringFunc(v, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		val, ok := lookupEnv(name)
		if !ok {
			missing = append(missing, name)
		}
		return val
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("environment variable %s is not set", strings.Join(missing, ", "))
	}
	return out, nil
}
