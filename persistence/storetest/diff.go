package storetest

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// diffSlices describes how got differs from want; empty when equal.
func diffSlices[T comparable](want, got []T) string {
	if slices.Equal(want, got) {
		return ""
	}
	return fmt.Sprintf("want %v, got %v", want, got)
}

// diffEntries names the first entry that differs; empty when equal.
func diffEntries(want, got []*agentdv1.Entry) string {
	for i := range min(len(want), len(got)) {
		if !proto.Equal(want[i], got[i]) {
			return fmt.Sprintf("entry %d differs:\nwant %v\ngot  %v", i, want[i], got[i])
		}
	}
	if len(want) != len(got) {
		return fmt.Sprintf("want %d entries %v, got %d %v", len(want), ids(want), len(got), ids(got))
	}
	return ""
}

// diffSessions compares every field of two session records; empty when
// equal.
func diffSessions(want, got *persistence.Session) string {
	switch {
	case want.ID != got.ID, want.Title != got.Title, want.LeafEntryID != got.LeafEntryID:
		return fmt.Sprintf("want %+v, got %+v", want, got)
	case !want.CreateTime.Equal(got.CreateTime), !want.UpdateTime.Equal(got.UpdateTime):
		return fmt.Sprintf("times: want %v/%v, got %v/%v", want.CreateTime, want.UpdateTime, got.CreateTime, got.UpdateTime)
	case !maps.Equal(want.Labels, got.Labels):
		return fmt.Sprintf("labels: want %v, got %v", want.Labels, got.Labels)
	case !proto.Equal(want.Config, got.Config):
		return fmt.Sprintf("config: want %v, got %v", want.Config, got.Config)
	}
	return ""
}
