package provider

import "fmt"

// MaxToolNameLength is the longest tool name every provider API accepts.
const MaxToolNameLength = 64

// IsToolNameChar reports whether r may appear in a tool name: every
// provider API accepts a-z A-Z 0-9 _ and -.
func IsToolNameChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// CheckToolName returns an error saying what a tool name may be unless
// name is one every provider API accepts.
func CheckToolName(name string) error {
	valid := name != "" && len(name) <= MaxToolNameLength
	for _, r := range name {
		valid = valid && IsToolNameChar(r)
	}
	if !valid {
		if len(name) > MaxToolNameLength+6 {
			name = name[:MaxToolNameLength+6] + "…"
		}
		return fmt.Errorf("%q is not a valid tool name (1 to %d characters of a-z A-Z 0-9 _ -)", name, MaxToolNameLength)
	}
	return nil
}
