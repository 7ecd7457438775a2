package persistence

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Run records for programs (GetRun, ListRuns): what started a run, what it
// spent and what it answered are stored with it; see docs/ARCHITECTURE.md
// "Per-run settings and run records".

// ListingRuns is ListRuns, scoped by the session and the filters.
const ListingRuns = "runs"

// RunEnd is how a run ended, as EndRun stores it.
type RunEnd struct {
	// Outcome is how it ended; RUN_OUTCOME_UNSPECIFIED is invalid.
	Outcome agentdv1.RunOutcome
	// ErrorMessage says why it failed or was aborted.
	ErrorMessage string
	// Usage is the tokens and cost of its model calls added up; nil when
	// it made none.
	Usage *agentdv1.Usage
	// StructuredOutput is its typed answer, when it had an output schema
	// and completed.
	StructuredOutput *structpb.Struct
}

// Check refuses an end no engine may store.
func (e RunEnd) Check(runID string) error {
	if e.Outcome == agentdv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED {
		return &Error{Kind: ErrInvalid, RunID: runID, Detail: "outcome is unspecified"}
	}
	return nil
}

// ListRunsRequest selects a page of a session's runs, newest first (by
// start time, then id).
type ListRunsRequest struct {
	// SessionID is the session whose runs are listed. Required.
	SessionID string
	// PageSize is the most runs to return, with the bounds of
	// ListSessionsRequest.PageSize.
	PageSize int
	// PageToken is the NextPageToken of a previous page with the same
	// session and filters; empty for the first page. Another listing's
	// token fails with ErrInvalid.
	PageToken string
	// Outcomes keeps only runs with one of these outcomes
	// (RUN_OUTCOME_UNSPECIFIED: active); empty keeps every run.
	Outcomes []agentdv1.RunOutcome
	// StartAfter keeps only runs started at or after it, when not zero.
	StartAfter time.Time
	// StartBefore keeps only runs started before it, when not zero.
	StartBefore time.Time
	// Metadata keeps only runs whose request metadata has each key, with
	// this value unless the value is empty.
	Metadata map[string]string
}

// RunPage is one page of ListRuns.
type RunPage struct {
	// Runs are newest first.
	Runs []*Run
	// NextPageToken continues the listing; empty on the last page.
	NextPageToken string
}

// RunCursor is where a page of runs starts: below the run started at
// Start with id ID in the order (start time, id) descending. The zero
// cursor (Start zero) is before the newest run.
type RunCursor struct {
	Start time.Time
	ID    string
}

// Before reports whether a run started at start with id comes after the
// cursor in the listing (strictly older in (start, id) order).
func (c RunCursor) Before(start time.Time, id string) bool {
	if c.Start.IsZero() {
		return true
	}
	return start.Before(c.Start) || (start.Equal(c.Start) && id < c.ID)
}

// scope binds a page token to the session and the filters.
func (r ListRunsRequest) scope() string {
	outcomes := slices.Clone(r.Outcomes)
	slices.Sort(outcomes)
	var b strings.Builder
	b.WriteString(strconv.Quote(r.SessionID) + ";")
	for _, o := range outcomes {
		b.WriteString(strconv.Itoa(int(o)) + ",")
	}
	fmt.Fprintf(&b, ";%d;%d;", unixNanoOrZero(r.StartAfter), unixNanoOrZero(r.StartBefore))
	b.WriteString(LabelFilterScope(r.Metadata))
	return b.String()
}

func unixNanoOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// Cursor checks the request and returns its page size and where its page
// starts.
func (r ListRunsRequest) Cursor() (size int, c RunCursor, err error) {
	if size, err = PageSize(r.PageSize); err != nil {
		return 0, RunCursor{}, err
	}
	if r.PageToken == "" {
		return size, RunCursor{}, nil
	}
	// The position is "<start unix nanos>,<base64url id>", in the page
	// token format of EncodePageToken.
	raw, derr := base64.RawURLEncoding.DecodeString(r.PageToken)
	parts := strings.SplitN(string(raw), ":", 3)
	notToken := &Error{Kind: ErrInvalid, Detail: fmt.Sprintf("page token %q is not a page token", truncate(r.PageToken, 40))}
	if derr != nil || len(parts) != 3 {
		return 0, RunCursor{}, notToken
	}
	if parts[0] != ListingRuns || parts[1] != scopeHash(r.scope()) {
		return 0, RunCursor{}, &Error{Kind: ErrInvalid, Detail: "the page token was issued for another listing (another session or filter); start again with an empty page token"}
	}
	startText, idText, ok := strings.Cut(parts[2], ",")
	start, serr := strconv.ParseInt(startText, 10, 64)
	id, ierr := base64.RawURLEncoding.DecodeString(idText)
	if !ok || serr != nil || ierr != nil || start <= 0 {
		return 0, RunCursor{}, notToken
	}
	return size, RunCursor{Start: time.Unix(0, start), ID: string(id)}, nil
}

// NextPageToken is the token of the page after one that ended with run
// last.
func (r ListRunsRequest) NextPageToken(last *Run) string {
	pos := strconv.FormatInt(last.StartTime.UnixNano(), 10) + "," + base64.RawURLEncoding.EncodeToString([]byte(last.ID))
	return base64.RawURLEncoding.EncodeToString([]byte(ListingRuns + ":" + scopeHash(r.scope()) + ":" + pos))
}

// Page is the page of runs an engine read in listing order, at most
// size+1 of them (the extra one says another page follows): the first
// size, with the token of the next page when there is one.
func (r ListRunsRequest) Page(runs []*Run, size int) *RunPage {
	page := &RunPage{Runs: runs}
	if len(runs) > size {
		page.Runs = runs[:size]
		page.NextPageToken = r.NextPageToken(runs[size-1])
	}
	return page
}

// Matches reports whether run passes the request's filters (not its
// cursor), for engines that filter in memory.
func (r ListRunsRequest) Matches(run *Run) bool {
	if len(r.Outcomes) > 0 && !slices.Contains(r.Outcomes, run.Outcome) {
		return false
	}
	if !r.StartAfter.IsZero() && run.StartTime.Before(r.StartAfter) {
		return false
	}
	if !r.StartBefore.IsZero() && !run.StartTime.Before(r.StartBefore) {
		return false
	}
	md := run.Request.GetMetadata()
	for k, v := range r.Metadata {
		got, ok := md[k]
		if !ok || (v != "" && got != v) {
			return false
		}
	}
	return true
}

// EncodeRunRequest is the stored form of a run's request: nil for none.
// The prompt entry id is stored apart (SetRunPrompt), so it is left out.
func EncodeRunRequest(req *agentdv1.RunRequest) ([]byte, error) {
	if req == nil {
		return nil, nil
	}
	req = proto.CloneOf(req)
	req.PromptEntryId = ""
	return proto.Marshal(req)
}

// DecodeRunParts fills in a run's request, usage and structured output
// from their stored forms (nil for none: runs stored before run records
// have none) and the prompt entry id stored apart. A stored form that does
// not decode is reported with the run's id.
func DecodeRunParts(r *Run, request, usage, output []byte, promptEntryID string) error {
	if request != nil || promptEntryID != "" {
		r.Request = &agentdv1.RunRequest{}
		if err := proto.Unmarshal(request, r.Request); err != nil {
			return fmt.Errorf("run %q: its stored request does not decode: %w", r.ID, err)
		}
		r.Request.PromptEntryId = promptEntryID
	}
	if usage != nil {
		r.Usage = &agentdv1.Usage{}
		if err := proto.Unmarshal(usage, r.Usage); err != nil {
			return fmt.Errorf("run %q: its stored usage does not decode: %w", r.ID, err)
		}
	}
	if output != nil {
		r.StructuredOutput = &structpb.Struct{}
		if err := proto.Unmarshal(output, r.StructuredOutput); err != nil {
			return fmt.Errorf("run %q: its stored structured output does not decode: %w", r.ID, err)
		}
	}
	return nil
}

// EncodeRunEnd is the stored form of an end's usage and structured
// output: nil for what it lacks.
func EncodeRunEnd(e RunEnd) (usage, output []byte, err error) {
	if e.Usage != nil {
		if usage, err = proto.Marshal(e.Usage); err != nil {
			return nil, nil, err
		}
	}
	if e.StructuredOutput != nil {
		if output, err = proto.Marshal(e.StructuredOutput); err != nil {
			return nil, nil, err
		}
	}
	return usage, output, nil
}
