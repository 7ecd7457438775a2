package service

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// agentCodes maps the agent's refusals onto status codes.
var agentCodes = []struct {
	kind error
	code codes.Code
}{
	{agent.ErrBusy, codes.FailedPrecondition},
	{agent.ErrIdle, codes.FailedPrecondition},
	{agent.ErrPrecondition, codes.FailedPrecondition},
	{agent.ErrNotFound, codes.NotFound},
	{agent.ErrExists, codes.AlreadyExists},
	{agent.ErrLimit, codes.ResourceExhausted},
	{agent.ErrUnavailable, codes.Unavailable},
	{agent.ErrConflict, codes.Aborted},
	{agent.ErrOutOfRange, codes.OutOfRange},
	{agent.ErrPermission, codes.PermissionDenied},
}

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
		return withReason(invalid(fe.Field, "%s", fe.Description), fe.Reason, fe.Metadata)
	}
	var ae *agent.Error
	if errors.As(err, &ae) {
		for _, m := range agentCodes {
			if errors.Is(ae.Kind, m.kind) {
				return withReason(status.Error(m.code, ae.Message), ae.Reason, ae.Metadata)
			}
		}
	}
	var perr *persistence.Error
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		if errors.As(err, &perr) {
			switch {
			case perr.EntryID != "":
				return status.Errorf(codes.NotFound, "entry %q not found in session %q", perr.EntryID, perr.SessionID)
			case perr.SessionID != "":
				return status.Errorf(codes.NotFound, "session %q not found; ListSessions shows the sessions that exist", perr.SessionID)
			case perr.RunID != "":
				return status.Errorf(codes.NotFound, "run %q not found", perr.RunID)
			}
		}
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, persistence.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, persistence.ErrConflict):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, persistence.ErrCorrupt):
		s.logger.ErrorContext(ctx, "corrupt data in the store", "op", what, "err", err)
		return status.Errorf(codes.DataLoss, "%s: %v", what, err)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the call was cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed")
	default:
		s.logger.ErrorContext(ctx, "internal failure", "op", what, "err", err)
		return status.Errorf(codes.Internal, "%s failed inside agentd; see the agentd log", what)
	}
}

// refusalDomain is the domain of the ErrorInfo details agentd sends.
const refusalDomain = "agentd.v1"

// withReason adds a google.rpc.ErrorInfo detail typing the refusal (the
// name of an agentdv1.Refusal as its reason) to the status err, when the
// refusal has a type.
func withReason(err error, reason agentdv1.Refusal, metadata map[string]string) error {
	if reason == agentdv1.Refusal_REFUSAL_UNSPECIFIED {
		return err
	}
	st, _ := status.FromError(err)
	if withDetails, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason.String(), Domain: refusalDomain, Metadata: metadata}); derr == nil {
		return withDetails.Err()
	}
	return err
}

// invalid builds an INVALID_ARGUMENT status that names the field, in the
// text and as a google.rpc.BadRequest field violation, so a client can
// point at the field without parsing the text.
func invalid(field, format string, args ...any) error {
	desc := fmt.Sprintf(format, args...)
	st := status.New(codes.InvalidArgument, field+": "+desc)
	if withDetails, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: field, Description: desc},
	}}); err == nil {
		st = withDetails
	}
	return st.Err()
}
