package service

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/agentd/agentd/persistence"
)

// The name checks accept exactly what these patterns, the documented
// forms, match.
var (
	idForm          = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9._:-]{1,%d}$`, persistence.MaxIDLength))
	runMetadataForm = regexp.MustCompile(`^[a-zA-Z0-9._:/-]{1,64}$`)
	tenantForm      = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,63}$`)
)

func checkNameForms(t *testing.T, s string) {
	t.Helper()
	for _, c := range []struct {
		name string
		got  bool
		form *regexp.Regexp
	}{
		{"validID", validID(s), idForm},
		{"run metadata key", madeOf(s, runMetadataKeyChars, maxRunMetadataKeyBytes), runMetadataForm},
		{"validTenant", validTenant(s), tenantForm},
	} {
		if want := c.form.MatchString(s); c.got != want {
			t.Errorf("%s(%q) = %v, the form %s says %v", c.name, s, c.got, c.form, want)
		}
	}
}

func TestNameChecks(t *testing.T) {
	for _, s := range []string{
		"", "a", "Z9", "run-1", "s.1:2_3", "a/b", "-lead", ".lead", "_lead", "9lead",
		"sp ace", "tab\t", "new\nline", "trailing\n", "é", "a\x00b", "ﬁ", "a*", "a+b", "a#",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65),
		strings.Repeat("b", persistence.MaxIDLength), strings.Repeat("b", persistence.MaxIDLength+1),
	} {
		checkNameForms(t, s)
	}
}

func FuzzNameChecks(f *testing.F) {
	f.Add("run-1")
	f.Add("a/b:c")
	f.Add("-x\n")
	f.Fuzz(func(t *testing.T, s string) { checkNameForms(t, s) })
}
