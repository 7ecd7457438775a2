package fspath

import "testing"

func TestWithin(t *testing.T) {
	tests := []struct {
		base, p, rel string
		ok           bool
	}{
		{"/srv/acme", "/srv/acme", ".", true},
		{"/srv/acme", "/srv/acme/ws/a", "ws/a", true},
		{"/srv/acme", "/srv/acme-evil", "", false},
		{"/srv/acme", "/srv", "", false},
		{"/srv/acme", "/srv/acme/../globex", "", false},
		{"src", "src/main.go", "main.go", true},
		{"src", "lib/x", "", false},
		{"/", "/etc", "etc", true},
	}
	for _, tc := range tests {
		if rel, ok := Within(tc.base, tc.p); rel != tc.rel || ok != tc.ok || Inside(tc.base, tc.p) != tc.ok {
			t.Errorf("Within(%q, %q) = %q, %v; want %q, %v", tc.base, tc.p, rel, ok, tc.rel, tc.ok)
		}
	}
}
