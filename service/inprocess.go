package service

import (
	"context"
	"math"
	"net"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// InProcess returns a client connection to s that never leaves the
// process: each connection is an in-memory pipe whose far end the gRPC
// server serves as HTTP/2. HTTP front ends (such as the AG-UI and AI SDK
// streams) call the AgentService through it, so their calls pass the same
// interceptors as a network client's: authentication from the bearer
// token in their metadata, tenant scoping, validation, limits, metrics and
// logs. It carries no client certificate, whatever the listener's TLS, so
// its callers authenticate by bearer token. The caller closes it.
func (s *Server) InProcess() (*grpc.ClientConn, error) {
	h2 := &http2.Server{}
	return grpc.NewClient("passthrough:///agentd-in-process",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The server bounds what it sends (--max-message-bytes); the
		// client's own default of 4 MiB must not cut an event it allows.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
			client, server := net.Pipe()
			go h2.ServeConn(server, &http2.ServeConnOpts{Handler: s.grpc})
			return client, nil
		}))
}
