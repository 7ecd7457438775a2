package agent

import (
	"errors"
	"fmt"
	"testing"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"

	"github.com/agentd/agentd/persistence"
)

// A refusal carried from the replica that runs a run back to the one that
// received the request is the same refusal: kind, text and field.
func TestControlAnswersCarryRefusals(t *testing.T) {
	kinds := []error{ErrBusy, ErrIdle, ErrPrecondition, ErrNotFound, ErrExists, ErrLimit, ErrUnavailable, ErrConflict, ErrOutOfRange, ErrPermission}
	if len(kinds) != len(answerKinds) {
		t.Fatalf("%d kinds tested, %d carried: a kind was added without a name", len(kinds), len(answerKinds))
	}
	tests := []struct {
		name string
		err  error
	}{
		{"success", nil},
		{"field", invalid("items[0].entry_id", "%q is not offered", "e9")},
		{"wrapped field", fmt.Errorf("submit: %w", invalid("content", "empty"))},
		{"typed", beyond("acme", "tenants.acme.tools", "bash", "enable tool %q", "bash")},
	}
	for _, k := range kinds {
		tests = append(tests, struct {
			name string
			err  error
		}{k.Error(), refuse(k, "session %q: %v", "s1", k)})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ans := &agentdv1.ReplicaControlAnswer{}
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
				if !errors.As(got, &fe) || fe.Field != wantField.Field || fe.Description != wantField.Description {
					t.Fatalf("got %#v, want %#v", got, wantField)
				}
			case errors.As(tc.err, &want):
				var e *Error
				if !errors.As(got, &e) || e.Kind != want.Kind || e.Message != want.Message || e.Reason != want.Reason || fmt.Sprint(e.Metadata) != fmt.Sprint(want.Metadata) {
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
