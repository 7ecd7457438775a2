package persistence

import (
	"context"
	"fmt"
	"maps"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// StartReservedSeq is the reservation a run starts with: StartRun and
// ClaimRun record it as the run's ReservedSeq, so its log streams its
// first events without waiting for a ReserveEvents write, which under load
// queues behind other sessions' commits.
const StartReservedSeq = 1 << 14

// Store keeps sessions, their transcripts, their runs and the runs' event
// logs. Implementations are safe for concurrent use. Every method that names a session or entry that
// does not exist fails with an error matching ErrNotFound; no failing call
// leaves a partial write behind.
type Store interface {
	// CreateSession stores a new session. An empty ID gets a fresh one; a
	// given ID that is already used fails with ErrConflict.
	CreateSession(ctx context.Context, params CreateSessionParams) (*Session, error)
	// GetSession returns one session.
	GetSession(ctx context.Context, sessionID string) (*Session, error)
	// ListSessions returns sessions newest first, a page at a time.
	ListSessions(ctx context.Context, req ListSessionsRequest) (*SessionPage, error)
	// UpdateSession changes the fields of a session that u sets and returns
	// the session as it is now; UpdateTime moves.
	UpdateSession(ctx context.Context, sessionID string, u SessionUpdate) (*Session, error)
	// DeleteSession removes a session with its entries and runs. Later calls
	// naming it fail with ErrNotFound. What its model calls cost stays
	// counted for its tenant (TenantSpend).
	DeleteSession(ctx context.Context, sessionID string) error
	// SessionSpend returns what the model calls stored in a session cost,
	// on every branch (see EntrySpend).
	SessionSpend(ctx context.Context, sessionID string) (Spend, error)
	// TenantSpend returns what the model calls stored in the sessions of
	// tenant ("": of no tenant) since since cost, deleted sessions
	// included.
	TenantSpend(ctx context.Context, tenant string, since time.Time) (Spend, error)

	// Append stores entries as a chain in one transaction: the first entry
	// hangs below its ParentId when set (a branch), otherwise below the
	// current leaf; each later entry hangs below the one before it; the leaf
	// moves to the last entry. Append fills in Id (when empty), ParentId and
	// Time (when unset) on the given entries so the caller sees exactly what
	// was stored; when it fails it restores them and stores nothing.
	Append(ctx context.Context, sessionID string, entries ...*agentdv1.Entry) error
	// Redact replaces, in one transaction, the payloads of the session's
	// entries that the replacements name by id (each keeps its id,
	// parent, time, run and place in the tree, and must keep its kind:
	// see Replaced), appends notice at the session's leaf as Append does
	// (filling in its id, parent and time), and drops the event logs of
	// the session's runs, which hold the same content as it streamed
	// (their runs read EventsPruned). An id that is not the session's
	// fails with ErrNotFound and changes nothing. Engines overwrite the
	// replaced bytes where they can; see each engine.
	Redact(ctx context.Context, sessionID string, replacements []*agentdv1.Entry, notice *agentdv1.Entry) error
	// SetLeaf moves the session's leaf to an existing entry, selecting
	// another path of the tree; an empty entryID moves it before the
	// first entry, so the next Append starts a new root.
	SetLeaf(ctx context.Context, sessionID, entryID string) error
	// GetEntry returns one entry.
	GetEntry(ctx context.Context, sessionID, entryID string) (*agentdv1.Entry, error)
	// Path returns the entries from the root to the session's leaf; empty for
	// an empty transcript. This is what the model context is built from.
	Path(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error)
	// ContextPath returns the part of the path to the session's leaf that a
	// model context is built from: the whole path, or, when the path holds
	// a compaction summary, the entries from ContextStart on. Engines read
	// (and decode) only those entries, so a long compacted session loads
	// in time proportional to what the model sees.
	ContextPath(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error)
	// PathSinceAnswer returns the end of the context path (ContextPath)
	// from its latest assistant message on, or all of it when it holds
	// none: what decides whether a tool result may be appended, since one
	// answers a call of that message (see AnswerStart). Engines read only
	// those entries, so it costs what followed the latest answer, not the
	// session's length.
	PathSinceAnswer(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error)
	// PathTo returns the entries from the root to entryID, which need not be
	// the leaf (for example to show an abandoned branch).
	PathTo(ctx context.Context, sessionID, entryID string) ([]*agentdv1.Entry, error)
	// Entries returns every entry of the session, branches included, in
	// append order, a page at a time.
	Entries(ctx context.Context, sessionID string, req EntriesRequest) (*EntryPage, error)

	// Tree returns every entry of the session as a tree node (no payload),
	// in append order, a page at a time, with the same paging as Entries.
	Tree(ctx context.Context, sessionID string, req EntriesRequest) (*TreePage, error)
	// Labels returns the current label of each labelled entry of the
	// session (see [Labels]), by entry id.
	Labels(ctx context.Context, sessionID string) (map[string]string, error)

	// StartRun records that a run of the session started, so a crash before
	// EndRun is detectable later, with the request that started it (nil:
	// none), and reserves its first StartReservedSeq seqs (see
	// ReserveEvents). A run id that was used before fails with ErrConflict.
	StartRun(ctx context.Context, sessionID, runID string, req *agentdv1.RunRequest) error
	// SetRunPrompt records the entry id of the run's prompt, once it is
	// stored: the run's Request.PromptEntryId.
	SetRunPrompt(ctx context.Context, runID, entryID string) error
	// EndRun records how a run ended, with its usage and structured
	// output. Ending a run twice fails with ErrConflict.
	EndRun(ctx context.Context, runID string, end RunEnd) error
	// GetRun returns one run.
	GetRun(ctx context.Context, runID string) (*Run, error)
	// ListRuns returns a page of a session's runs, newest first; an
	// unknown session fails with ErrNotFound.
	ListRuns(ctx context.Context, req ListRunsRequest) (*RunPage, error)
	// CloseInterruptedRuns marks every run that started but never ended as
	// RUN_OUTCOME_INTERRUPTED and returns them, oldest first. The agent
	// calls it once at start-up, while it is the database's only owner and
	// before accepting requests, to repair what a crash left behind.
	CloseInterruptedRuns(ctx context.Context) ([]*Run, error)

	// AppendEvents stores the next events of a run's event log in one
	// batch. The first event's Seq must be one more than the run's LastSeq
	// and every later one must follow without a gap; otherwise nothing is
	// stored and the call fails with ErrConflict (someone else wrote the
	// run's log). Events may be appended after the run ended: its last
	// events (agent_end) are. On a run that ended with a ReservedSeq
	// larger than its LastSeq, the first Seq may instead be one more than
	// ReservedSeq: the log then has a gap where events streamed and were
	// never stored (see ReserveEvents). An empty batch is ErrInvalid.
	AppendEvents(ctx context.Context, runID string, events []Event) error
	// ReserveEvents records that the run's log may stream events up to
	// seq through before they are stored: Run.ReservedSeq becomes through
	// unless it is larger already. Whoever closes the run's log after a
	// crash continues after the reservation, so its agent_end never takes
	// the seq of an event a client already received.
	ReserveEvents(ctx context.Context, runID string, through uint64) error
	// Events returns at most limit (which must be positive) stored events
	// of the run with a seq greater than after, in seq order; empty when
	// there are none (yet, or any more: see Run.EventsPruned).
	Events(ctx context.Context, runID string, after uint64, limit int) ([]Event, error)
	// PruneEvents deletes the event logs of runs that ended before cutoff,
	// marks those runs EventsPruned and returns how many it pruned. Run
	// records and transcripts are kept.
	PruneEvents(ctx context.Context, endedBefore time.Time) (int, error)

	// Close releases the store. Calls after Close fail.
	Close() error
}

// Session is the store's record of a session: what survives a restart. It is
// not the wire agentdv1.Session, which also carries runtime state (whether a
// run is active) that only the agent knows.
type Session struct {
	// ID is unique among sessions.
	ID string
	// Title is a human-readable title; may be empty.
	Title string
	// Labels are the key/value pairs ListSessions filters on; never nil on a
	// returned session.
	Labels map[string]string
	// Config is the session's configuration; never nil on a returned session.
	Config *agentdv1.SessionConfig
	// CreateTime is when the session was created.
	CreateTime time.Time
	// UpdateTime is when the session last changed (created, appended to, or
	// its leaf moved).
	UpdateTime time.Time
	// LeafEntryID is the current leaf; empty for an empty transcript.
	LeafEntryID string
	// LastSeq is the seq of the session's newest entry, 0 for none. Every
	// change to the tree appends an entry (a redaction its notice), so a
	// session whose LeafEntryID and LastSeq are unchanged has the same path.
	LastSeq uint64
	// Origin is where the session was forked from; zero when it was not.
	Origin Origin
	// Tenant is the tenant the session belongs to; empty for a session of
	// no tenant (agentd without tenants, or an admin's).
	Tenant string
}

// Origin names the session and entry a session was forked from, or the
// session, run and tool call that spawned it as a subagent.
type Origin struct {
	SessionID, EntryID string
	// RunID, ToolCallID and Profile are a subagent's: the parent's run and
	// spawn_agent call, and the profile it was spawned with.
	RunID, ToolCallID, Profile string
}

// CreateSessionParams are the caller-chosen fields of a new session.
type CreateSessionParams struct {
	// ID is the session's id; empty asks the store to assign one.
	ID string
	// Title is optional.
	Title string
	// Labels are optional.
	Labels map[string]string
	// Config is stored as given; nil stores an empty configuration.
	Config *agentdv1.SessionConfig
	// Origin is where a forked session comes from; optional.
	Origin Origin
	// Tenant the session belongs to; empty for none. At most MaxIDLength
	// bytes.
	Tenant string
}

// Prepare checks the params and returns the session's id (a fresh one when
// ID is empty) and the encoding of its configuration, as every engine
// stores them.
func (p CreateSessionParams) Prepare() (id string, config []byte, err error) {
	id = p.ID
	if id == "" {
		id = NewID()
	} else if len(id) > MaxIDLength {
		return "", nil, &Error{Kind: ErrInvalid, Detail: fmt.Sprintf("session id is %d bytes, more than %d", len(id), MaxIDLength)}
	}
	if len(p.Tenant) > MaxIDLength {
		return "", nil, &Error{Kind: ErrInvalid, SessionID: id, Detail: fmt.Sprintf("tenant is %d bytes, more than %d", len(p.Tenant), MaxIDLength)}
	}
	cfg := p.Config
	if cfg == nil {
		cfg = &agentdv1.SessionConfig{}
	}
	if config, err = proto.Marshal(cfg); err != nil {
		return "", nil, &Error{Kind: ErrInvalid, SessionID: id, Detail: fmt.Sprintf("config: %v", err)}
	}
	return id, config, nil
}

// Created is the record of the session these params create with id at
// time at (which engines store at the precision they keep): empty, and
// sharing nothing with p.
func (p CreateSessionParams) Created(id string, at time.Time) *Session {
	labels := maps.Clone(p.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	cfg := &agentdv1.SessionConfig{}
	if p.Config != nil {
		cfg = proto.CloneOf(p.Config)
	}
	return &Session{ID: id, Title: p.Title, Labels: labels, Config: cfg, Origin: p.Origin, Tenant: p.Tenant, CreateTime: at, UpdateTime: at}
}

// SessionUpdate names the fields UpdateSession changes; nil fields stay.
type SessionUpdate struct {
	// Title, when set, is the new title.
	Title *string
	// Labels, when SetLabels is true, replace every label.
	Labels    map[string]string
	SetLabels bool
	// Config, when set, replaces the configuration.
	Config *agentdv1.SessionConfig
}

// Page size bounds shared by every engine, matching the wire contract's
// ListSessions and GetTranscript.
const (
	// DefaultPageSize is used when a request's page size is 0.
	DefaultPageSize = 100
	// MaxPageSize is the largest page a request may ask for; larger sizes
	// are reduced to it.
	MaxPageSize = 1000
)

// The listings whose page tokens engines issue; see EncodePageToken.
const (
	// ListingSessions is ListSessions, scoped by LabelFilterScope.
	ListingSessions = "sessions"
	// ListingEntries is Entries, scoped by the session id.
	ListingEntries = "entries"
)

// ListSessionsRequest selects a page of sessions.
type ListSessionsRequest struct {
	// PageSize is the most sessions to return; 0 means DefaultPageSize,
	// more than MaxPageSize means MaxPageSize, negative is invalid.
	PageSize int
	// PageToken is the NextPageToken of a previous page with the same
	// LabelFilter; empty for the first page. A token that the store did not
	// issue for this filter fails with ErrInvalid.
	PageToken string
	// LabelFilter keeps only sessions that carry every one of these labels
	// with exactly these values.
	LabelFilter map[string]string
	// OriginSessionID, when set, keeps only sessions forked from it.
	OriginSessionID string
	// Tenant keeps only the sessions of this tenant ("": of no tenant),
	// unless AllTenants is set. The zero value lists no tenant's
	// sessions, so a caller that forgets to scope a listing shows too
	// little, never another tenant's.
	Tenant     string
	AllTenants bool
}

// SessionPage is one page of ListSessions.
type SessionPage struct {
	// Sessions are newest first.
	Sessions []*Session
	// NextPageToken continues the listing; empty on the last page.
	NextPageToken string
}

// EntriesRequest selects a page of a session's entries.
type EntriesRequest struct {
	// PageSize is the most entries to return, with the same bounds as
	// ListSessionsRequest.PageSize.
	PageSize int
	// PageToken is the NextPageToken of a previous page of the same
	// session; empty for the first page. A token that the store did not
	// issue for this session fails with ErrInvalid.
	PageToken string
}

// EntryPage is one page of Entries.
type EntryPage struct {
	// Entries are in append order.
	Entries []*agentdv1.Entry
	// NextPageToken continues the listing; empty on the last page.
	NextPageToken string
}

// TreeNode is an entry without its payload.
type TreeNode struct {
	ID, ParentID string
	// Kind is [EntryKind] of the entry.
	Kind string
	// Preview is [Preview] of the entry.
	Preview string
	// Time is when the entry was written.
	Time time.Time
}

// TreePage is one page of Tree.
type TreePage struct {
	// Nodes are in append order.
	Nodes []TreeNode
	// NextPageToken continues the listing; empty on the last page.
	NextPageToken string
}

// Run is the store's record of one run of the agent loop.
type Run struct {
	// ID is unique among runs.
	ID string
	// SessionID is the session the run belongs to.
	SessionID string
	// StartTime is when StartRun was called.
	StartTime time.Time
	// EndTime is when the run ended; zero while it is active.
	EndTime time.Time
	// Outcome is how the run ended; RUN_OUTCOME_UNSPECIFIED while it is
	// active.
	Outcome agentdv1.RunOutcome
	// ErrorMessage says why the run failed or was aborted; empty otherwise.
	ErrorMessage string
	// LastSeq is the seq of the last event stored in the run's event log;
	// 0 before the first batch. It stays when the events are pruned.
	LastSeq uint64
	// ReservedSeq is the largest seq ReserveEvents recorded for the run;
	// 0 for none. Events up to it may have reached clients without being
	// stored.
	ReservedSeq uint64
	// EventsPruned says the run's event log was deleted by PruneEvents.
	EventsPruned bool
	// Owner is the replica that claimed the run (Shared.ClaimRun); empty
	// for a run started with StartRun.
	Owner string
	// LeaseExpiry is when the owner's lease on the active run expires
	// unless renewed; zero for a run without owner.
	LeaseExpiry time.Time
	// Request is what started the run; nil for a run stored before run
	// records (or started without one).
	Request *agentdv1.RunRequest
	// Usage is what its model calls spent, set when it ended; nil when
	// none was recorded.
	Usage *agentdv1.Usage
	// StructuredOutput is its typed answer, when it had one.
	StructuredOutput *structpb.Struct
}

// Event is one stored event of a run's event log. The transcript stays the
// source of truth; the event log is what lets a client resume a stream
// (Attach) after a restart or from another process.
type Event struct {
	// Seq is the event's position in its run, from 1.
	Seq uint64
	// Data is the binary protobuf encoding of the agentd.v1.AgentEvent,
	// returned as given: the store does not decode it.
	Data []byte
	// Delta, when set on an appended event, says the event is that
	// [Delta] and Data is what [Delta.Encode] returns: the store may keep
	// the facts instead of Data (a batch's deltas then take about a fifth
	// of the bytes to compress and store) and rebuild Data from them. It
	// is nil on events read back.
	Delta *Delta
}

// Ended reports whether the run has an outcome.
func (r *Run) Ended() bool { return !r.EndTime.IsZero() }
