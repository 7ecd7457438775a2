package service

import (
	"time"

	"google.golang.org/grpc"
)

// StreamMetrics receives the measurements of the event streams a Service
// sends (package metrics implements it).
type StreamMetrics interface {
	// EventSent counts an event sent to a client stream and, for a live
	// one (created is set), observes how long it took from its creation.
	EventSent(created time.Time)
}

// RPCMetrics counts and times the RPCs a Server handles (package metrics
// implements it).
type RPCMetrics interface {
	// UnaryServerInterceptor measures unary calls.
	UnaryServerInterceptor() grpc.UnaryServerInterceptor
	// StreamServerInterceptor measures streaming calls.
	StreamServerInterceptor() grpc.StreamServerInterceptor
	// InitializeMetrics creates the series of every method s serves, so
	// they are exported before the first call.
	InitializeMetrics(s *grpc.Server)
}

// noStreamMetrics records nothing.
type noStreamMetrics struct{}

func (noStreamMetrics) EventSent(time.Time) {}
