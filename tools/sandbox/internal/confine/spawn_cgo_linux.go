//go:build linux && cgo

package confine

// The spawn stage is C (spawn_linux.c) because it must run before the Go
// runtime starts threads: only a process of its own, not a vfork child of
// agentd, can enter a new user namespace cheaply.

// #cgo CFLAGS: -Wall -Werror
import "C"

// SpawnLinked says this binary holds the spawn stage, which needs cgo.
const SpawnLinked = true
