package persistence

import (
	"context"
	"fmt"
	"slices"
)

// PathNode is an entry's place in a session's tree, as an engine reads it
// without the payload.
type PathNode struct {
	// Seq is the entry's append order within its session.
	Seq int64
	// ID and Parent are the entry's id and its parent's ("" for a root).
	ID, Parent string
	// Summary is set for a compaction summary, where a model context may
	// start.
	Summary bool
	// Answer is set for an assistant message, whose tool calls the tool
	// results after it answer.
	Answer bool
}

// BrokenParent is the damage an engine reports for an entry whose parent
// is missing or was appended after it. Parents are always written before
// their children, so refusing anything else also rules out cycles.
func BrokenParent(sessionID, entryID string, seq int64, parent string) *CorruptEntryError {
	return &CorruptEntryError{SessionID: sessionID, EntryID: entryID, Seq: seq,
		Err: fmt.Errorf("parent %q is missing or not older than the entry", parent)}
}

// WalkOptions chooses how [WalkToRoot] ends.
type WalkOptions struct {
	// ContextOnly stops at the latest compaction summary's first kept
	// entry (see [ContextStart]) instead of the root.
	ContextOnly bool
	// FirstKept reads the first_kept_entry_id of the summary entry id; it
	// is called at most once per walk, and only with ContextOnly.
	FirstKept func(ctx context.Context, id string) (string, error)
	// SinceAnswer stops at the latest assistant message too, when the walk
	// reaches it first (see [Store.PathSinceAnswer]).
	SinceAnswer bool
}

// WalkToRoot returns the positions in nodes of the path from nodes[leaf]
// up to the root (or the context's start, see [WalkOptions]), root first.
// nodes are in append order. It is a [Walker] offered nodes[leaf],
// nodes[leaf-1], ... down to the first.
func WalkToRoot(ctx context.Context, sessionID string, nodes []PathNode, leaf int, opts WalkOptions) ([]int, error) {
	w := NewWalker(sessionID, nodes[leaf].ID, opts)
	var path []int // leaf first
	for at := leaf; at >= 0; at-- {
		onPath, done, err := w.Offer(ctx, nodes[at])
		if err != nil {
			return nil, err
		}
		if onPath {
			path = append(path, at)
		}
		if done {
			break
		}
	}
	return EndWalk(w, path)
}

// Walker follows the path from a leaf towards the root while an engine
// reads a session's entries newest first, so that the engine stops reading
// where the path ends: at the root or, with [WalkOptions.ContextOnly], at
// the latest compaction summary's first kept entry. A long compacted
// session's context then costs what the model sees, not the whole
// transcript. Parents are always older than their children, so every
// entry of the path comes after the one before it in that order.
type Walker struct {
	sessionID string
	opts      WalkOptions
	next      string   // the id the path continues with
	last      PathNode // the oldest entry on the path so far
	onPath    int      // entries on the path so far
	summaryAt int      // the latest summary's place on the path (leaf = 0), or -1
	firstKept string
	ends      int // the path's length once done; -1 while walking
}

// NewWalker starts a walk from the entry leaf of session sessionID.
func NewWalker(sessionID, leaf string, opts WalkOptions) *Walker {
	return &Walker{sessionID: sessionID, opts: opts, next: leaf, summaryAt: -1, ends: -1}
}

// Offer takes the session's next entry in descending append order. It
// reports whether n is on the path and whether the walk is done, when no
// older entry can be on it and the engine should stop reading.
func (w *Walker) Offer(ctx context.Context, n PathNode) (onPath, done bool, err error) {
	if w.ends >= 0 {
		return false, true, nil
	}
	if n.ID != w.next {
		return false, false, nil
	}
	w.last = n
	w.onPath++
	if w.opts.ContextOnly && n.Summary && w.summaryAt < 0 {
		w.summaryAt = w.onPath - 1
		if w.firstKept, err = w.opts.FirstKept(ctx, n.ID); err != nil {
			return false, false, err
		}
	}
	switch {
	case w.opts.SinceAnswer && n.Answer:
		w.ends = w.onPath
	case w.firstKept != "" && n.ID == w.firstKept && w.onPath-1 > w.summaryAt:
		w.ends = w.onPath
	case n.Parent == "":
		w.ends = w.onPath
		if w.summaryAt >= 0 {
			// The first kept entry is not on the path: the context starts
			// at the summary.
			w.ends = w.summaryAt + 1
		}
	}
	w.next = n.Parent
	return true, w.ends >= 0, nil
}

// EndWalk ends w (see [Walker.End]) given what Offer put on the path, leaf
// first, and returns the path root first: the step every engine's walk
// ends with.
func EndWalk[T any](w *Walker, leafFirst []T) ([]T, error) {
	n, err := w.End()
	if err != nil {
		return nil, err
	}
	path := leafFirst[:n]
	slices.Reverse(path)
	return path, nil
}

// End is called once the engine has offered what it read: it returns how
// many of the entries Offer put on the path, leaf first, form it (after a
// compaction whose first kept entry is not on the path, only those up to
// the summary), or the damage that left the walk unfinished: a leaf that
// is not there, or a parent missing or not older than its child.
func (w *Walker) End() (int, error) {
	switch {
	case w.ends >= 0:
		return w.ends, nil
	case w.onPath == 0:
		return 0, EntryNotFound(w.sessionID, w.next)
	default:
		return 0, BrokenParent(w.sessionID, w.last.ID, w.last.Seq, w.next)
	}
}
