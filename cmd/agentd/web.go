package main

import (
	"flag"
	"fmt"
	"net"

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
}

// webFlags registers --http-listen and --cors-origins.
func webFlags(fs *flag.FlagSet, w *webConfig, getenv func(string) string) {
	fs.StringVar(&w.listen, "http-listen", getenv("AGENTD_HTTP_LISTEN"),
		"host:port to serve the AgentService on over gRPC-Web, Connect and REST+JSON (and gRPC), with the same auth, TLS and limits as --listen; empty disables (env AGENTD_HTTP_LISTEN)")
	fs.StringVar(&w.cors, "cors-origins", getenv("AGENTD_CORS_ORIGINS"),
		"comma-separated origins (such as http://localhost:5173) whose browser pages may call --http-listen; empty (the default) allows same-origin pages only (env AGENTD_CORS_ORIGINS)")
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
	if w.listen != "" {
		if _, _, err := net.SplitHostPort(w.listen); err != nil {
			return fmt.Errorf("--http-listen %q: want host:port, such as 127.0.0.1:8080: %w", w.listen, err)
		}
	}
	return nil
}
