package main

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// interrupted turns the error of a stream cut by agentctl's own context
// (Ctrl-C, SIGTERM) into what happened to the run: a Prompt or Continue
// stream that ends takes its run with it (agentd aborts a run whose caller
// left, unless it was detached), so that is exit 3, as for any aborted
// run; an Attach only stops following. Other errors pass unchanged.
func interrupted(ctx context.Context, err error, owns bool) error {
	if ctx.Err() == nil || status.Code(err) != codes.Canceled {
		return err
	}
	if owns {
		return exitError{code: 3, message: "interrupted: the run was aborted"}
	}
	return exitError{code: 3, message: "interrupted: stopped following; the run goes on (agentctl attach follows it again)"}
}
