package daemon

import (
	"testing"
)

func TestRedactDSN(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://agentd:secret@db:5432/agentd?sslmode=disable": "postgres://agentd:xxxxx@db:5432/agentd?sslmode=disable",
		"postgresql://db/agentd":                                  "postgresql://db/agentd",
		"host=db port=5432 user=agentd password=secret dbname=x":  "host=db port=5432 user=agentd dbname=x",
		"host=db password='a b c' dbname=x":                       "host=db dbname=x",
	} {
		if got := redactDSN(dsn); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", dsn, got, want)
		}
	}
}
