package service

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Every reason the proto declares reaches a client with the status code
// its proto comment names, an ErrorInfo of domain agentd.v1 whose reason
// is the name without its prefix, and the details of its kind: BadRequest
// for a field, QuotaFailure for a limit, RetryInfo when the retry time is
// known.
func TestRefusalDetails(t *testing.T) {
	documented := documentedCodes(t)
	values := agentdv1.ErrorReason(0).Descriptor().Values()
	if values.Len() < 30 {
		t.Fatalf("the proto declares %d reasons", values.Len())
	}
	for i := 1; i < values.Len(); i++ {
		reason := agentdv1.ErrorReason(values.Get(i).Number())
		t.Run(reason.String(), func(t *testing.T) {
			want, ok := documented[reason.String()]
			if !ok {
				t.Fatalf("the proto comment of %s names no status code", reason)
			}
			e := &agent.Error{Reason: reason, Message: "why", Metadata: map[string]string{"k": "v"}}
			if want == codes.ResourceExhausted {
				e.QuotaSubject, e.RetryDelay = "tenant:acme", 90*time.Second
			}
			st := status.Convert(refusal(e))
			if st.Code() != want || st.Message() != "why" {
				t.Fatalf("status %v %q, want %v %q", st.Code(), st.Message(), want, "why")
			}
			info := errorInfo(t, st)
			if info.GetDomain() != "agentd.v1" || info.GetReason() != strings.TrimPrefix(reason.String(), "ERROR_REASON_") || info.GetMetadata()["k"] != "v" {
				t.Fatalf("ErrorInfo %v", info)
			}
			var quota *errdetails.QuotaFailure
			var retry *errdetails.RetryInfo
			for _, d := range st.Details() {
				switch d := d.(type) {
				case *errdetails.QuotaFailure:
					quota = d
				case *errdetails.RetryInfo:
					retry = d
				}
			}
			if want == codes.ResourceExhausted {
				if quota.GetViolations()[0].GetSubject() != "tenant:acme" || retry.GetRetryDelay().AsDuration() != 90*time.Second {
					t.Fatalf("a limit's details: %v, %v", quota, retry)
				}
			} else if quota != nil || retry != nil {
				t.Fatalf("details a refusal did not ask for: %v, %v", quota, retry)
			}
		})
	}
	// A field refusal names the field twice: BadRequest and metadata.
	st := status.Convert(fieldRefusal(agentdv1.ErrorReason_ERROR_REASON_UNSPECIFIED, "config.tools[0].name", "unknown", nil))
	if st.Code() != codes.InvalidArgument || errorInfo(t, st).GetReason() != "INVALID_ARGUMENT" || errorInfo(t, st).GetMetadata()["field"] != "config.tools[0].name" {
		t.Fatalf("field refusal %v %v", st.Code(), st.Details())
	}
	var br *errdetails.BadRequest
	for _, d := range st.Details() {
		if b, ok := d.(*errdetails.BadRequest); ok {
			br = b
		}
	}
	if br.GetFieldViolations()[0].GetField() != "config.tools[0].name" {
		t.Fatalf("BadRequest %v", br)
	}
}

func errorInfo(t *testing.T, st *status.Status) *errdetails.ErrorInfo {
	t.Helper()
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	t.Fatalf("no ErrorInfo in %v", st.Details())
	return nil
}

// documentedCodes reads, from the proto, the status code each reason's
// comment names in parentheses: the documentation clients read.
func documentedCodes(t *testing.T) map[string]codes.Code {
	t.Helper()
	src, err := os.ReadFile("../proto/agentd/v1/service.proto")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	body = body[strings.Index(body, "enum ErrorReason {"):]
	body = body[:strings.Index(body, "\n}\n")]
	byName := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		byName[strings.ToUpper(regexp.MustCompile(`([a-z])([A-Z])`).ReplaceAllString(c.String(), "${1}_$2"))] = c
	}
	byName["CANCELLED"] = codes.Canceled
	out := map[string]codes.Code{}
	comment := ""
	codeRE := regexp.MustCompile(`\(([A-Z_]+)\)`)
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "//"):
			comment += " " + line
		case strings.HasPrefix(line, "ERROR_REASON_"):
			name := strings.Fields(line)[0]
			for _, m := range codeRE.FindAllStringSubmatch(comment, -1) {
				if c, ok := byName[m[1]]; ok {
					out[name] = c
				}
			}
			comment = ""
		}
	}
	return out
}
