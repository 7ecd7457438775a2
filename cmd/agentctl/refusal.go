package main

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// refusalDomain is the domain of the ErrorInfo details of agentd's
// refusals.
const refusalDomain = "agentd.v1"

// refusedFor reports whether err is agentd's refusal for reason, as its
// ErrorInfo detail names it (the reason without its ERROR_REASON_ prefix).
func refusedFor(err error, reason agentdv1.ErrorReason) bool {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return false
	}
	want := agentdv1.ErrorReason_name[int32(reason)][len("ERROR_REASON_"):]
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == refusalDomain && info.GetReason() == want {
			return true
		}
	}
	return false
}
