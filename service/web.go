package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/cors"
	"connectrpc.com/vanguard"
	"connectrpc.com/vanguard/vanguardgrpc"
	rscors "github.com/rs/cors"
)

// WebOptions configure ServeWeb and WebHandler.
type WebOptions struct {
	// CORSOrigins are the origins (scheme://host[:port], or "*") whose
	// browser pages may call agentd; empty sends no CORS headers, so
	// browsers allow only same-origin pages.
	CORSOrigins []string
	// TLS, when set, serves HTTPS (HTTP/1.1 and HTTP/2) with it; verified
	// client certificates authenticate as on the gRPC listener.
	TLS *tls.Config
	// MaxMessageBytes bounds a message the transcoder buffers (a REST or
	// Connect body); 0 leaves the gRPC server's own limit as the only one.
	MaxMessageBytes int
	// Mounts are more handlers on the same listener, by path pattern (as
	// http.ServeMux takes them), such as the UI streams of package
	// uistream; every other path is the transcoder's. CORS applies to
	// them too.
	Mounts map[string]http.Handler
}

// WebHandler serves every service of the gRPC server over gRPC-Web,
// Connect and REST+JSON (the google.api.http paths of the proto), and
// native gRPC over HTTP/2, by transcoding each call to gRPC and handing it
// to the same grpc.Server: the same interceptors (auth, tenants, limits,
// metrics, logging) run and the same typed errors come back, whatever the
// protocol. REST takes unary calls only; server streams go over Connect,
// gRPC-Web or gRPC.
func (s *Server) WebHandler(opts WebOptions) (http.Handler, error) {
	var topts []vanguard.TranscoderOption
	if opts.MaxMessageBytes > 0 {
		topts = append(topts, vanguard.WithDefaultServiceOptions(vanguard.WithMaxMessageBufferBytes(uint32(opts.MaxMessageBytes))))
	}
	transcoder, err := vanguardgrpc.NewTranscoder(s.grpc, topts...)
	if err != nil {
		return nil, fmt.Errorf("transcode the gRPC services to HTTP: %w", err)
	}
	var h http.Handler = transcoder
	if len(opts.Mounts) > 0 {
		mux := http.NewServeMux()
		mux.Handle("/", transcoder)
		for pattern, m := range opts.Mounts {
			mux.Handle(pattern, m)
		}
		h = mux
	}
	if len(opts.CORSOrigins) == 0 {
		return h, nil
	}
	c := rscors.New(rscors.Options{
		AllowedOrigins: opts.CORSOrigins,
		// REST uses PATCH and DELETE besides Connect's GET and POST.
		AllowedMethods: append(cors.AllowedMethods(), http.MethodPatch, http.MethodDelete),
		// Authorization carries the bearer token; traceparent continues a
		// browser's trace; Last-Event-ID resumes a UI stream.
		AllowedHeaders: append(cors.AllowedHeaders(), "Authorization", "Traceparent", "Last-Event-ID"),
		// grpc-status, grpc-message and grpc-status-details-bin, without
		// which a browser client cannot read an error, and Connect's
		// encoding headers, without which it cannot decompress.
		ExposedHeaders: append(cors.ExposedHeaders(), "Connect-Content-Encoding", "Connect-Accept-Encoding"),
		MaxAge:         int((2 * time.Hour).Seconds()),
	})
	return c.Handler(h), nil
}

// ParseCORSOrigins splits a comma-separated list of origins, refusing
// entries that are not an origin (a path, a missing scheme), so a typo is
// reported at start-up rather than as browsers' opaque CORS failures.
func ParseCORSOrigins(list string) ([]string, error) {
	var out []string
	for o := range strings.SplitSeq(list, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if o != "*" {
			scheme, rest, ok := strings.Cut(o, "://")
			if !ok || (scheme != "http" && scheme != "https") || rest == "" || strings.ContainsAny(rest, "/?#") {
				return nil, fmt.Errorf("origin %q: want scheme://host[:port], such as http://localhost:5173, or *", o)
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// ServeWeb serves WebHandler on lis (h2c and HTTP/1.1 without TLS, both
// over TLS with opts.TLS) until Shutdown. It returns nil after a shutdown
// and the listener's error otherwise.
func (s *Server) ServeWeb(lis net.Listener, opts WebOptions) error {
	h, err := s.WebHandler(opts)
	if err != nil {
		lis.Close()
		return err
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(opts.TLS == nil)
	srv := &http.Server{Handler: h, Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second}
	if opts.TLS != nil {
		tc := opts.TLS.Clone()
		if !slices.Contains(tc.NextProtos, "h2") {
			tc.NextProtos = append(tc.NextProtos, "h2", "http/1.1")
		}
		srv.TLSConfig = tc
	}
	s.webMu.Lock()
	if s.webStopped {
		s.webMu.Unlock()
		lis.Close()
		return nil
	}
	s.web = append(s.web, srv)
	s.webMu.Unlock()
	serve := srv.Serve
	if srv.TLSConfig != nil {
		serve = func(l net.Listener) error { return srv.ServeTLS(l, "", "") }
	}
	if err := serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP on %s: %w", lis.Addr(), err)
	}
	return nil
}

// shutdownWeb stops the HTTP servers, letting in-flight calls finish until
// ctx is done. It runs before the gRPC server's GracefulStop, which would
// cut the calls it reached through HTTP at once.
func (s *Server) shutdownWeb(ctx context.Context) {
	s.webMu.Lock()
	s.webStopped = true
	servers := s.web
	s.web = nil
	s.webMu.Unlock()
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil {
			s.logger.Warn("HTTP calls did not finish within the grace period; closing them", "err", err)
			srv.Close()
		}
	}
}
