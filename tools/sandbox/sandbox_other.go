//go:build !linux

package sandbox

import (
	"fmt"
	"runtime"
)

// Sandbox is unavailable off Linux: Command always fails.
type Sandbox struct{ status Status }

// New returns a sandbox that cannot confine anything on this system.
func New(Options) *Sandbox {
	return &Sandbox{status: Status{Reason: fmt.Sprintf("confinement needs Linux namespaces; this is %s", runtime.GOOS)}}
}

// Unavailable returns a sandbox that cannot confine anything, for reason.
func Unavailable(reason string) *Sandbox { return &Sandbox{status: Status{Reason: reason}} }

// Tried returns a closed channel: off Linux there is nothing to try.
func (s *Sandbox) Tried() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Status reports what New found.
func (s *Sandbox) Status() Status { return s.status }

// Available returns why commands cannot be confined.
func (s *Sandbox) Available() error { return fmt.Errorf("%w: %s", ErrUnavailable, s.status.Reason) }

// Close does nothing.
func (s *Sandbox) Close() error { return nil }

// Command fails: see Available.
func (s *Sandbox) Command(Spec, []string) (*Cmd, error) { return nil, s.Available() }
