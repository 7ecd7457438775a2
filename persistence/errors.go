package persistence

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors every engine returns (wrapped in *Error or
// *CorruptEntryError), so the service can map them to gRPC codes with
// errors.Is without knowing the engine.
var (
	// ErrNotFound: the session, entry or run does not exist (NOT_FOUND).
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request itself is malformed, such as an entry without
	// payload or a parent from another session (INVALID_ARGUMENT).
	ErrInvalid = errors.New("invalid argument")
	// ErrConflict: the request clashes with what is stored, such as a
	// duplicate id or ending a run twice (ALREADY_EXISTS or
	// FAILED_PRECONDITION).
	ErrConflict = errors.New("conflict")
	// ErrCorrupt: stored data cannot be decoded (DATA_LOSS). Always carried
	// by a *CorruptEntryError or *Error that names what is broken.
	ErrCorrupt = errors.New("corrupt data")
)

// Error is a store error that names the objects it is about, so a NOT_FOUND
// or INVALID_ARGUMENT status can say which id was wrong. It matches its Kind
// with errors.Is.
type Error struct {
	// Kind is one of ErrNotFound, ErrInvalid, ErrConflict, ErrCorrupt,
	// ErrFenced.
	Kind error
	// SessionID is the session concerned; may be empty.
	SessionID string
	// EntryID is the entry concerned; may be empty.
	EntryID string
	// RunID is the run concerned; may be empty.
	RunID string
	// Detail says what exactly is wrong; may be empty.
	Detail string
}

// Error formats the names and the detail, for example
// `session "s1": entry "e9": not found`.
func (e *Error) Error() string {
	var b strings.Builder
	if e.SessionID != "" {
		fmt.Fprintf(&b, "session %q: ", e.SessionID)
	}
	if e.EntryID != "" {
		fmt.Fprintf(&b, "entry %q: ", e.EntryID)
	}
	if e.RunID != "" {
		fmt.Fprintf(&b, "run %q: ", e.RunID)
	}
	if e.Kind != nil {
		b.WriteString(e.Kind.Error())
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap exposes Kind to errors.Is.
func (e *Error) Unwrap() error { return e.Kind }

// SessionNotFound is the error for an unknown session id.
func SessionNotFound(sessionID string) *Error {
	return &Error{Kind: ErrNotFound, SessionID: sessionID}
}

// EntryNotFound is the error for an unknown entry id within a known session.
func EntryNotFound(sessionID, entryID string) *Error {
	return &Error{Kind: ErrNotFound, SessionID: sessionID, EntryID: entryID}
}

// RunNotFound is the error for an unknown run id.
func RunNotFound(runID string) *Error {
	return &Error{Kind: ErrNotFound, RunID: runID}
}

// CorruptEntryError reports a stored entry whose payload cannot be decoded
// or does not match its row. Reads fail with it rather than skipping the
// entry, because a silently shortened transcript would change what the model
// sees.
type CorruptEntryError struct {
	// SessionID is the session holding the entry.
	SessionID string
	// EntryID is the entry's id as the store's index knows it.
	EntryID string
	// Seq is the entry's position in append order (engine-defined, for
	// locating the row); 0 when unknown.
	Seq int64
	// Err is the decoding error or mismatch.
	Err error
}

// Error names the session and entry.
func (e *CorruptEntryError) Error() string {
	return fmt.Sprintf("session %q: entry %q (seq %d): corrupt payload: %v", e.SessionID, e.EntryID, e.Seq, e.Err)
}

// Unwrap matches ErrCorrupt and exposes the cause.
func (e *CorruptEntryError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }
