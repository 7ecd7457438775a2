package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/agentd/agentd/daemon"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service/uistream"
)

// serveHTTP serves --http-listen, when set: the UI streams, calling the
// AgentService through the in-process connection so that they are
// authenticated and tenant-scoped as gRPC calls are. Its errors go to
// serveErr; stop ends it (after the runs ended, so the streams could send
// their agent_end).
func serveHTTP(cfg config, d *daemon.Daemon, logger *slog.Logger, serveErr chan<- error) (stop func(context.Context), err error) {
	if cfg.httpListen == "" {
		return func(context.Context) {}, nil
	}
	lis, err := net.Listen("tcp", cfg.httpListen)
	if err != nil {
		return nil, fmt.Errorf("cannot listen for HTTP on %s (--http-listen): %w", cfg.httpListen, err)
	}
	conn, err := d.InProcess()
	if err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("--http-listen: %w", err)
	}
	streams := uistream.NewHandler(agentdv1.NewAgentServiceClient(conn), uistream.Options{Logger: logger})
	mux := http.NewServeMux()
	mux.Handle(uistream.AGUIPath, streams)
	mux.Handle(uistream.AISDKPath, streams)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	tls := cfg.tlsCert != ""
	go func() {
		var err error
		if tls {
			err = srv.ServeTLS(lis, cfg.tlsCert, cfg.tlsKey)
		} else {
			err = srv.Serve(lis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("serve HTTP: %w", err)
		}
	}()
	logger.Info("http serving", "addr", lis.Addr().String(), "tls", tls)
	return func(ctx context.Context) {
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		_ = conn.Close()
	}, nil
}
