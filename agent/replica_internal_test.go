package agent

import (
	"errors"
	"fmt"
	"testing"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/replicapb"

	"github.com/agentd/agentd/persistence"
)

// A refusal carried from the replica that runs a run back to the one that
// received the request is the same refusal: kind, text and field.
func TestControlAnswersCarryRefusals(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"success", nil},
		{"field", invalid("items[0].entry_id", "%q is not offered", "e9")},
		{"wrapped field", fmt.Errorf("submit: %w", invalid("content", "empty"))},
		{"typed", beyond("acme", "tenants.acme.tools", "bash", "enable tool %q", "bash")},
	}
	// Every reason the proto declares crosses the wire as itself.
	values := agentdv1.ErrorReason(0).Descriptor().Values()
	for i := 1; i < values.Len(); i++ {
		r := agentdv1.ErrorReason(values.Get(i).Number())
		tests = append(tests, struct {
			name string
			err  error
		}{r.String(), refuse(r, "session %q: %v", "s1", r).with("session_id", "s1")})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ans := &replicapb.ReplicaControlAnswer{}
			if tc.err != nil {
				ans = errorAnswer(tc.err)
			}
			got := answerError(ans)
			if tc.err == nil {
				if got != nil {
					t.Fatalf("success carried as %v", got)
				}
				return
			}
			var want *Error
			var wantField *FieldError
			switch {
			case errors.As(tc.err, &wantField):
				var fe *FieldError
				if !errors.As(got, &fe) || fe.Field != wantField.Field || fe.Description != wantField.Description || fe.Reason != wantField.Reason {
					t.Fatalf("got %#v, want %#v", got, wantField)
				}
			case errors.As(tc.err, &want):
				var e *Error
				if !errors.As(got, &e) || e.Message != want.Message || e.Reason != want.Reason || fmt.Sprint(e.Metadata) != fmt.Sprint(want.Metadata) {
					t.Fatalf("got %#v, want %#v", got, want)
				}
			}
		})
	}
	// A failure that is no refusal (the owner's store failed) reaches the
	// sender as UNAVAILABLE with the cause in the text.
	got := answerError(errorAnswer(persistence.ErrFenced))
	if !errors.Is(got, ErrUnavailable) || got.Error() != "the replica running the run failed: lease lost" {
		t.Fatalf("an internal failure carried as %v", got)
	}
}
