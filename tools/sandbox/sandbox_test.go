//go:build linux

package sandbox_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/tools/sandbox"
	"github.com/agentd/agentd/tools/sandbox/sandboxtest"
)

// run confines `sh -c script` in dir and returns its combined output.
func run(t *testing.T, sb *sandbox.Sandbox, spec sandbox.Spec, script string) (string, error) {
	t.Helper()
	if spec.Env == nil {
		spec.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + spec.Dir}
	}
	cmd, err := sb.Command(spec, []string{"/bin/sh", "-c", script})
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return out.String(), err
	}
	err = cmd.Wait()
	return strings.TrimSpace(out.String()), err
}

func workspace(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestIdentityAndPrivileges(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	out, err := run(t, sb, sandbox.Spec{Dir: workspace(t)}, `id -u; id -g; grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status; echo pid $$; hostname`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := []string{fmt.Sprint(sb.Status().UID), fmt.Sprint(sb.Status().GID),
		"CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000",
		"NoNewPrivs:\t1", "pid 1", "sandbox"}
	if got := strings.Split(out, "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got\n%s\nwant\n%s", out, strings.Join(want, "\n"))
	}
	if os.Geteuid() == 0 && sb.Status().UID == 0 {
		t.Fatal("agentd as root runs commands as root")
	}
}

func TestWorkspaceFiles(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	dir := workspace(t)
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, sb, sandbox.Spec{Dir: dir}, `cat in.txt && echo made > out.txt && mkdir -p sub/deep && mv out.txt sub/deep/ && echo tmp > /tmp/scratch && cat /tmp/scratch && pwd`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "from the host\ntmp\n" + dir; out != want {
		t.Fatalf("got %q, want %q", out, want)
	}
	// What the command made belongs to the workspace's owner on the host.
	var ws, made syscall.Stat_t
	if err := syscall.Stat(dir, &ws); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(dir, "sub/deep/out.txt"), &made); err != nil {
		t.Fatal(err)
	}
	if made.Uid != ws.Uid || made.Gid != ws.Gid {
		t.Fatalf("the command's file is %d:%d, the workspace %d:%d", made.Uid, made.Gid, ws.Uid, ws.Gid)
	}
	// /tmp is the call's own: the next call starts with an empty one.
	if out, err := run(t, sb, sandbox.Spec{Dir: dir}, `test -e /tmp/scratch && echo kept || echo gone`); err != nil || out != "gone" {
		t.Fatalf("a second call's /tmp: %q, %v", out, err)
	}
}

func TestWritablePaths(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	dir := workspace(t)
	for _, d := range []string{"src", "docs", "out"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := sandbox.Spec{Dir: dir, Writable: []string{"out", "docs"}}
	out, err := run(t, sb, spec, `echo a > out/a && echo b > docs/b && cat out/a docs/b`)
	if err != nil || out != "a\nb" {
		t.Fatalf("writable paths: %q, %v", out, err)
	}
	for _, script := range []string{"echo x > src/x", "echo x > top", "rm -r out", "mv out/a src/"} {
		if out, err := run(t, sb, spec, script); err == nil {
			t.Errorf("%q succeeded outside the writable paths: %s", script, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "src", "x")); err == nil {
		t.Fatal("a file was written outside the writable paths")
	}
	// A writable path that leaves the workspace through a link is refused.
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, sb, sandbox.Spec{Dir: dir, Writable: []string{"escape"}}, "true")
	var se *sandbox.SetupError
	if !errors.As(err, &se) || !strings.Contains(se.Reason, `writable path "escape"`) {
		t.Fatalf("a writable path through a link out: %v", err)
	}
}

func TestWorkspaceBehindSymlinkIsRefused(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	dir := workspace(t)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, sb, sandbox.Spec{Dir: filepath.Join(link)}, "echo ran > ran")
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("a workspace path through a link: %q, %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Fatal("the command ran")
	}
}

func TestNetwork(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello from the host\n"))
			c.Close()
		}
	}()
	port := lis.Addr().(*net.TCPAddr).Port
	// bash for /dev/tcp; the sandbox's own loopback works for itself.
	probe := fmt.Sprintf(`bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && head -1 <&3'`, port)
	if out, err := run(t, sb, sandbox.Spec{Dir: workspace(t)}, probe); err == nil {
		t.Fatalf("reached the host's loopback without network: %q", out)
	}
	if out, err := run(t, sb, sandbox.Spec{Dir: workspace(t), Network: true}, probe); err != nil || out != "hello from the host" {
		t.Fatalf("with network: %q, %v", out, err)
	}
	if out, err := run(t, sb, sandbox.Spec{Dir: workspace(t)}, `cat /sys/class/net/lo/operstate 2>/dev/null; grep -c : /proc/net/dev`); err != nil || !strings.HasSuffix(out, "1") {
		t.Fatalf("interfaces without network: %q, %v (want loopback only)", out, err)
	}
}

func TestProcessesEndWithTheCall(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	dir := workspace(t)
	gone := sandboxtest.FIFO(t, filepath.Join(dir, "fifo"))
	// A detached background process holds the FIFO open for writing.
	if out, err := run(t, sb, sandbox.Spec{Dir: dir}, `setsid sh -c 'exec sleep 300' > fifo 2>/dev/null < /dev/null & echo started`); err != nil || out != "started" {
		t.Fatalf("%q, %v", out, err)
	}
	gone()
}

func TestHiddenAndReadPaths(t *testing.T) {
	extra := t.TempDir()
	for name, body := range map[string]string{"tool.sh": "echo tool", "secret.json": "s3cret"} {
		if err := os.WriteFile(filepath.Join(extra, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb := sandboxtest.New(t, sandbox.Options{ReadPaths: []string{extra}, Hidden: []string{filepath.Join(extra, "secret.json")}})
	out, err := run(t, sb, sandbox.Spec{Dir: workspace(t)}, fmt.Sprintf(`sh %s/tool.sh; cat %s/secret.json; echo end; echo x > %s/new`, extra, extra, extra))
	if err == nil || !strings.HasPrefix(out, "tool\nend\n") || !strings.Contains(out, "Read-only file system") {
		t.Fatalf("%q, %v", out, err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "code.js"), []byte("code"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, sb, sandbox.Spec{Dir: workspace(t), ReadPaths: []string{other}}, "cat "+other+"/code.js"); err != nil || out != "code" {
		t.Fatalf("a spec's read path: %q, %v", out, err)
	}
}

func TestEnvironmentIsTheSpecs(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	t.Setenv("AGENTD_SECRET_FOR_TEST", "leak")
	out, err := run(t, sb, sandbox.Spec{Dir: workspace(t), Env: []string{"PATH=/usr/bin:/bin", "ONLY=this"}}, "env | sort")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "leak") || !strings.Contains(out, "ONLY=this") {
		t.Fatalf("environment %q", out)
	}
}

// TestAsUnprivilegedUser runs the other tests' core again in a process of
// an unprivileged user, where the sandbox cannot be root's (no idmapped
// mounts, the helper's own identity): agentd started by a normal user.
func TestAsUnprivilegedUser(t *testing.T) {
	if os.Getenv("SANDBOX_TEST_CHILD") == "1" {
		t.Skip("already the unprivileged child")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process of another user")
	}
	sandboxtest.New(t, sandbox.Options{}) // the machine can confine at all
	bin := filepath.Join(t.TempDir(), "sandbox.test")
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(bin), filepath.Dir(filepath.Dir(bin))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const uid = 4242
	cmd := exec.Command(bin, "-test.run", "^(TestIdentityAndPrivileges|TestWorkspaceFiles|TestWritablePaths|TestNetwork|TestProcessesEndWithTheCall)$", "-test.count=1", "-test.v")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SANDBOX_TEST_CHILD=1", "CI=true", "TMPDIR=" + filepath.Dir(bin)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	tmp := filepath.Dir(bin)
	if err := os.Chown(tmp, uid, uid); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as uid %d: %v\n%s", uid, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestIdentityAndPrivileges") || strings.Contains(string(out), "SKIP") {
		t.Fatalf("as uid %d the tests did not run:\n%s", uid, out)
	}
}

// The sandbox tries itself once, at its first use: callers racing to use
// it all wait for that one try and see what it found (run with -race).
func TestFirstUsesShareOneProbe(t *testing.T) {
	sandboxtest.New(t, sandbox.Options{}) // skips where nothing confines
	sb := sandbox.New(sandbox.Options{})
	t.Cleanup(func() { sb.Close() })
	ws := workspace(t)
	const callers = 8
	statuses := make(chan sandbox.Status, callers)
	errs := make(chan error, callers)
	for i := range callers {
		go func() {
			switch i % 3 {
			case 0:
				statuses <- sb.Status()
			case 1:
				errs <- sb.Available()
			default:
				out, err := run(t, sb, sandbox.Spec{Dir: ws}, "echo confined")
				if err == nil && out != "confined" {
					err = fmt.Errorf("output %q", out)
				}
				errs <- err
			}
		}()
	}
	first := sb.Status()
	for range callers {
		select {
		case st := <-statuses:
			if st != first {
				t.Errorf("Status = %+v, another caller saw %+v", st, first)
			}
		case err := <-errs:
			if err != nil {
				t.Errorf("a first use: %v", err)
			}
		}
	}
	if !first.Active {
		t.Fatalf("the probe failed: %s", first.Reason)
	}
}

// startSleep starts a confined `sleep 60` and returns it and the pid of
// the command itself: the one child of the spawn stage agentd started.
func startSleep(t *testing.T, sb *sandbox.Sandbox) (*sandbox.Cmd, int) {
	t.Helper()
	cmd, err := sb.Command(sandbox.Spec{Dir: workspace(t), Env: []string{"PATH=/usr/bin:/bin"}}, []string{"/bin/sh", "-c", "sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, sandboxtest.Confined(t, cmd.Process.Pid)
}

// A confined command ends as it would unconfined: the sandbox's spawn
// stage between agentd and the command relays its exit status, and the
// signal that killed it.
func TestCommandsEndAsTheyWould(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	for script, code := range map[string]int{"exit 0": 0, "exit 3": 3, "sh -c 'kill -TERM $$'": 128 + int(syscall.SIGTERM)} {
		_, err := run(t, sb, sandbox.Spec{Dir: workspace(t)}, script)
		var ee *exec.ExitError
		switch {
		case code == 0 && err != nil:
			t.Errorf("%s: %v, want success", script, err)
		case code == 0:
		case !errors.As(err, &ee) || ee.ExitCode() != code:
			t.Errorf("%s: %v, want exit status %d", script, err, code)
		}
	}

	// The command is the first process of its PID namespace, which only
	// SIGKILL from outside ends.
	cmd, command := startSleep(t, sb)
	if err := syscall.Kill(command, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("a command killed by SIGKILL: %v, want the same end", err)
	}
}

// Starting a confined command does not fork the caller, nor does mapping
// a new workspace owner: a fork would write-protect every page of the
// caller's heap, and each page it writes afterwards would fault (a vfork,
// the sandbox's way, leaves them as they were).
func TestCommandsLeaveTheCallersHeapAlone(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	const page, pages = 4096, 16384 // 64 MiB
	heap := make([]byte, page*pages)
	touch := func() int64 {
		var before, after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		for i := 0; i < len(heap); i += page {
			heap[i]++
		}
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		return after.Minflt - before.Minflt
	}
	touch() // every page present and writable
	dir := workspace(t)
	if os.Geteuid() == 0 {
		// An owner no workspace had: the call makes the user namespace
		// that idmaps it too.
		if err := os.Chown(dir, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := run(t, sb, sandbox.Spec{Dir: dir}, "true"); err != nil {
		t.Fatal(err)
	}
	if faults := touch(); faults > pages/8 {
		t.Fatalf("writing the caller's %d-page heap after a confined command took %d page faults: the start forked the caller", pages, faults)
	}
}

// A confined command dies with the process agentd started for it (the
// sandbox's spawn stage), as it would with agentd: nothing confined
// outlives agentd, even after the command took the sandbox's identity.
func TestCommandsDieWithTheirSpawnStage(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	cmd, pid := startSleep(t, sb)
	command := "/proc/" + strconv.Itoa(pid)
	if err := cmd.Process.Kill(); err != nil { // the spawn stage alone, not its group
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Gone, or a zombie its PID namespace's end reaps.
		status, err := os.ReadFile(command + "/status")
		if err != nil || strings.Contains(string(status), "State:\tZ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command outlived its spawn stage by 10 s:\n%s", status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
