// Package storetest is the conformance suite every persistence.Store engine
// must pass, so the service can switch engines without behaving
// differently. An engine's test calls Run with a Harness that opens fresh
// stores, reopens them and corrupts a stored payload.
//
// Engines that several replicas share (persistence.Shared) also call
// RunShared, with SharedCaps that say how leases expire (a clock the
// suite moves, or waiting on the database's) and how a second replica
// opens the same database.
package storetest
