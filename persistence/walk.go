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
}

// WalkToRoot returns the positions in nodes of the path from nodes[leaf]
// up to the root (or the context's start, see [WalkOptions]), root first.
// index maps an entry id to its position in nodes, which are in append
// order.
func WalkToRoot(ctx context.Context, sessionID string, nodes []PathNode, index map[string]int, leaf int, opts WalkOptions) ([]int, error) {
	var path []int // leaf first
	summaryAt, firstKept := -1, ""
	for at := leaf; ; {
		path = append(path, at)
		if opts.ContextOnly && nodes[at].Summary && summaryAt < 0 {
			summaryAt = len(path) - 1
			id, err := opts.FirstKept(ctx, nodes[at].ID)
			if err != nil {
				return nil, err
			}
			firstKept = id
		}
		if firstKept != "" && nodes[at].ID == firstKept && len(path)-1 > summaryAt {
			break
		}
		p := nodes[at].Parent
		if p == "" {
			if summaryAt >= 0 {
				// The first kept entry is not on the path: the context
				// starts at the summary.
				path = path[:summaryAt+1]
			}
			break
		}
		next, ok := index[p]
		if !ok || next >= at {
			return nil, BrokenParent(sessionID, nodes[at].ID, nodes[at].Seq, p)
		}
		at = next
	}
	slices.Reverse(path)
	return path, nil
}
