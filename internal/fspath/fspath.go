// Package fspath holds the path arithmetic that every layer's confinement
// checks share, so they all agree on what lies inside what.
package fspath

import "path/filepath"

// Within reports p relative to base when p is base ("." then) or lies
// below it, comparing cleaned paths without touching the file system.
func Within(base, p string) (rel string, ok bool) {
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return "", false
	}
	if rel == "." || filepath.IsLocal(rel) {
		return rel, true
	}
	return "", false
}

// Inside reports whether p is base or lies below it.
func Inside(base, p string) bool {
	_, ok := Within(base, p)
	return ok
}
