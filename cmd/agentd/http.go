package main

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"

	"github.com/agentd/agentd/daemon"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service/console"
	"github.com/agentd/agentd/service/uistream"
)

// uiStreams are the AG-UI and AI SDK streams mounted on --http-listen
// beside gRPC-Web, Connect and REST. They call the AgentService through the
// in-process connection, so they are authenticated, tenant-scoped and
// limited as gRPC calls are; closeStreams releases that connection.
func uiStreams(d *daemon.Daemon, logger *slog.Logger) (mounts map[string]http.Handler, closeStreams func(), err error) {
	conn, err := d.InProcess()
	if err != nil {
		return nil, nil, fmt.Errorf("--http-listen: %w", err)
	}
	streams := uistream.NewHandler(agentdv1.NewAgentServiceClient(conn), uistream.Options{Logger: logger})
	// AISDKPath/ takes useChat's reconnect, GET <AISDKPath>/<session id>/stream.
	return map[string]http.Handler{uistream.AGUIPath: streams, uistream.AISDKPath: streams, uistream.AISDKPath + "/": streams}, func() { _ = conn.Close() }, nil
}

// consoleMounts adds the web console's files to mounts.
func consoleMounts(mounts map[string]http.Handler) error {
	ui, err := console.NewHandler()
	if err != nil {
		return fmt.Errorf("--ui: %w", err)
	}
	maps.Copy(mounts, ui.Mounts())
	return nil
}
