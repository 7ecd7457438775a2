package tools

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// recorder collects streamed updates.
type recorder struct {
	mu      sync.Mutex
	updates []string
	// onText, when set, sees the accumulated output after each update.
	onText func(string)
}

func (r *recorder) update(content []*agentdv1.ContentBlock, _ *structpb.Value) {
	r.mu.Lock()
	var s string
	for _, b := range content {
		s += b.GetText().GetText()
	}
	r.updates = append(r.updates, s)
	all := strings.Join(r.updates, "")
	r.mu.Unlock()
	if r.onText != nil {
		r.onText(all)
	}
}

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.updates, "")
}

func (f *fixture) bash(t *testing.T, ctx context.Context, args map[string]any, r *recorder) (string, map[string]any, error) {
	t.Helper()
	if r == nil {
		r = &recorder{}
	}
	res, err := f.callCtx(t, ctx, Bash, args, r.update)
	if err != nil {
		return err.Error(), nil, err
	}
	if res.IsError {
		// A failed command is an error result with details.
		return textOf(t, res), detailsOf(t, res), errors.New(textOf(t, res))
	}
	return textOf(t, res), detailsOf(t, res), nil
}

func TestBash(t *testing.T) {
	f := newFixture(t, Options{})
	tests := []struct {
		name, command, want string
		exit                float64
	}{
		{"stdout and stderr", "echo hello; echo oops >&2", "hello\noops", 0},
		{"working directory", "pwd", f.root, 0},
		{"no output", "true", "(no output)", 0},
		{"no trailing newline", "printf abc", "abc", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			got, d, err := f.bash(t, t.Context(), map[string]any{"command": tc.command}, r)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if d["exit_code"] != tc.exit || d["truncated"] != false || d["timed_out"] != false {
				t.Fatalf("details %v", d)
			}
			// Each update holds only new output: together they are the output.
			if want := strings.TrimSuffix(tc.want, "(no output)"); strings.TrimSuffix(r.all(), "\n") != want {
				t.Fatalf("streamed %q, want %q", r.all(), want)
			}
		})
	}
}

func TestBashFailures(t *testing.T) {
	f := newFixture(t, Options{})
	tests := []struct {
		name    string
		args    map[string]any
		want    string
		details map[string]any
	}{
		{"exit code", map[string]any{"command": "echo partial; exit 3"}, "partial\n\nCommand exited with code 3", map[string]any{"exit_code": 3.0}},
		{"exit code without output", map[string]any{"command": "exit 1"}, "Command exited with code 1", map[string]any{"exit_code": 1.0}},
		{"signal", map[string]any{"command": "kill -9 $$"}, "Command terminated by signal killed", map[string]any{"signal": "killed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, d, err := f.bash(t, t.Context(), tc.args, nil)
			if err == nil {
				t.Fatalf("succeeded: %q", got)
			}
			if got != tc.want {
				t.Fatalf("error %q, want %q", got, tc.want)
			}
			for k, v := range tc.details {
				if d[k] != v {
					t.Fatalf("details[%s] = %v, want %v (%v)", k, d[k], v, d)
				}
			}
		})
	}
	if _, err := f.call(t, Bash, map[string]any{"command": "   "}); err == nil || err.Error() != "command must not be empty" {
		t.Fatalf("blank command: %v", err)
	}
	if _, err := f.direct(t, Bash, map[string]any{"command": "true", "timeout": -1.0}); err == nil || err.Error() != `argument "timeout" must be greater than 0` {
		t.Fatalf("negative timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.callCtx(t, ctx, Bash, map[string]any{"command": "touch should-not-exist"}, nil); err == nil || err.Error() != "Command aborted" {
		t.Fatalf("cancelled before start: %v", err)
	}
	if _, err := f.call(t, ReadFile, map[string]any{"path": "should-not-exist"}); err == nil {
		t.Fatal("a command ran after its context was cancelled")
	}

	g := newFixture(t, Options{Shell: "/nonexistent/shell"})
	if _, err := g.call(t, Bash, map[string]any{"command": "true"}); err == nil || !strings.HasPrefix(err.Error(), "Cannot run command: ") {
		t.Fatalf("missing shell: %v", err)
	}
}

// pids parses "shellpid childpid" from the first output line.
func pids(t *testing.T, out string) []int {
	t.Helper()
	var ps []int
	for _, field := range strings.Fields(strings.SplitN(out, "\n", 2)[0]) {
		p, err := strconv.Atoi(field)
		if err != nil {
			t.Fatalf("no pids in %q", out)
		}
		ps = append(ps, p)
	}
	if len(ps) != 2 {
		t.Fatalf("no pids in %q", out)
	}
	return ps
}

func TestBashTimeoutKillsProcessGroup(t *testing.T) {
	f := newFixture(t, Options{})
	got, d, err := f.bash(t, t.Context(), map[string]any{
		"command": "sleep 300 & echo $$ $!; sleep 300", "timeout": 0.3,
	}, nil)
	if err == nil {
		t.Fatal("succeeded")
	}
	ps := pids(t, got)
	if want := strconv.Itoa(ps[0]) + " " + strconv.Itoa(ps[1]) + "\n\nCommand timed out after 0.3 seconds"; got != want {
		t.Fatalf("error %q, want %q", got, want)
	}
	if d["timed_out"] != true || d["exit_code"] != nil {
		t.Fatalf("details %v", d)
	}
	for _, p := range ps {
		waitGone(t, p)
	}
}

func TestBashCancellationKillsProcessGroup(t *testing.T) {
	f := newFixture(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// Cancel as soon as the command reports it started its children: no
	// timing assumptions.
	r := &recorder{onText: func(s string) {
		if strings.Contains(s, "started\n") {
			cancel()
		}
	}}
	got, d, err := f.bash(t, ctx, map[string]any{
		"command": "sleep 300 & echo $$ $!; (sleep 300; echo never) & echo started; wait",
	}, r)
	if err == nil {
		t.Fatal("succeeded")
	}
	ps := pids(t, got)
	if !strings.HasSuffix(got, "started\n\nCommand aborted") {
		t.Fatalf("error %q", got)
	}
	if d["aborted"] != true {
		t.Fatalf("details %v", d)
	}
	for _, p := range ps {
		waitGone(t, p)
	}
}

func TestBashKillsBackgroundProcessesWhenDone(t *testing.T) {
	f := newFixture(t, Options{})
	// Without the group kill this call would wait 300 s for the pipe.
	got, d, err := f.bash(t, t.Context(), map[string]any{"command": "sleep 300 & echo $$ $!"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d["exit_code"] != 0.0 {
		t.Fatalf("details %v", d)
	}
	for _, p := range pids(t, got) {
		waitGone(t, p)
	}
	// Also when the background process does not hold the output pipe.
	got, _, err = f.bash(t, t.Context(), map[string]any{"command": "sleep 300 >/dev/null 2>&1 & echo $$ $!"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := pids(t, got)
	waitGone(t, ps[1])
}

func TestBashTimeoutIsCapped(t *testing.T) {
	f := newFixture(t, Options{BashTimeout: time.Second, MaxBashTimeout: 2 * time.Second})
	_, d, err := f.bash(t, t.Context(), map[string]any{"command": "true", "timeout": 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d["timeout_seconds"] != 2.0 {
		t.Fatalf("details %v", d)
	}
	_, d, err = f.bash(t, t.Context(), map[string]any{"command": "true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d["timeout_seconds"] != 1.0 {
		t.Fatalf("details %v", d)
	}
}

func TestBashTruncation(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		command string
		want    string
	}{
		{"lines", Options{MaxOutputLines: 5}, "seq 1 12", "8\n9\n10\n11\n12\n\n[Showing lines 8-12 of 12.]"},
		{"bytes", Options{MaxOutputBytes: 10}, "printf 'aaaa\\nbbbb\\ncccc\\n'", "bbbb\ncccc\n\n[Showing lines 2-3 of 3 (10B limit).]"},
		{"partial last line", Options{MaxOutputBytes: 10}, "printf '%030d' 0", "0000000000\n\n[Showing last 10B of line 1 (line is 30B).]"},
		{"partial last line with newline", Options{MaxOutputBytes: 10}, "printf 'ab\\n%030d\\n' 0", "0000000000\n\n[Showing last 10B of line 2 (line is 30B).]"},
		{"beyond the kept tail", Options{MaxOutputBytes: 20}, "seq 1 100000", "99998\n99999\n100000\n\n[Showing lines 99998-100000 of 100000 (20B limit).]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts)
			got, d, err := f.bash(t, t.Context(), map[string]any{"command": tc.command}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if d["truncated"] != true {
				t.Fatalf("details %v", d)
			}
		})
	}
}

func TestBashStreaming(t *testing.T) {
	f := newFixture(t, Options{})
	r := &recorder{}
	_, d, err := f.bash(t, t.Context(), map[string]any{"command": "seq 1 100000"}, r)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 100000; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	if r.all() != want.String() {
		t.Fatalf("streamed %d bytes, want %d", len(r.all()), want.Len())
	}
	if d["total_bytes"] != float64(want.Len()) {
		t.Fatalf("details %v", d)
	}

	// A character split across writes reaches updates whole.
	r = &recorder{}
	_, _, err = f.bash(t, t.Context(), map[string]any{"command": `printf '\303'; sleep 0.05; printf '\251\n'`}, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range r.updates {
		if !utf8.ValidString(u) || strings.ContainsRune(u, utf8.RuneError) {
			t.Fatalf("update %q is not clean UTF-8", u)
		}
	}
	if r.all() != "é\n" {
		t.Fatalf("streamed %q", r.all())
	}

	// The stream stops at its cap with a note; the result still has the end.
	g := newFixture(t, Options{MaxStreamBytes: 10})
	r = &recorder{}
	got, _, err := g.bash(t, t.Context(), map[string]any{"command": "printf '0123456789abcdef'"}, r)
	if err != nil {
		t.Fatal(err)
	}
	if want := "0123456789\n[Output streaming stopped after 10B; the result shows the end of the output.]"; r.all() != want {
		t.Fatalf("streamed %q, want %q", r.all(), want)
	}
	if got != "0123456789abcdef" {
		t.Fatalf("result %q", got)
	}
}
