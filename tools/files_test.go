package tools

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
)

func TestNewRefusesBadRoots(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	writeFile(t, file, "x")
	tests := []struct {
		name, root string
		opts       Options
		want       string
	}{
		{"empty", "", Options{}, "workspace root is empty"},
		{"relative", "rel/dir", Options{}, "is not an absolute path"},
		{"missing", filepath.Join(dir, "nope"), Options{}, "no such file or directory"},
		{"file", file, Options{}, "is not a directory"},
		{"negative", dir, Options{MaxOutputBytes: -1}, "Options.MaxOutputBytes must not be negative"},
		{"timeout above max", dir, Options{BashTimeout: 20e9, MaxBashTimeout: 10e9}, "exceeds MaxBashTimeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws, err := New(tc.root, tc.opts)
			if err == nil {
				ws.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestNewResolvesRootSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(real, "a.txt"), "hello\n")
	ws, err := New(link, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if ws.Root() != real {
		t.Fatalf("Root() = %s, want %s", ws.Root(), real)
	}
	tool, _ := ws.Tool(ReadFile)
	// An absolute path may use the root as given or as resolved.
	for _, p := range []string{filepath.Join(link, "a.txt"), filepath.Join(real, "a.txt")} {
		res, err := tool.Execute(t.Context(), agentloop.Call{ID: "c", Args: structOf(t, map[string]any{"path": p})})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if got := textOf(t, res); !strings.Contains(got, "hello") {
			t.Fatalf("%s: got %q", p, got)
		}
	}
}

func TestDefinitions(t *testing.T) {
	defs := Definitions()
	if len(defs) != len(Names()) {
		t.Fatalf("%d definitions for %d names", len(defs), len(Names()))
	}
	var tools []agentloop.Tool
	for i, d := range defs {
		if d.GetName() != Names()[i] {
			t.Errorf("definition %d is %s, want %s", i, d.GetName(), Names()[i])
		}
		if d.GetDescription() == "" || d.GetParameters() == nil {
			t.Errorf("%s: missing description or schema", d.GetName())
		}
		tools = append(tools, agentloop.FuncTool{Def: d})
	}
	if _, err := agentloop.NewToolSet(tools...); err != nil {
		t.Fatalf("schemas do not compile: %v", err)
	}
	// Callers get their own copies.
	defs[0].Description = "changed"
	if Definitions()[0].GetDescription() == "changed" {
		t.Fatal("Definitions shares its messages")
	}
	if d, ok := Definition(Grep); !ok || d.GetName() != Grep {
		t.Fatalf("Definition(grep) = %v, %v", d, ok)
	}
	if _, ok := Definition("nope"); ok {
		t.Fatal("Definition(nope) found")
	}

	readOnly := map[string]bool{ReadFile: true, Ls: true, Find: true, Grep: true, WriteFile: false, EditFile: false, Bash: false, "nope": false}
	for name, want := range readOnly {
		if got := ReadOnly(name); got != want {
			t.Errorf("ReadOnly(%s) = %v, want %v", name, got, want)
		}
		if got := IsBuiltin(name); got != (name != "nope") {
			t.Errorf("IsBuiltin(%s) = %v", name, got)
		}
	}

	f := newFixture(t, Options{MaxOutputBytes: 1000, MaxOutputLines: 7})
	for i, tool := range f.ws.Tools() {
		if tool.Definition().GetName() != Names()[i] {
			t.Errorf("tool %d is %s", i, tool.Definition().GetName())
		}
	}
	// A workspace's descriptions state its own limits.
	rt, _ := f.ws.Tool(ReadFile)
	if d := rt.Definition().GetDescription(); !strings.Contains(d, "7 lines or 1000B") {
		t.Errorf("read_file description ignores options: %s", d)
	}
	if _, ok := f.ws.Tool("nope"); ok {
		t.Fatal("Tool(nope) found")
	}
}

func TestSchemasRejectBadArguments(t *testing.T) {
	f := newFixture(t, Options{})
	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{ReadFile, map[string]any{}, "path"},
		{ReadFile, map[string]any{"path": "a", "offset": 0}, "offset"},
		{ReadFile, map[string]any{"path": "a", "extra": 1}, "extra"},
		{EditFile, map[string]any{"path": "a", "old_text": "", "new_text": "b"}, "old_text"},
		{EditFile, map[string]any{"path": "a", "oldText": "x", "newText": "y"}, "old_text"},
		{Bash, map[string]any{"command": "true", "timeout": 0}, "timeout"},
		{Grep, map[string]any{"pattern": "x", "context": -1}, "context"},
	}
	for _, tc := range tests {
		s := structOf(t, tc.args)
		_, err := f.set.ValidateArguments(tc.tool, s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: error %v does not name %q", tc.tool, tc.args, err, tc.want)
		}
	}
}

func TestReadFile(t *testing.T) {
	f := newFixture(t, Options{MaxOutputLines: 5, MaxOutputBytes: 200})
	f.write(t, "three.txt", "alpha\nbeta\ngamma\n")
	f.write(t, "crlf.txt", "one\r\ntwo\r\n")
	f.write(t, "seven.txt", "1\n2\n3\n4\n5\n6\n7")
	f.write(t, "empty.txt", "")
	f.write(t, "wide.txt", strings.Repeat("x", 50)+"\n"+strings.Repeat("y", 50)+"\n"+strings.Repeat("z", 50)+"\n"+strings.Repeat("w", 50)+"\n")
	f.write(t, "long.txt", "short\n"+strings.Repeat("L", 500)+"\n")
	f.write(t, "bad-utf8.txt", "ok \xff\xfe end\n")
	f.write(t, "bin.dat", "ELF\x00\x01\x02binary")
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"whole file", map[string]any{"path": "three.txt"}, "     1\talpha\n     2\tbeta\n     3\tgamma"},
		{"offset", map[string]any{"path": "three.txt", "offset": 2}, "     2\tbeta\n     3\tgamma"},
		{"limit with more lines", map[string]any{"path": "three.txt", "limit": 1}, "     1\talpha\n\n[2 more lines in file. Use offset=2 to continue.]"},
		{"offset and limit", map[string]any{"path": "three.txt", "offset": 2, "limit": 1}, "     2\tbeta\n\n[1 more lines in file. Use offset=3 to continue.]"},
		{"limit covering the rest", map[string]any{"path": "three.txt", "offset": 2, "limit": 5}, "     2\tbeta\n     3\tgamma"},
		{"crlf", map[string]any{"path": "crlf.txt"}, "     1\tone\n     2\ttwo"},
		{"line cap", map[string]any{"path": "seven.txt"}, "     1\t1\n     2\t2\n     3\t3\n     4\t4\n     5\t5\n\n[Showing lines 1-5 of 7. Use offset=6 to continue.]"},
		{"line cap from offset", map[string]any{"path": "seven.txt", "offset": 2}, "     2\t2\n     3\t3\n     4\t4\n     5\t5\n     6\t6\n\n[Showing lines 2-6 of 7. Use offset=7 to continue.]"},
		{"byte cap", map[string]any{"path": "wide.txt"}, "     1\t" + strings.Repeat("x", 50) + "\n     2\t" + strings.Repeat("y", 50) + "\n     3\t" + strings.Repeat("z", 50) + "\n\n[Showing lines 1-3 of 4 (200B limit). Use offset=4 to continue.]"},
		{"first line too long", map[string]any{"path": "long.txt", "offset": 2}, "[Line 2 is 500B, exceeds 200B limit. Use bash: sed -n '2p' long.txt | head -c 200]"},
		{"empty file", map[string]any{"path": "empty.txt"}, "(empty file)"},
		{"invalid utf-8", map[string]any{"path": "bad-utf8.txt"}, "     1\tok \uFFFD end"},
		{"absolute path inside", map[string]any{"path": filepath.Join(f.root, "three.txt"), "limit": 1}, "     1\talpha\n\n[2 more lines in file. Use offset=2 to continue.]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := f.ok(t, ReadFile, tc.args)
			if got := textOf(t, res); got != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	res := f.ok(t, ReadFile, map[string]any{"path": "seven.txt", "offset": 2})
	d := detailsOf(t, res)
	if d["start_line"] != 2.0 || d["end_line"] != 6.0 || d["total_lines"] != 7.0 || d["truncated_by"] != "lines" {
		t.Fatalf("details %v", d)
	}
}

func TestReadFileErrors(t *testing.T) {
	f := newFixture(t, Options{})
	f.write(t, "three.txt", "a\nb\nc\n")
	f.write(t, "bin.dat", "ELF\x00\x01\x02binary")
	f.write(t, "empty.txt", "")
	if err := os.Mkdir(filepath.Join(f.root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"missing", map[string]any{"path": "nope.txt"}, "File not found: nope.txt"},
		{"offset beyond end", map[string]any{"path": "three.txt", "offset": 4}, "Offset 4 is beyond end of file (3 lines total)"},
		{"offset beyond empty file", map[string]any{"path": "empty.txt", "offset": 2}, "Offset 2 is beyond end of file (0 lines total)"},
		{"binary", map[string]any{"path": "bin.dat"}, "Cannot read bin.dat: it is a binary file (application/octet-stream). read_file reads text files and png, jpeg, gif or webp images"},
		{"directory", map[string]any{"path": "dir"}, "Path dir is a directory, not a file"},
		{"root", map[string]any{"path": "."}, "Path . is a directory, not a file"},
		{"through a file", map[string]any{"path": "three.txt/x"}, "File not found: three.txt/x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.call(t, ReadFile, tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	// Defensive checks behind the schema.
	direct := []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, `missing required argument "path"`},
		{map[string]any{"path": ""}, "path must not be empty"},
		{map[string]any{"path": 3.0}, `argument "path" must be a string`},
		{map[string]any{"path": "three.txt", "offset": 1.5}, `argument "offset" must be a whole number`},
		{map[string]any{"path": "three.txt", "limit": 0.0}, `argument "limit" must be at least 1`},
		{map[string]any{"path": "three.txt", "offset": "x"}, `argument "offset" must be a number`},
		{map[string]any{"path": "a\x00b"}, "contains a NUL byte"},
	}
	for _, tc := range direct {
		_, err := f.direct(t, ReadFile, tc.args)
		if err == nil || err.Error() != tc.want && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func encodeImage(t *testing.T, format string) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{R: 255, A: 255})
	var buf bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&buf, img)
	case "jpeg":
		err = jpeg.Encode(&buf, img, nil)
	case "gif":
		err = gif.Encode(&buf, img, nil)
	case "webp":
		// The RIFF container header is what sniffing looks at.
		buf.WriteString("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadFileImages(t *testing.T) {
	f := newFixture(t, Options{MaxImageBytes: 4096})
	for _, format := range []string{"png", "jpeg", "gif", "webp"} {
		t.Run(format, func(t *testing.T) {
			data := encodeImage(t, format)
			// No extension: the type comes from the content.
			name := "picture-" + format
			if err := os.WriteFile(filepath.Join(f.root, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
			res := f.ok(t, ReadFile, map[string]any{"path": name})
			mime := "image/" + format
			if got := textOf(t, res); got != "Read image file ["+mime+"]" {
				t.Fatalf("text %q", got)
			}
			if len(res.Content) != 2 {
				t.Fatalf("%d content blocks", len(res.Content))
			}
			img := res.Content[1].GetImage()
			if img.GetMimeType() != mime || !bytes.Equal(img.GetData(), data) {
				t.Fatalf("image block %s with %d bytes, want %s with %d", img.GetMimeType(), len(img.GetData()), mime, len(data))
			}
			if d := detailsOf(t, res); d["mime_type"] != mime || d["bytes"] != float64(len(data)) {
				t.Fatalf("details %v", d)
			}
		})
	}
	big := append(encodeImage(t, "png"), make([]byte, 5000)...)
	if err := os.WriteFile(filepath.Join(f.root, "big.png"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	res := f.ok(t, ReadFile, map[string]any{"path": "big.png"})
	want := fmt.Sprintf("Read image file [image/png]\n[Image omitted: %s exceeds the 4.0KB image size limit.]", formatSize(len(big)))
	if got := textOf(t, res); got != want || len(res.Content) != 1 {
		t.Fatalf("got %q (%d blocks), want %q", got, len(res.Content), want)
	}
}

func TestWriteFile(t *testing.T) {
	f := newFixture(t, Options{})
	res := f.ok(t, WriteFile, map[string]any{"path": "a/b/c.txt", "content": "hello\nworld\n"})
	if got := textOf(t, res); got != "Successfully wrote 12 bytes to a/b/c.txt" {
		t.Fatalf("text %q", got)
	}
	if got := f.read(t, "a/b/c.txt"); got != "hello\nworld\n" {
		t.Fatalf("file %q", got)
	}
	if d := detailsOf(t, res); d["created"] != true || d["lines"] != 2.0 || d["bytes"] != 12.0 {
		t.Fatalf("details %v", d)
	}
	// Overwrite with shorter content: no stale tail remains.
	res = f.ok(t, WriteFile, map[string]any{"path": "a/b/c.txt", "content": "hi"})
	if got := f.read(t, "a/b/c.txt"); got != "hi" {
		t.Fatalf("file %q", got)
	}
	if d := detailsOf(t, res); d["created"] != false {
		t.Fatalf("details %v", d)
	}
	// A link inside the workspace to a file inside is followed.
	f.write(t, "target.txt", "old")
	if err := os.Symlink("target.txt", filepath.Join(f.root, "inner-link")); err != nil {
		t.Fatal(err)
	}
	f.ok(t, WriteFile, map[string]any{"path": "inner-link", "content": "new"})
	if got := f.read(t, "target.txt"); got != "new" {
		t.Fatalf("target %q", got)
	}
	// An absolute link to a file inside is followed too.
	if err := os.Symlink(filepath.Join(f.root, "target.txt"), filepath.Join(f.root, "abs-link")); err != nil {
		t.Fatal(err)
	}
	f.ok(t, WriteFile, map[string]any{"path": "abs-link", "content": "newer"})
	if got := f.read(t, "target.txt"); got != "newer" {
		t.Fatalf("target %q", got)
	}
}

func TestWriteFileErrors(t *testing.T) {
	f := newFixture(t, Options{})
	f.write(t, "file.txt", "x")
	if err := os.Mkdir(filepath.Join(f.root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("missing.txt", filepath.Join(f.root, "dangling")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string
	}{
		{"dir", "Path dir is a directory, not a file"},
		{".", "Path . is a directory, not a file"},
		{"dangling", "Path dangling is a symbolic link to missing.txt, which does not exist"},
		{"file.txt/sub.txt", "Cannot write file.txt/sub.txt: a parent of it is a file, not a directory"},
		{"file.txt/deeper/sub.txt", "Cannot write file.txt/deeper/sub.txt: a parent of it is a file, not a directory"},
	}
	for _, tc := range tests {
		_, err := f.call(t, WriteFile, map[string]any{"path": tc.path, "content": "y"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.path, err, tc.want)
		}
	}
	if got := f.read(t, "file.txt"); got != "x" {
		t.Fatalf("file.txt changed to %q", got)
	}
	if _, err := os.Lstat(filepath.Join(f.root, "missing.txt")); !os.IsNotExist(err) {
		t.Fatal("write through a dangling link created its target")
	}
	_, err := f.direct(t, WriteFile, map[string]any{"path": "x.txt"})
	if err == nil || err.Error() != `missing required argument "content"` {
		t.Fatalf("error %v", err)
	}
}

func TestEditFile(t *testing.T) {
	f := newFixture(t, Options{})
	f.write(t, "main.go", "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n")
	res := f.ok(t, EditFile, map[string]any{"path": "main.go", "old_text": "println(\"hi\")", "new_text": "println(\"hello\")\n\tprintln(\"bye\")"})
	if got := textOf(t, res); got != "Successfully replaced text in main.go." {
		t.Fatalf("text %q", got)
	}
	want := "package main\n\nfunc main() {\n\tprintln(\"hello\")\n\tprintln(\"bye\")\n}\n"
	if got := f.read(t, "main.go"); got != want {
		t.Fatalf("file %q", got)
	}
	d := detailsOf(t, res)
	wantDiff := "--- a/main.go\n+++ b/main.go\n@@ -1,5 +1,6 @@\n package main\n \n func main() {\n-\tprintln(\"hi\")\n+\tprintln(\"hello\")\n+\tprintln(\"bye\")\n }\n"
	if d["diff"] != wantDiff {
		t.Fatalf("diff\n%s\nwant\n%s", d["diff"], wantDiff)
	}
	if d["first_changed_line"] != 4.0 || d["lines_added"] != 2.0 || d["lines_removed"] != 1.0 {
		t.Fatalf("details %v", d)
	}

	// CRLF line endings and a byte-order mark survive; old_text may use LF.
	f.write(t, "win.txt", "\uFEFFone\r\ntwo\r\nthree\r\n")
	f.ok(t, EditFile, map[string]any{"path": "win.txt", "old_text": "one\ntwo", "new_text": "uno\ndos"})
	if got := f.read(t, "win.txt"); got != "\uFEFFuno\r\ndos\r\nthree\r\n" {
		t.Fatalf("file %q", got)
	}
}

func TestEditFileErrors(t *testing.T) {
	f := newFixture(t, Options{MaxFileBytes: 100})
	f.write(t, "dup.txt", "x = 1\nx = 1\n")
	f.write(t, "big.txt", strings.Repeat("a", 101))
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"not found", map[string]any{"path": "dup.txt", "old_text": "y = 2", "new_text": "z"},
			"Could not find the exact text in dup.txt. The old text must match exactly including all whitespace and newlines."},
		{"several", map[string]any{"path": "dup.txt", "old_text": "x = 1", "new_text": "z"},
			"Found 2 occurrences of the text in dup.txt. The text must be unique. Please provide more context to make it unique."},
		{"no change", map[string]any{"path": "dup.txt", "old_text": "x = 1\nx", "new_text": "x = 1\nx"},
			"No changes made to dup.txt. The replacement produced identical content. This might indicate an issue with special characters or the text not existing as expected."},
		{"missing file", map[string]any{"path": "nope.txt", "old_text": "a", "new_text": "b"}, "File not found: nope.txt"},
		{"too large", map[string]any{"path": "big.txt", "old_text": "a", "new_text": "b"}, "File big.txt is 101B; edit_file handles files up to 100B"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.call(t, EditFile, tc.args)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %v\nwant %q", err, tc.want)
			}
		})
	}
	_, err := f.direct(t, EditFile, map[string]any{"path": "dup.txt", "old_text": "", "new_text": "b"})
	if err == nil || err.Error() != "old_text must not be empty in dup.txt." {
		t.Fatalf("error %v", err)
	}
	if got := f.read(t, "dup.txt"); got != "x = 1\nx = 1\n" {
		t.Fatalf("failed edits changed the file: %q", got)
	}
}

func TestUnifiedDiff(t *testing.T) {
	tests := []struct {
		name, old, new, want string
		first                int
	}{
		{"one line changed", "a\nb\nc\n", "a\nB\nc\n", "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n", 2},
		{"insert at start", "a\nb\n", "z\na\nb\n", "@@ -1 +1,2 @@\n+z\n a\n", 1},
		{"into empty file", "", "z\n", "@@ -0,0 +1 @@\n+z\n", 1},
		{"delete last", "a\nb\n", "a\n", "@@ -1,2 +1 @@\n a\n-b\n", 2},
		{"no newline at end", "a\nb", "a\nb\n", "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n", 2},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", "X\n2\n3\n4\n5\n6\n7\n8\n9\nY\n",
			"@@ -1,2 +1,2 @@\n-1\n+X\n 2\n@@ -9,2 +9,2 @@\n 9\n-10\n+Y\n", 1},
		{"gap of three splits", "1\n2\n3\n4\n5\n", "X\n2\n3\n4\nY\n", "@@ -1,2 +1,2 @@\n-1\n+X\n 2\n@@ -4,2 +4,2 @@\n 4\n-5\n+Y\n", 1},
		{"gap of two merges", "1\n2\n3\n4\n", "X\n2\n3\nY\n", "@@ -1,4 +1,4 @@\n-1\n+X\n 2\n 3\n-4\n+Y\n", 1},
		{"inner lines kept", "a\nb\nc\nd\n", "A\nb\nc\nD\n", "@@ -1,4 +1,4 @@\n-a\n+A\n b\n c\n-d\n+D\n", 1},
	}
	// The expectations are GNU diff -U1 output.
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, first, _, _ := unifiedDiff("f", tc.old, tc.new, 1)
			want := "--- a/f\n+++ b/f\n" + tc.want
			if got != want {
				t.Fatalf("diff\n%s\nwant\n%s", got, want)
			}
			if first != tc.first {
				t.Fatalf("first changed line %d, want %d", first, tc.first)
			}
		})
	}
}

func TestLs(t *testing.T) {
	f := newFixture(t, Options{MaxOutputBytes: 30})
	for _, p := range []string{"b.txt", "A.txt", ".hidden", "sub/x.txt"} {
		f.write(t, p, "x")
	}
	if err := os.Symlink("sub", filepath.Join(f.root, "sublink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, filepath.Join(f.root, "outlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.root, "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := f.ok(t, Ls, map[string]any{"limit": 3})
	if got := textOf(t, res); got != ".hidden\nA.txt\nb.txt\n\n[3 entries limit reached. Use limit=6 for more]" {
		t.Fatalf("text %q", got)
	}
	res = f.ok(t, Ls, map[string]any{})
	// The byte cap (30 B) stops the list at whole lines.
	if got := textOf(t, res); got != ".hidden\nA.txt\nb.txt\nemptydir/\n\n[30B limit reached]" {
		t.Fatalf("text %q", got)
	}
	d := detailsOf(t, res)
	entries := d["entries"].([]any)
	kinds := map[string]string{}
	for _, e := range entries {
		m := e.(map[string]any)
		kinds[m["name"].(string)] = m["type"].(string)
	}
	wantKinds := map[string]string{".hidden": "file", "A.txt": "file", "b.txt": "file", "emptydir": "directory", "outlink": "symlink", "sub": "directory", "sublink": "symlink_directory"}
	if fmt.Sprint(kinds) != fmt.Sprint(wantKinds) {
		t.Fatalf("kinds %v, want %v", kinds, wantKinds)
	}
	res = f.ok(t, Ls, map[string]any{"path": "sub"})
	if got := textOf(t, res); got != "x.txt" {
		t.Fatalf("text %q", got)
	}
	res = f.ok(t, Ls, map[string]any{"path": "emptydir"})
	if got := textOf(t, res); got != "(empty directory)" {
		t.Fatalf("text %q", got)
	}
	for _, tc := range []struct{ path, want string }{
		{"nope", "Path not found: nope"},
		{"b.txt", "Not a directory: b.txt"},
		{"b.txt/x", "Path not found: b.txt/x"},
	} {
		_, err := f.call(t, Ls, map[string]any{"path": tc.path})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: error %v, want %q", tc.path, err, tc.want)
		}
	}
}

func TestFind(t *testing.T) {
	f := newFixture(t, Options{})
	for _, p := range []string{"top.txt", "a.go", "a_test.go", "src/b.go", "src/deep/c_test.go", "src/deep/d.json",
		"other/src/e_test.go", ".hidden/h.go", ".git/objects/x.go", "x.txt", "y.txt"} {
		f.write(t, p, "package x\n")
	}
	tests := []struct {
		pattern, path, want string
	}{
		{"*.go", "", ".hidden/h.go\na.go\na_test.go\nother/src/e_test.go\nsrc/b.go\nsrc/deep/c_test.go"},
		{"**/*.go", "", ".hidden/h.go\na.go\na_test.go\nother/src/e_test.go\nsrc/b.go\nsrc/deep/c_test.go"},
		{"src/**/*_test.go", "", "other/src/e_test.go\nsrc/deep/c_test.go"},
		{"/src/**/*_test.go", "", "src/deep/c_test.go"},
		{"{x,y}.txt", "", "x.txt\ny.txt"},
		{"*.{json,txt}", "src", "deep/d.json"},
		{"deep", "src", "deep/"},
		{"*_test.go", filepath.Join("src", "deep"), "c_test.go"},
		{"*.rs", "", "No files found matching pattern"},
	}
	for _, tc := range tests {
		t.Run(tc.pattern, func(t *testing.T) {
			args := map[string]any{"pattern": tc.pattern}
			if tc.path != "" {
				args["path"] = tc.path
			}
			res := f.ok(t, Find, args)
			if got := textOf(t, res); got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	res := f.ok(t, Find, map[string]any{"pattern": "*.go", "limit": 2})
	if got := textOf(t, res); got != ".hidden/h.go\na.go\n\n[2 results limit reached. Use limit=4 for more, or refine pattern]" {
		t.Fatalf("text %q", got)
	}
	if d := detailsOf(t, res); d["result_limit_reached"] != 2.0 || len(d["files"].([]any)) != 2 {
		t.Fatalf("details %v", d)
	}
	// Exactly limit results is not a cut.
	res = f.ok(t, Find, map[string]any{"pattern": "{x,y}.txt", "limit": 2})
	if got := textOf(t, res); got != "x.txt\ny.txt" {
		t.Fatalf("text %q", got)
	}
	for _, tc := range []struct{ pattern, path, want string }{
		{"[", "", `Invalid glob pattern "[": syntax error in pattern`},
		{"{a,b", "", `Invalid glob pattern "{a,b": unbalanced '{'`},
		{"a}", "", `Invalid glob pattern "a}": unbalanced '}'`},
		{"*.go", "nope", "Path not found: nope"},
		{"*.go", "top.txt", "Not a directory: top.txt"},
	} {
		args := map[string]any{"pattern": tc.pattern}
		if tc.path != "" {
			args["path"] = tc.path
		}
		_, err := f.call(t, Find, args)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s in %s: error %v, want %q", tc.pattern, tc.path, err, tc.want)
		}
	}
}

func TestGrep(t *testing.T) {
	f := newFixture(t, Options{})
	f.write(t, "a.go", "package a\n\nfunc Hello() {}\nfunc world() {}\n")
	f.write(t, "b.txt", "hello there\nnothing\nHELLO again\n")
	f.write(t, "sub/c.go", "// hello (1+1)\n")
	f.write(t, ".git/config", "hello from git\n")
	f.write(t, "bin.dat", "hello\x00binary")
	f.write(t, "long.txt", "hello "+strings.Repeat("é", 600)+"\n")
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"regex", map[string]any{"pattern": "^func [A-Z]"}, "a.go:3: func Hello() {}"},
		{"ignore case with glob", map[string]any{"pattern": "hello", "ignore_case": true, "glob": "*.go"}, "a.go:3: func Hello() {}\nsub/c.go:1: // hello (1+1)"},
		{"literal", map[string]any{"pattern": "(1+1)", "literal": true}, "sub/c.go:1: // hello (1+1)"},
		{"context", map[string]any{"pattern": "nothing", "context": 1}, "b.txt-1- hello there\nb.txt:2: nothing\nb.txt-3- HELLO again"},
		{"single file", map[string]any{"pattern": "HELLO", "path": "b.txt"}, "b.txt:3: HELLO again"},
		{"directory", map[string]any{"pattern": "hello", "path": "sub"}, "c.go:1: // hello (1+1)"},
		{"limit", map[string]any{"pattern": "hello", "ignore_case": true, "limit": 2}, "a.go:3: func Hello() {}\nb.txt:1: hello there\n\n[2 matches limit reached. Use limit=4 for more, or refine pattern]"},
		{"long line", map[string]any{"pattern": "hello", "path": "long.txt"}, "long.txt:1: hello " + strings.Repeat("é", 494) + "... [truncated]\n\n[Some lines truncated to 500 chars. Use read_file to see full lines]"},
		{"none", map[string]any{"pattern": "absent"}, "No matches found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := f.ok(t, Grep, tc.args)
			if got := textOf(t, res); got != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	res := f.ok(t, Grep, map[string]any{"pattern": "there"})
	d := detailsOf(t, res)
	m := d["matches"].([]any)[0].(map[string]any)
	if m["path"] != "b.txt" || m["line"] != 1.0 || m["text"] != "hello there" {
		t.Fatalf("details %v", d)
	}
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"pattern": "a("}, "Invalid regex \"a(\": error parsing regexp: missing closing ): `a(`"},
		{map[string]any{"pattern": "a", "path": "nope"}, "Path not found: nope"},
		{map[string]any{"pattern": "a", "path": "b.txt/x"}, "Path not found: b.txt/x"},
		{map[string]any{"pattern": "a", "glob": "["}, `Invalid glob pattern "[": syntax error in pattern`},
	} {
		_, err := f.call(t, Grep, tc.args)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestGrepSkipsLargeFiles(t *testing.T) {
	f := newFixture(t, Options{MaxFileBytes: 10})
	f.write(t, "small.txt", "needle\n")
	f.write(t, "large.txt", "needle "+strings.Repeat("x", 20)+"\n")
	res := f.ok(t, Grep, map[string]any{"pattern": "needle"})
	if got := textOf(t, res); got != "small.txt:1: needle\n\n[1 files larger than 10B skipped]" {
		t.Fatalf("text %q", got)
	}
}

// special makes a named pipe (and, when permitted, a character device)
// inside the workspace.
func special(t *testing.T, f *fixture) (names map[string]string) {
	t.Helper()
	names = map[string]string{"fifo": "a named pipe"}
	if err := syscall.Mkfifo(filepath.Join(f.root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(f.root, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err == nil {
		names["null"] = "a device file"
	} else {
		t.Logf("mknod not permitted (%v): device case covered by the symlink to /dev/null only", err)
	}
	return names
}

func TestSpecialFilesRefused(t *testing.T) {
	f := newFixture(t, Options{})
	for name, kind := range special(t, f) {
		want := fmt.Sprintf("Path %s is %s, not a regular file", name, kind)
		for _, tc := range []struct {
			tool string
			args map[string]any
		}{
			{ReadFile, map[string]any{"path": name}},
			{WriteFile, map[string]any{"path": name, "content": "x"}},
			{EditFile, map[string]any{"path": name, "old_text": "a", "new_text": "b"}},
			{Grep, map[string]any{"pattern": "a", "path": name}},
		} {
			_, err := f.call(t, tc.tool, tc.args)
			if err == nil || err.Error() != want {
				t.Errorf("%s %s: error %v, want %q", tc.tool, name, err, want)
			}
		}
		_, err := f.call(t, Ls, map[string]any{"path": name})
		if err == nil || err.Error() != "Not a directory: "+name {
			t.Errorf("ls %s: error %v", name, err)
		}
	}
	// Walking past special files neither blocks nor lists them as matches.
	f.write(t, "ok.txt", "a\n")
	res := f.ok(t, Grep, map[string]any{"pattern": "a"})
	if got := textOf(t, res); got != "ok.txt:1: a" {
		t.Fatalf("grep %q", got)
	}
	res = f.ok(t, Find, map[string]any{"pattern": "fifo"})
	if got := textOf(t, res); got != "fifo" {
		t.Fatalf("find %q", got)
	}
}

func structOf(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
