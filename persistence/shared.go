package persistence

import (
	"context"
	"errors"
	"strconv"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// ErrFenced: a write of a run was refused because the writer's claim on
// the run no longer holds (its lease expired, or the run was closed by
// another replica). The writer must stop the run.
var ErrFenced = errors.New("lease lost")

// Shared is what an engine that several agentd processes (replicas) use at
// once offers beside [Store]. Ownership is per run: a replica claims a run
// with a lease it renews, and every write of the run is fenced by that
// claim, so a replica that was paused or cut off past its lease cannot
// write into a session another replica has taken over. Times of leases
// are the database's clock, never a replica's.
//
// Runs started with [Store.StartRun] have no owner and are not subject to
// leases; a replica uses ClaimRun only.
type Shared interface {
	Store

	// ClaimRun records the start of a run owned by owner, with a lease
	// that expires after lease unless renewed, and returns the claim. A
	// run id used before fails with ErrConflict, like StartRun; a session
	// that already has an active claimed run fails with an
	// *ActiveRunError (matching ErrConflict) that names it.
	// req is the run's request, stored as StartRun stores it, and the run
	// starts with StartRun's reservation.
	ClaimRun(ctx context.Context, sessionID, runID, owner string, lease time.Duration, req *agentdv1.RunRequest) (Fence, error)
	// RenewLeases extends by lease the leases of those of runIDs that owner
	// still holds (active, claimed by owner, lease not expired) and returns
	// the others: the runs owner lost.
	RenewLeases(ctx context.Context, owner string, runIDs []string, lease time.Duration) (lost []string, err error)
	// ActiveRun returns the active claimed run of the session, with its
	// owner, or an error matching ErrNotFound when there is none.
	ActiveRun(ctx context.Context, sessionID string) (*Run, error)
	// CloseExpiredRuns marks the active claimed runs whose lease expired
	// as RUN_OUTCOME_INTERRUPTED and returns them, oldest first. Each run
	// is returned to one caller only, however many replicas call it at
	// once; a run with a valid lease is never touched.
	CloseExpiredRuns(ctx context.Context) ([]*Run, error)

	// Fenced returns the writer of the run f claimed: each of its writes
	// stores nothing and fails with ErrFenced unless f still holds (the
	// same owner and generation, the run active and its lease not
	// expired). The exceptions are AppendEvents and ReserveEvents, which
	// still store for the holder that ended the run with the writer's
	// EndRun (the generation stays then): a run's last events (agent_end)
	// follow its end. A run ended any other way (Store.EndRun,
	// CloseExpiredRuns) refuses them. Append and SetLeaf must name the
	// run's session, and AppendEvents, ReserveEvents and EndRun the run f
	// claimed; otherwise they fail with ErrInvalid.
	Fenced(f Fence) RunWriter

	// SendControl stores a control message for the owner of the active
	// run runID and wakes it (topic ControlTopic(owner)); it returns the
	// control's id. ErrNotFound when the run is not active or not claimed.
	SendControl(ctx context.Context, runID string, payload []byte) (int64, error)
	// PendingControls returns the unanswered controls of runs owner
	// claimed, oldest first.
	PendingControls(ctx context.Context, owner string) ([]Control, error)
	// AnswerControl stores the answer to a control and wakes the sender
	// (topic AnswerTopic(id)). Answering twice fails with ErrConflict.
	AnswerControl(ctx context.Context, id int64, answer []byte) error
	// ControlAnswer returns the answer to a control, or nil while there
	// is none.
	ControlAnswer(ctx context.Context, id int64) ([]byte, error)

	// Watch returns a channel that receives (coalesced, never blocking
	// the engine) when something of topic may have changed, and a
	// function that stops the watch. Wake-ups carry no data: the watcher
	// reads the store. After the engine lost and regained its connection
	// for signals, every watch is woken, since signals in between are
	// lost.
	Watch(topic string) (<-chan struct{}, func())
	// Ping reports whether the database is reachable.
	Ping(ctx context.Context) error

	// AppendFeed stores payloads, in order, as changes origin made, and
	// wakes FeedTopic once they are committed. Seqs increase in commit
	// order across every handle: a reader that has seen seq n never
	// finds a change with a lower seq committed later.
	AppendFeed(ctx context.Context, origin string, payloads ...[]byte) error
	// ReadFeed returns up to limit stored changes with a seq greater than
	// after, oldest first, and the seq of the last change pruned
	// (PruneFeed; 0 for none): a reader whose after is lower missed the
	// changes up to it, and every change returned comes after it.
	ReadFeed(ctx context.Context, after int64, limit int) (changes []FeedChange, pruned int64, err error)
	// FeedHead returns the seq of the last change stored (0 for none), to
	// read the feed from now.
	FeedHead(ctx context.Context) (int64, error)
	// PruneFeed deletes the changes stored longer ago than age (by the
	// database's clock), oldest first.
	PruneFeed(ctx context.Context, age time.Duration) error
}

// FeedChange is one change in the feed replicas share so that each can
// tell its watchers what the others did (Shared.AppendFeed). The store
// does not read the payload.
type FeedChange struct {
	// Seq is the change's place in the feed, from 1.
	Seq int64
	// Origin is the replica that stored it.
	Origin string
	// Payload is what it stored, as given.
	Payload []byte
}

// RunWriter is the writes a run makes, with the signatures of the
// [Store] methods of the same names: a Store is the RunWriter of the runs
// it alone writes (Store.StartRun), and Shared.Fenced gives the writer of
// a claimed run.
type RunWriter interface {
	// Append is Store.Append.
	Append(ctx context.Context, sessionID string, entries ...*agentdv1.Entry) error
	// SetLeaf is Store.SetLeaf.
	SetLeaf(ctx context.Context, sessionID, entryID string) error
	// AppendEvents is Store.AppendEvents.
	AppendEvents(ctx context.Context, runID string, events []Event) error
	// ReserveEvents is Store.ReserveEvents.
	ReserveEvents(ctx context.Context, runID string, through uint64) error
	// SetRunPrompt is Store.SetRunPrompt.
	SetRunPrompt(ctx context.Context, runID, entryID string) error
	// EndRun is Store.EndRun.
	EndRun(ctx context.Context, runID string, end RunEnd) error
}

// A Store writes the runs it alone writes.
var _ RunWriter = Store(nil)

// Fence is one replica's claim on a run, carried by every write of the
// run.
type Fence struct {
	// RunID is the run claimed.
	RunID string
	// Owner is the replica that claimed it.
	Owner string
	// Generation is the claim's generation: it changes whenever the run
	// changes hands or is closed, which invalidates the fence.
	Generation int64
}

// CheckRun returns an error matching ErrInvalid unless runID is the run
// f claims: the check of an engine's fenced writer (Shared.Fenced) on
// the run its AppendEvents and EndRun name.
func (f Fence) CheckRun(runID string) error {
	if runID != f.RunID {
		return &Error{Kind: ErrInvalid, RunID: runID, Detail: "the writer is fenced by a claim on run " + strconv.Quote(f.RunID)}
	}
	return nil
}

// Control is a control message for the owner of a run.
type Control struct {
	// ID identifies the control; answers name it.
	ID int64
	// RunID is the run the control is for.
	RunID string
	// Payload is what the sender stored, as given.
	Payload []byte
}

// ActiveRunError says a session already has an active claimed run.
type ActiveRunError struct {
	// Run is that run, with its owner.
	Run *Run
}

// Error names the run and its owner.
func (e *ActiveRunError) Error() string {
	return "session " + e.Run.SessionID + " has active run " + e.Run.ID + " owned by replica " + e.Run.Owner
}

// Unwrap matches ErrConflict.
func (e *ActiveRunError) Unwrap() error { return ErrConflict }

// Watch topics of a Shared engine.

// EventsTopic is woken when run runID stores events.
func EventsTopic(runID string) string { return "events:" + runID }

// ControlTopic is woken when a control for a run of owner is stored.
func ControlTopic(owner string) string { return "control:" + owner }

// FeedTopic is woken when changes are appended to the feed
// (Shared.AppendFeed).
const FeedTopic = "feed"

// AnswerTopic is woken when control id is answered.
func AnswerTopic(id int64) string { return "answer:" + strconv.FormatInt(id, 10) }
