package main

import (
	"flag"
	"fmt"
	"net"
	"strconv"

	"github.com/agentd/agentd/service"
)

// webConfig is where and how agentd serves gRPC-Web, Connect and
// REST+JSON. They get a listener of their own rather than the gRPC port:
// native gRPC multiplexed through an HTTP server took 2.7 times as long to
// stream a prompt (BenchmarkPromptStreamMultiplexed in service).
type webConfig struct {
	// listen is --http-listen, host:port; empty serves no HTTP protocols.
	listen string
	// cors is --cors-origins as given; corsOrigins the origins in it,
	// set by check.
	cors        string
	corsOrigins []string
	// ui is --ui: unset serves the web console when listen is a loopback
	// address; serveUI is the decision, set by check.
	ui      uiFlag
	serveUI bool
}

// uiFlag is a boolean flag that knows whether it was given: --ui,
// --ui=true and --ui=false are explicit; absent leaves the default to the
// listen address.
type uiFlag struct {
	set, on bool
	// badEnv is an AGENTD_UI that is not a boolean, reported by check.
	badEnv string
}

func (f *uiFlag) String() string {
	if !f.set {
		return "auto"
	}
	return strconv.FormatBool(f.on)
}

func (f *uiFlag) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("want true or false")
	}
	f.set, f.on = true, on
	return nil
}

// IsBoolFlag lets --ui stand alone.
func (f *uiFlag) IsBoolFlag() bool { return true }

// webFlags registers --http-listen and --cors-origins.
func webFlags(fs *flag.FlagSet, w *webConfig, getenv func(string) string) {
	fs.StringVar(&w.listen, "http-listen", getenv("AGENTD_HTTP_LISTEN"),
		"host:port to serve the AgentService on over gRPC-Web, Connect and REST+JSON (and gRPC), with the same auth, TLS and limits as --listen; empty disables (env AGENTD_HTTP_LISTEN)")
	fs.StringVar(&w.cors, "cors-origins", getenv("AGENTD_CORS_ORIGINS"),
		"comma-separated origins (such as http://localhost:5173) whose browser pages may call --http-listen; empty (the default) allows same-origin pages only (env AGENTD_CORS_ORIGINS)")
	if v := getenv("AGENTD_UI"); v != "" {
		_ = w.ui.Set(v) // a bad value is reported by check
		if !w.ui.set {
			w.ui.badEnv = v
		}
	}
	fs.Var(&w.ui, "ui", "serve the web console at /ui/ on --http-listen; by default it is served when --http-listen is a loopback address (127.0.0.1, ::1, localhost) and not otherwise (env AGENTD_UI)")
}

// check parses --cors-origins and refuses settings that cannot work.
func (w *webConfig) check() error {
	origins, err := service.ParseCORSOrigins(w.cors)
	if err != nil {
		return fmt.Errorf("--cors-origins: %w", err)
	}
	w.corsOrigins = origins
	if len(w.corsOrigins) > 0 && w.listen == "" {
		return fmt.Errorf("--cors-origins needs --http-listen: browsers call agentd over its HTTP listener")
	}
	if w.ui.badEnv != "" {
		return fmt.Errorf("AGENTD_UI %q: want true or false", w.ui.badEnv)
	}
	if w.ui.set && w.ui.on && w.listen == "" {
		return fmt.Errorf("--ui needs --http-listen: the console is served on agentd's HTTP listener")
	}
	if w.listen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(w.listen)
	if err != nil {
		return fmt.Errorf("--http-listen %q: want host:port, such as 127.0.0.1:8080: %w", w.listen, err)
	}
	w.serveUI = w.ui.on
	if !w.ui.set {
		w.serveUI = isLoopback(host)
	}
	return nil
}

// isLoopback reports whether host names only this machine: the console's
// default, since a page reachable from elsewhere should be asked for.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
