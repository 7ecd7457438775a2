package agent

import (
	"errors"
	"fmt"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// The kinds of Error. They say why a request was refused, so the gRPC layer
// maps them onto status codes with errors.Is without knowing the details.
var (
	// ErrBusy: the session is running a run (FAILED_PRECONDITION).
	ErrBusy = errors.New("session busy")
	// ErrIdle: the session has no active run to act on
	// (FAILED_PRECONDITION).
	ErrIdle = errors.New("session idle")
	// ErrPrecondition: the request cannot be served in the session's
	// current state, such as Continue after an answer or a model that is no
	// longer configured (FAILED_PRECONDITION).
	ErrPrecondition = errors.New("failed precondition")
	// ErrNotFound: the run, its events or the tool call does not exist
	// (NOT_FOUND).
	ErrNotFound = errors.New("not found")
	// ErrExists: the request id was used before in a way that cannot be
	// replayed (ALREADY_EXISTS).
	ErrExists = errors.New("already exists")
	// ErrLimit: a limit of this agentd is reached (RESOURCE_EXHAUSTED).
	ErrLimit = errors.New("limit reached")
	// ErrUnavailable: agentd is shutting down (UNAVAILABLE).
	ErrUnavailable = errors.New("unavailable")
	// ErrConflict: another call changes the session at this moment; retry
	// (ABORTED).
	ErrConflict = errors.New("conflict")
	// ErrOutOfRange: the position asked for is beyond the run's events
	// (OUT_OF_RANGE).
	ErrOutOfRange = errors.New("out of range")
	// ErrPermission: the operator does not let the session's tenant do
	// what the request asks (PERMISSION_DENIED).
	ErrPermission = errors.New("permission denied")
)

// Error is a refused request: its Kind for the status code and the text a
// client reads, which names the ids involved and says what to do instead.
type Error struct {
	// Kind is one of the Err* sentinels of this package.
	Kind error
	// Message is the whole text for the client.
	Message string
	// Reason, when set, types the refusal for clients (the reason of an
	// ErrorInfo detail), with Metadata naming its particulars.
	Reason   agentdv1.Refusal
	Metadata map[string]string
}

// Error returns the message for the client.
func (e *Error) Error() string { return e.Message }

// Unwrap exposes Kind to errors.Is.
func (e *Error) Unwrap() error { return e.Kind }

func refuse(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// FieldError is a request field whose value cannot be used (a session
// configuration naming an unknown tool, a tool result answering no call):
// INVALID_ARGUMENT naming the field.
type FieldError struct {
	// Field is the path of the field in the request, such as
	// "config.tools[2].name" or "messages[0].tool_result.tool_call_id".
	Field string
	// Description says what is wrong with it and what is accepted.
	Description string
	// Reason and Metadata type the refusal, as Error's.
	Reason   agentdv1.Refusal
	Metadata map[string]string
}

// Error returns "field: description".
func (e *FieldError) Error() string { return e.Field + ": " + e.Description }

func invalid(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Description: fmt.Sprintf(format, args...)}
}
