package service

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// status maps an error of the agent or the store onto the gRPC status a
// client should see. what names the operation for INTERNAL errors, whose
// detail stays in the log.
func (s *Service) status(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var fe *agent.FieldError
	if errors.As(err, &fe) {
		return fieldRefusal(fe.Reason, fe.Field, fe.Description, fe.Metadata)
	}
	var ae *agent.Error
	if errors.As(err, &ae) {
		return refusal(ae)
	}
	var perr *persistence.Error
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		if errors.As(err, &perr) {
			switch {
			case perr.EntryID != "":
				return refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_ENTRY_NOT_FOUND,
					Message:  fmt.Sprintf("entry %q not found in session %q", perr.EntryID, perr.SessionID),
					Metadata: map[string]string{"entry_id": perr.EntryID, "session_id": perr.SessionID}})
			case perr.SessionID != "":
				return refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_SESSION_NOT_FOUND,
					Message:  fmt.Sprintf("session %q not found; ListSessions shows the sessions that exist", perr.SessionID),
					Metadata: map[string]string{"session_id": perr.SessionID}})
			case perr.RunID != "":
				return refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_FOUND,
					Message: fmt.Sprintf("run %q not found", perr.RunID), Metadata: map[string]string{"run_id": perr.RunID}})
			}
		}
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, persistence.ErrInvalid):
		return refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, Message: err.Error()})
	case errors.Is(err, persistence.ErrConflict):
		return refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, Message: err.Error()})
	case errors.Is(err, persistence.ErrCorrupt):
		s.logger.ErrorContext(ctx, "corrupt data in the store", "op", what, "err", err)
		return refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_DATA_CORRUPT, Message: fmt.Sprintf("%s: %v", what, err)})
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the call was cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed")
	default:
		s.logger.ErrorContext(ctx, "internal failure", "op", what, "err", err)
		return refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_INTERNAL, Message: what + " failed inside agentd; see the agentd log"})
	}
}

// refusalDomain is the domain of the ErrorInfo details agentd sends.
const refusalDomain = "agentd.v1"

// refusal is the status of a refused request: the reason's code, the
// text, and the details a client branches on: ErrorInfo always, QuotaFailure
// for a limit, RetryInfo when a retry can succeed at a known time.
func refusal(e *agent.Error) error {
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: agent.ReasonName(e.Reason), Domain: refusalDomain, Metadata: e.Metadata}}
	if e.QuotaSubject != "" {
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
			{Subject: e.QuotaSubject, Description: e.Message},
		}})
	}
	if e.RetryDelay > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryDelay)})
	}
	return withDetails(status.New(codes.Code(agent.CodeOf(e.Reason)), e.Message), details...)
}

// fieldRefusal is the INVALID_ARGUMENT status naming field, in the text
// and as a google.rpc.BadRequest field violation, so a client can point at
// the field without parsing the text, with the ErrorInfo of reason.
func fieldRefusal(reason agentdv1.ErrorReason, field, desc string, metadata map[string]string) error {
	if reason == agentdv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		reason = agentdv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT
	}
	if metadata == nil {
		metadata = map[string]string{"field": field}
	}
	return withDetails(status.New(codes.Code(agent.CodeOf(reason)), field+": "+desc),
		&errdetails.ErrorInfo{Reason: agent.ReasonName(reason), Domain: refusalDomain, Metadata: metadata},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: desc}}})
}

// withDetails is st with details, or st alone if they cannot be encoded.
func withDetails(st *status.Status, details ...protoadapt.MessageV1) error {
	if with, err := st.WithDetails(details...); err == nil {
		return with.Err()
	}
	return st.Err()
}

// invalid builds the INVALID_ARGUMENT refusal of a field.
func invalid(field, format string, args ...any) error {
	return fieldRefusal(agentdv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, field, fmt.Sprintf(format, args...), nil)
}
