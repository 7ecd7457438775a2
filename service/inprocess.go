package service

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// InProcessConn is a client connection to a Server that never leaves the
// process (see Server.InProcess).
type InProcessConn struct {
	*grpc.ClientConn
	srv *http.Server
}

// Close closes the connection and stops serving it.
func (c *InProcessConn) Close() error {
	err := c.ClientConn.Close()
	return errors.Join(err, c.srv.Close())
}

// InProcess returns a client connection to s that never leaves the
// process: each connection is an in-memory pipe whose far end the gRPC
// server serves as HTTP/2. HTTP front ends (such as the AG-UI and AI SDK
// streams) call the AgentService through it, so their calls pass the same
// interceptors as a network client's: authentication from the bearer
// token in their metadata, tenant scoping, validation, limits, metrics and
// logs. It carries no client certificate, whatever the listener's TLS, so
// its callers authenticate by bearer token. The caller closes it.
func (s *Server) InProcess() (*InProcessConn, error) {
	lis := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true) // HTTP/2 with prior knowledge, as gRPC speaks it
	srv := &http.Server{Handler: s.grpc, Protocols: &protocols}
	go func() { _ = srv.Serve(lis) }() // ends when Close closes lis
	conn, err := grpc.NewClient("passthrough:///agentd-in-process",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The server bounds what it sends (--max-message-bytes); the
		// client's own default of 4 MiB must not cut an event it allows.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
		grpc.WithContextDialer(lis.dial))
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	return &InProcessConn{ClientConn: conn, srv: srv}, nil
}

// pipeListener hands the server ends of in-memory pipes to an http.Server.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) dial(ctx context.Context, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Accept implements net.Listener.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "in-process" }
