//go:build !linux || !cgo

package sqlite

// returnFreedMemory does nothing here: there is no portable way to ask the
// C library for its free pages back.
func returnFreedMemory() {}

// cHeapInUse is -1: the C heap's use is not known here.
func cHeapInUse() int64 { return -1 }
