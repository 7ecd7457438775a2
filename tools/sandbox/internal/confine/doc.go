// Package confine is the sandbox's helper side: agentd's binary started
// again as [HelperName] confines itself as its [Config] says and execs the
// command. It also holds what both sides share: the names, the inherited
// descriptors, the configuration and how it is written.
//
// It is a package of its own so that its init, which takes over a
// process started as the helper, runs before nearly all of agentd's
// other packages initialize: Go initializes a package as soon as its
// imports are, and this one imports only the standard library, x/sys and
// go-landlock. Every confined command, and the sandbox's probe, waits for
// that init; importing more here delays them all.
//
// Before the helper, the binary started as [SpawnName] makes its
// namespaces: spawn_linux.c, a C constructor that runs before the Go
// runtime, so that agentd need only vfork (see [SpawnArgs]). The
// package therefore needs cgo; without it [SpawnLinked] is false and
// every confined start fails with a set-up error saying so.
package confine
