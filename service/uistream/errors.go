package uistream

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// errorBody is the JSON of a refused request: the gRPC status the same
// call gets, so a client branches on the same reason over either.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	// Code is the gRPC code's name, such as "UNAUTHENTICATED".
	Code string `json:"code"`
	// Reason is the ErrorInfo reason gRPC clients get: the
	// agentdv1.ErrorReason name without its prefix, such as
	// "SESSION_NOT_FOUND".
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
	// Field is the request field at fault, for INVALID_ARGUMENT.
	Field    string            `json:"field,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// writeError answers with err's status as JSON.
func writeError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	d := errorDetail{Code: st.Code().String(), Message: st.Message()}
	for _, det := range st.Details() {
		switch v := det.(type) {
		case *errdetails.ErrorInfo:
			d.Reason, d.Metadata = v.GetReason(), v.GetMetadata()
		case *errdetails.BadRequest:
			if fv := v.GetFieldViolations(); len(fv) > 0 {
				d.Field = fv[0].GetField()
			}
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if st.Code() == codes.Unauthenticated {
		h.Set("WWW-Authenticate", `Bearer realm="agentd"`)
	}
	// The HTTP status of the same meaning, as google.rpc.Code documents it.
	w.WriteHeader(runtime.HTTPStatusFromCode(st.Code()))
	_ = json.NewEncoder(w).Encode(errorBody{Error: d})
}

// invalid is the INVALID_ARGUMENT status of a bad field of the HTTP
// request, with the details a refused gRPC request carries.
func invalid(field, format string, args ...any) error {
	st, err := status.New(codes.InvalidArgument, field+": "+fmt.Sprintf(format, args...)).WithDetails(
		&errdetails.ErrorInfo{Reason: agent.ReasonName(agentdv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT), Domain: "agentd.v1", Metadata: map[string]string{"field": field}},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: fmt.Sprintf(format, args...)}}},
	)
	if err != nil {
		return status.Error(codes.InvalidArgument, field+": "+fmt.Sprintf(format, args...))
	}
	return st.Err()
}
