//go:build linux && !cgo

package confine

// SpawnLinked says this binary holds the spawn stage, which needs cgo: a
// build without it has no sandbox.
const SpawnLinked = false
