package agent

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// The classes of refusal. Each [agentdv1.ErrorReason] belongs to one (see
// [ClassOf]), so callers test a refusal with errors.Is without knowing
// its exact reason.
var (
	// ErrBusy: the session is running a run.
	ErrBusy = errors.New("session busy")
	// ErrIdle: the session has no active run to act on.
	ErrIdle = errors.New("session idle")
	// ErrPrecondition: the request cannot be served in the session's
	// current state, such as Continue after an answer or a model that is no
	// longer configured.
	ErrPrecondition = errors.New("failed precondition")
	// ErrNotFound: the run, its events or the tool call does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: the request id was used before in a way that cannot be
	// replayed, or a chosen session id is taken.
	ErrExists = errors.New("already exists")
	// ErrLimit: a limit of this agentd, a tenant or a session is reached.
	ErrLimit = errors.New("limit reached")
	// ErrUnavailable: agentd is shutting down, or a replica did not answer.
	ErrUnavailable = errors.New("unavailable")
	// ErrConflict: another call changes the session at this moment; retry.
	ErrConflict = errors.New("conflict")
	// ErrOutOfRange: the position asked for is beyond the run's events.
	ErrOutOfRange = errors.New("out of range")
	// ErrPermission: the operator does not let the session's tenant do
	// what the request asks.
	ErrPermission = errors.New("permission denied")
	// ErrInvalid: a request field cannot be used as given.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnauthenticated: the caller is not known.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrInternal: agentd failed inside.
	ErrInternal = errors.New("internal")
)

// kind is what one reason means: its class and the status code it always
// comes with.
type kind struct {
	class error
	code  code.Code
}

// kindOf is the one definition of every refusal's class and status code;
// the proto documents each reason with the same code.
func kindOf(r agentdv1.ErrorReason) kind {
	switch r {
	case agentdv1.ErrorReason_ERROR_REASON_TENANT_CEILING, agentdv1.ErrorReason_ERROR_REASON_TENANT_FORBIDDEN,
		agentdv1.ErrorReason_ERROR_REASON_CEILING_FORBIDS_RULE:
		return kind{ErrPermission, code.Code_PERMISSION_DENIED}
	case agentdv1.ErrorReason_ERROR_REASON_SANDBOX_UNAVAILABLE, agentdv1.ErrorReason_ERROR_REASON_CANNOT_CONTINUE,
		agentdv1.ErrorReason_ERROR_REASON_MODEL_UNAVAILABLE, agentdv1.ErrorReason_ERROR_REASON_TOOLS_UNAVAILABLE,
		agentdv1.ErrorReason_ERROR_REASON_NOTHING_TO_COMPACT, agentdv1.ErrorReason_ERROR_REASON_SUMMARY_FAILED,
		agentdv1.ErrorReason_ERROR_REASON_ANSWER_TOO_LATE, agentdv1.ErrorReason_ERROR_REASON_REPLICA_VERSION_MISMATCH,
		agentdv1.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, agentdv1.ErrorReason_ERROR_REASON_PROMPT_REFUSED,
		agentdv1.ErrorReason_ERROR_REASON_TOOL_CALLS_IN_DOUBT:
		return kind{ErrPrecondition, code.Code_FAILED_PRECONDITION}
	case agentdv1.ErrorReason_ERROR_REASON_WORKSPACE_FORBIDDEN, agentdv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT,
		agentdv1.ErrorReason_ERROR_REASON_SETTING_UNSUPPORTED:
		return kind{ErrInvalid, code.Code_INVALID_ARGUMENT}
	case agentdv1.ErrorReason_ERROR_REASON_SESSION_BUSY:
		return kind{ErrBusy, code.Code_FAILED_PRECONDITION}
	case agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE:
		return kind{ErrIdle, code.Code_FAILED_PRECONDITION}
	case agentdv1.ErrorReason_ERROR_REASON_NOT_WAITING, agentdv1.ErrorReason_ERROR_REASON_SESSION_NOT_FOUND,
		agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_FOUND, agentdv1.ErrorReason_ERROR_REASON_ENTRY_NOT_FOUND,
		agentdv1.ErrorReason_ERROR_REASON_EVENTS_EXPIRED, agentdv1.ErrorReason_ERROR_REASON_NOT_IN_DOUBT,
		agentdv1.ErrorReason_ERROR_REASON_RULE_NOT_FOUND:
		return kind{ErrNotFound, code.Code_NOT_FOUND}
	case agentdv1.ErrorReason_ERROR_REASON_REQUEST_ID_REUSED, agentdv1.ErrorReason_ERROR_REASON_SESSION_EXISTS:
		return kind{ErrExists, code.Code_ALREADY_EXISTS}
	case agentdv1.ErrorReason_ERROR_REASON_CONCURRENCY_LIMIT, agentdv1.ErrorReason_ERROR_REASON_TENANT_LIMIT,
		agentdv1.ErrorReason_ERROR_REASON_BUDGET_EXCEEDED:
		return kind{ErrLimit, code.Code_RESOURCE_EXHAUSTED}
	case agentdv1.ErrorReason_ERROR_REASON_SHUTTING_DOWN, agentdv1.ErrorReason_ERROR_REASON_REPLICA_UNREACHABLE:
		return kind{ErrUnavailable, code.Code_UNAVAILABLE}
	case agentdv1.ErrorReason_ERROR_REASON_CONCURRENT_CHANGE:
		return kind{ErrConflict, code.Code_ABORTED}
	case agentdv1.ErrorReason_ERROR_REASON_SEQ_OUT_OF_RANGE:
		return kind{ErrOutOfRange, code.Code_OUT_OF_RANGE}
	case agentdv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED:
		return kind{ErrUnauthenticated, code.Code_UNAUTHENTICATED}
	case agentdv1.ErrorReason_ERROR_REASON_DATA_CORRUPT:
		return kind{ErrInternal, code.Code_DATA_LOSS}
	}
	return kind{ErrInternal, code.Code_INTERNAL}
}

// CodeOf is the status code reason always comes with.
func CodeOf(reason agentdv1.ErrorReason) code.Code { return kindOf(reason).code }

// ClassOf is the class (one of the Err* sentinels) reason belongs to.
func ClassOf(reason agentdv1.ErrorReason) error { return kindOf(reason).class }

// ReasonName is reason as an ErrorInfo detail carries it: its name without
// the enum's prefix, such as "SESSION_BUSY".
func ReasonName(reason agentdv1.ErrorReason) string {
	return strings.TrimPrefix(reason.String(), "ERROR_REASON_")
}

// Error is a refused request: why, for the status code and clients that
// branch on it, and the text a client reads, which names the ids involved
// and says what to do instead.
type Error struct {
	// Reason says why; it decides the status code ([CodeOf]).
	Reason agentdv1.ErrorReason
	// Message is the whole text for the client.
	Message string
	// Metadata names the refusal's particulars (see each reason's doc).
	Metadata map[string]string
	// RetryDelay, when positive, is when a retry can succeed (a limit that
	// resets).
	RetryDelay time.Duration
	// QuotaSubject, for a limit, names what is limited, such as
	// "tenant:acme" or "session:<id>".
	QuotaSubject string
}

// Error returns the message for the client.
func (e *Error) Error() string { return e.Message }

// Unwrap exposes the reason's class to errors.Is.
func (e *Error) Unwrap() error { return ClassOf(e.Reason) }

func refuse(reason agentdv1.ErrorReason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// with adds metadata to a refusal.
func (e *Error) with(kv ...string) *Error {
	if e.Metadata == nil {
		e.Metadata = make(map[string]string, len(kv)/2)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		e.Metadata[kv[i]] = kv[i+1]
	}
	return e
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
	// Reason types the refusal; ERROR_REASON_INVALID_ARGUMENT unless a
	// more precise one applies (ERROR_REASON_WORKSPACE_FORBIDDEN).
	Reason agentdv1.ErrorReason
	// Metadata names its particulars.
	Metadata map[string]string
}

// Error returns "field: description".
func (e *FieldError) Error() string { return e.Field + ": " + e.Description }

// Unwrap exposes ErrInvalid to errors.Is.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Description: fmt.Sprintf(format, args...), Reason: agentdv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT}
}
