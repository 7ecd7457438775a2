package tools

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// snapshot records every entry under dir with its mode, size, time and
// content, so a test can prove nothing there was touched.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + string(b)
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestEscapesAreRefused(t *testing.T) {
	f := newFixture(t, Options{})
	secret := filepath.Join(f.outside, "secret.txt")
	links := map[string]string{
		"secretlink":   secret,                              // absolute link to an outside file
		"rellink":      "../outside/secret.txt",             // relative link climbing out
		"outlink":      f.outside,                           // link to an outside directory
		"devnull":      "/dev/null",                         // device file outside
		"dangling-out": filepath.Join(f.outside, "new.txt"), // not yet existing outside file
		"sub/up":       "../..",                             // link to the parent of the root
	}
	if err := os.Mkdir(filepath.Join(f.root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, dest := range links {
		if err := os.Symlink(dest, filepath.Join(f.root, name)); err != nil {
			t.Fatal(err)
		}
	}
	f.write(t, "inside.txt", "top secret\n")
	before := snapshot(t, f.outside)
	rootBefore := snapshot(t, f.root)

	lexical := func(p string) string { return fmt.Sprintf("Path %s is outside the workspace %s", p, f.root) }
	// Where a link leads is never named: a tool result must not reveal
	// paths outside the workspace.
	escapes := func(p string) string {
		return fmt.Sprintf("Path %s leads outside the workspace %s through a symbolic link", p, f.root)
	}
	cases := []struct {
		kind, path, want string
	}{
		{"dot-dot", "../outside/secret.txt", lexical("../outside/secret.txt")},
		{"dot-dot inside a path", "sub/../../outside/secret.txt", lexical("sub/../../outside/secret.txt")},
		{"dot-dot alone", "..", lexical("..")},
		{"absolute outside", secret, lexical(secret)},
		{"absolute root parent", filepath.Dir(f.root), lexical(filepath.Dir(f.root))},
		{"absolute system file", "/etc/passwd", lexical("/etc/passwd")},
		{"absolute symlink", "secretlink", escapes("secretlink")},
		{"relative symlink", "rellink", escapes("rellink")},
		{"through a linked directory", "outlink/secret.txt", escapes("outlink/secret.txt")},
		{"linked directory", "outlink", escapes("outlink")},
		{"device via symlink", "devnull", escapes("devnull")},
		{"dangling symlink to outside", "dangling-out", escapes("dangling-out")},
		{"symlink to parent", "sub/up/outside/secret.txt", escapes("sub/up/outside/secret.txt")},
	}
	type call struct {
		tool string
		args func(p string) map[string]any
	}
	calls := []call{
		{ReadFile, func(p string) map[string]any { return map[string]any{"path": p} }},
		{WriteFile, func(p string) map[string]any { return map[string]any{"path": p, "content": "pwned"} }},
		{EditFile, func(p string) map[string]any {
			return map[string]any{"path": p, "old_text": "top", "new_text": "pwned"}
		}},
		{Ls, func(p string) map[string]any { return map[string]any{"path": p} }},
		{Find, func(p string) map[string]any { return map[string]any{"pattern": "*", "path": p} }},
		{Grep, func(p string) map[string]any { return map[string]any{"pattern": "secret", "path": p} }},
	}
	for _, tc := range cases {
		for _, c := range calls {
			t.Run(tc.kind+"/"+c.tool, func(t *testing.T) {
				res, err := f.call(t, c.tool, c.args(tc.path))
				if err == nil {
					t.Fatalf("succeeded: %q", textOf(t, res))
				}
				if err.Error() != tc.want {
					t.Fatalf("error %q\nwant  %q", err, tc.want)
				}
				if !strings.HasPrefix(tc.path, "/") && !strings.HasPrefix(tc.path, "..") && strings.Contains(err.Error(), filepath.Dir(f.outside)+"/outside") {
					t.Fatalf("error %q reveals a path outside the workspace", err)
				}
			})
		}
	}
	if after := snapshot(t, f.outside); after != before {
		t.Fatalf("outside directory changed:\n%s\nwas\n%s", after, before)
	}
	if after := snapshot(t, f.root); after != rootBefore {
		t.Fatalf("workspace changed:\n%s\nwas\n%s", after, rootBefore)
	}

	// Walking tools do not follow links out of the workspace.
	res := f.ok(t, Grep, map[string]any{"pattern": "top secret"})
	if got := textOf(t, res); got != "inside.txt:1: top secret" {
		t.Fatalf("grep followed a link out: %q", got)
	}
	res = f.ok(t, Find, map[string]any{"pattern": "secret.txt"})
	if got := textOf(t, res); got != "No files found matching pattern" {
		t.Fatalf("find followed a link out: %q", got)
	}
}

// TestRootEnforcesConfinement bypasses the explicit checks, as a race that
// swaps a path for a link after the check would, and shows os.Root still
// refuses with the workspace's wording.
func TestRootEnforcesConfinement(t *testing.T) {
	f := newFixture(t, Options{})
	if err := os.Symlink(filepath.Join(f.outside, "secret.txt"), filepath.Join(f.root, "late")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside/secret.txt", filepath.Join(f.root, "late-rel")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, f.outside)
	for _, name := range []string{"late", "late-rel"} {
		for _, flag := range []int{os.O_RDONLY, os.O_WRONLY, os.O_RDWR} {
			file, _, err := f.ws.openRegular(target{shown: name, rel: name}, flag)
			if err == nil {
				file.Close()
				t.Fatalf("%s opened with flag %d", name, flag)
			}
			if want := fmt.Sprintf("Path %s is outside the workspace %s", name, f.root); err.Error() != want {
				t.Fatalf("error %q, want %q", err, want)
			}
		}
	}
	if after := snapshot(t, f.outside); after != before {
		t.Fatal("outside directory changed")
	}
}

// The workspace is opened refusing a symbolic link anywhere in its path:
// a directory swapped for a link after New resolved the path (to another
// tenant's directory, say) is not where the tools end up.
func TestWorkspaceOpenRefusesLinksInItsPath(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if r, err := openRoot(filepath.Join(base, "link")); err == nil {
		r.Close()
		t.Fatal("opened a workspace through a symbolic link")
	}
	r, err := openRoot(real)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}
