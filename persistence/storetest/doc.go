// Package storetest is the conformance suite every persistence.Store engine
// must pass, so the service can switch engines without behaving
// differently. An engine's test calls Run with a Harness that opens fresh
// stores, reopens them and corrupts a stored payload.
package storetest
