package persistence_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/agentd/agentd/persistence"
)

// walkTree is a ← b ← s1(keeps b) ← c ← s2(keeps c) ← d, and a branch
// b ← x ← s3, a summary keeping an entry off its path; keeps says what
// each summary keeps.
func walkTree() (tree []persistence.PathNode, keeps map[string]string) {
	return []persistence.PathNode{
		{Seq: 1, ID: "a"},
		{Seq: 2, ID: "b", Parent: "a"},
		{Seq: 3, ID: "s1", Parent: "b", Summary: true},
		{Seq: 4, ID: "c", Parent: "s1"},
		{Seq: 5, ID: "s2", Parent: "c", Summary: true},
		{Seq: 6, ID: "d", Parent: "s2"},
		{Seq: 7, ID: "x", Parent: "b"},
		{Seq: 8, ID: "s3", Parent: "x", Summary: true},
	}, map[string]string{"s1": "b", "s2": "c", "s3": "c"}
}

func TestWalkToRoot(t *testing.T) {
	tree, keeps := walkTree()
	tests := []struct {
		name        string
		leaf        string
		contextOnly bool
		want        []string
	}{
		{"whole path", "d", false, []string{"a", "b", "s1", "c", "s2", "d"}},
		{"latest summary decides", "d", true, []string{"c", "s2", "d"}},
		{"earlier summary", "c", true, []string{"b", "s1", "c"}},
		{"no summary on the path", "x", true, []string{"a", "b", "x"}},
		{"first kept off the path starts at the summary", "s3", true, []string{"s3"}},
		{"root", "a", true, []string{"a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			index := map[string]int{}
			for i, n := range tree {
				index[n.ID] = i
			}
			reads := 0
			path, err := persistence.WalkToRoot(context.Background(), "s", tree, index[tc.leaf], persistence.WalkOptions{
				ContextOnly: tc.contextOnly,
				FirstKept: func(_ context.Context, id string) (string, error) {
					reads++
					return keeps[id], nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, at := range path {
				got = append(got, tree[at].ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("path %v, want %v", got, tc.want)
			}
			if reads > 1 {
				t.Errorf("read %d summaries, want at most the latest", reads)
			}
		})
	}
}

func TestWalkToRootRefusesBrokenParents(t *testing.T) {
	tests := []struct {
		name string
		tree []persistence.PathNode
	}{
		{"missing parent", []persistence.PathNode{{Seq: 1, ID: "a"}, {Seq: 2, ID: "b", Parent: "gone"}}},
		{"parent newer than its child (a cycle)", []persistence.PathNode{{Seq: 1, ID: "a", Parent: "b"}, {Seq: 2, ID: "b", Parent: "a"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			index := map[string]int{}
			for i, n := range tc.tree {
				index[n.ID] = i
			}
			_, err := persistence.WalkToRoot(context.Background(), "s", tc.tree, len(tc.tree)-1, persistence.WalkOptions{})
			var ce *persistence.CorruptEntryError
			if !errors.As(err, &ce) || ce.SessionID != "s" || !errors.Is(err, persistence.ErrCorrupt) {
				t.Fatalf("got %v, want a *CorruptEntryError of session s", err)
			}
		})
	}
}

// A Walker is done as soon as no older entry can be on the path, so an
// engine reading newest first stops there.
func TestWalkerStopsWhereThePathEnds(t *testing.T) {
	tree, keeps := walkTree()
	tests := []struct {
		name        string
		leaf        string
		contextOnly bool
		wantPath    int
		wantOffered int // newest first, until done
	}{
		{"at the latest summary's first kept entry", "d", true, 3, 5}, // s3 x d s2 c
		{"at the root without ContextOnly", "d", false, 6, 8},
		{"at the root when no summary is on the path", "x", true, 3, 8},
		{"at the root when the first kept entry is off the path", "s3", true, 1, 8},
		{"a summary as the leaf", "s2", true, 2, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := persistence.NewWalker("s", tc.leaf, persistence.WalkOptions{ContextOnly: tc.contextOnly,
				FirstKept: func(_ context.Context, id string) (string, error) { return keeps[id], nil }})
			offered := 0
			for at := len(tree) - 1; at >= 0; at-- {
				offered++
				_, done, err := w.Offer(context.Background(), tree[at])
				if err != nil {
					t.Fatal(err)
				}
				if done {
					break
				}
			}
			n, err := w.End()
			if err != nil || n != tc.wantPath || offered != tc.wantOffered {
				t.Fatalf("path of %d after %d entries (%v), want %d after %d", n, offered, err, tc.wantPath, tc.wantOffered)
			}
		})
	}
	w := persistence.NewWalker("s", "gone", persistence.WalkOptions{})
	for at := len(tree) - 1; at >= 0; at-- {
		w.Offer(context.Background(), tree[at])
	}
	if _, err := w.End(); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("a leaf that is not there: %v, want ErrNotFound", err)
	}
}
