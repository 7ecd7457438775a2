package service

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/persistence"
)

// storeStatus maps a store error onto the gRPC status a client should see.
// what names the operation for INTERNAL errors, whose detail stays in logs.
func (s *Service) storeStatus(ctx context.Context, what string, err error) error {
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
		s.logger.ErrorContext(ctx, "store failure", "op", what, "err", err)
		return status.Errorf(codes.Internal, "%s failed in the transcript store; see the agentd log", what)
	}
}

// invalid builds an INVALID_ARGUMENT status that names the field.
func invalid(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}
