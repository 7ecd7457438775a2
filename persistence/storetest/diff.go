package storetest

import (
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
)

// diff describes how got differs from want, comparing protobuf messages by
// content (protocmp) and times with Equal; empty when equal.
func diff(want, got any) string {
	return cmp.Diff(want, got, protocmp.Transform())
}
