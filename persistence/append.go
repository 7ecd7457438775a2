package persistence

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// CheckAppend refuses what no engine may store, before an Append touches
// anything: an empty batch, a nil entry, an entry without a payload kind,
// an id longer than MaxIDLength. It returns each entry's kind (see
// [EntryKind]).
func CheckAppend(sessionID string, entries []*agentdv1.Entry) ([]string, error) {
	if len(entries) == 0 {
		return nil, &Error{Kind: ErrInvalid, SessionID: sessionID, Detail: "no entries to append"}
	}
	kinds := make([]string, len(entries))
	for i, e := range entries {
		if e == nil {
			return nil, &Error{Kind: ErrInvalid, SessionID: sessionID, Detail: fmt.Sprintf("entry %d is nil", i)}
		}
		k, err := EntryKind(e)
		if err != nil {
			return nil, &Error{Kind: ErrInvalid, SessionID: sessionID, EntryID: e.GetId(), Detail: fmt.Sprintf("entry %d: %v", i, err)}
		}
		if len(e.GetId()) > MaxIDLength {
			return nil, &Error{Kind: ErrInvalid, SessionID: sessionID, Detail: fmt.Sprintf("entry %d: id is %d bytes, more than %d", i, len(e.GetId()), MaxIDLength)}
		}
		kinds[i] = k
	}
	return kinds, nil
}

// ParentNotInSession is the error for a batch whose first entry names a
// parent the session does not hold.
func ParentNotInSession(sessionID, parentID string) *Error {
	return &Error{Kind: ErrInvalid, SessionID: sessionID, EntryID: parentID, Detail: "parent entry is not in this session"}
}

// LinkBatch fills in a checked batch in place as every engine stores it:
// the batch hangs below parent (the first entry's parent_id when set,
// which the engine has found in the session, else the leaf), each later
// entry below the one before it, entries without an id get a fresh one
// ([NewID]) and entries without a time get now. It returns the id of the
// last entry, the session's new leaf. Only the first entry may name a
// parent of its own.
func LinkBatch(sessionID string, entries []*agentdv1.Entry, parent string, now time.Time) (string, error) {
	for i, e := range entries {
		if i > 0 && e.ParentId != "" && e.ParentId != parent {
			return "", &Error{Kind: ErrInvalid, SessionID: sessionID, EntryID: e.Id,
				Detail: fmt.Sprintf("entry %d: parent %q is not the entry before it in the batch (%q); only the first entry of a batch may name a parent", i, e.ParentId, parent)}
		}
		if e.Id == "" {
			// 64 random bits: unique within the session by construction.
			e.Id = NewID()
		}
		e.ParentId = parent
		if e.Time == nil {
			e.Time = timestamppb.New(now)
		}
		parent = e.Id
	}
	return parent, nil
}

// CheckRedact refuses a Redact no engine may carry out, before it touches
// anything: no replacement, a nil or payload-less one, an id named twice,
// and a notice that is not a redaction notice an Append would take. It
// returns the notice's kind, for appending it.
func CheckRedact(sessionID string, replacements []*agentdv1.Entry, notice *agentdv1.Entry) ([]string, error) {
	if len(replacements) == 0 {
		return nil, &Error{Kind: ErrInvalid, SessionID: sessionID, Detail: "no entries to redact"}
	}
	if notice.GetRedactionNotice() == nil {
		return nil, &Error{Kind: ErrInvalid, SessionID: sessionID, Detail: "the notice of a redaction must be a redaction notice entry"}
	}
	seen := map[string]bool{}
	for i, e := range replacements {
		if _, err := EntryKind(e); e == nil || err != nil {
			return nil, &Error{Kind: ErrInvalid, SessionID: sessionID, Detail: fmt.Sprintf("replacement %d has no payload", i)}
		}
		if seen[e.GetId()] {
			return nil, &Error{Kind: ErrInvalid, SessionID: sessionID, EntryID: e.GetId(), Detail: "the entry is named twice"}
		}
		seen[e.GetId()] = true
	}
	return CheckAppend(sessionID, []*agentdv1.Entry{notice})
}

// Replaced is a redaction's replacement as stored: it keeps the stored
// entry's id, parent and time, which Redact never changes. It refuses a
// replacement of another kind.
func Replaced(sessionID string, stored, replacement *agentdv1.Entry) (*agentdv1.Entry, error) {
	was, _ := EntryKind(stored)
	is, _ := EntryKind(replacement)
	if was != is {
		return nil, &Error{Kind: ErrInvalid, SessionID: sessionID, EntryID: stored.GetId(), Detail: fmt.Sprintf("a redacted %s must stay a %s, not become a %s", was, was, is)}
	}
	out := proto.CloneOf(replacement)
	out.Id, out.ParentId, out.Time, out.RunId = stored.GetId(), stored.GetParentId(), stored.GetTime(), stored.GetRunId()
	return out, nil
}
