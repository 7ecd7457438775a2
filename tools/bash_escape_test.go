package tools

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/tools/sandbox"
	"github.com/agentd/agentd/tools/sandbox/sandboxtest"
)

// escapeProbe is one way out of a workspace that a tenant's session tried.
type escapeProbe struct {
	name    string
	command string
	// escaped judges, from the output and the host, whether the command got
	// out.
	escaped func(out string) bool
	// control runs the probe unconfined too, where it must escape: the
	// proof that the probe is real and that the sandbox is what stops it.
	control bool
}

// escapeHost is what the probes try to reach: files of agentd and of other
// tenants, a listener standing in for agentd's port, a process standing in
// for agentd.
type escapeHost struct {
	outside, other, conf string
	secretEnv            string
	port                 int
	accepted             atomic.Int64
	tag                  string
}

func newEscapeHost(t *testing.T) *escapeHost {
	t.Helper()
	base := t.TempDir()
	h := &escapeHost{
		outside:   filepath.Join(base, "outside"),
		other:     filepath.Join(base, "other-ws"),
		conf:      filepath.Join(base, "conf"),
		secretEnv: "sk-test-provider-key-4f1c",
		tag:       "agentd-escape-" + strconv.Itoa(os.Getpid()),
	}
	writeFile(t, filepath.Join(h.outside, "agentd.db"), "SQLite format 3 tenant-a transcript")
	writeFile(t, filepath.Join(h.other, "secret.txt"), "tenant-a file")
	writeFile(t, filepath.Join(h.conf, "auth.json"), `{"tokens": "tenant tokens"}`)
	writeFile(t, filepath.Join(h.conf, "visible.txt"), "public")
	t.Setenv("AGENTD_TEST_PROVIDER_KEY", h.secretEnv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	h.port = lis.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() {
		for _, p := range []string{"/dev/shm/" + h.tag, "/etc/" + h.tag} {
			os.Remove(p)
		}
	})
	return h
}

func (h *escapeHost) exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// victim starts a process standing in for agentd, for the signal and
// ptrace probes.
func victim(t *testing.T) *exec.Cmd {
	t.Helper()
	v := exec.Command("sleep", "300")
	if err := v.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = v.Process.Kill()
		_ = v.Wait()
	})
	return v
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	// A stopped (traced) victim is no longer agentd doing its work either.
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X' && s[i+2] != 't' && s[i+2] != 'T'
}

// TestBashEscapes runs, through the bash tool, each way out of its
// workspace that a session of one tenant tried against agentd: confined,
// every one is blocked; run unconfined where it can get out, each must
// (so removing a part of the confinement fails its case).
func TestBashEscapes(t *testing.T) {
	h := newEscapeHost(t)
	sb := sandboxtest.New(t, sandbox.Options{
		ReadPaths: []string{h.conf},
		Hidden:    []string{filepath.Join(h.conf, "auth.json")},
	})
	root := os.Geteuid() == 0
	suid := ""
	if root {
		// A setuid-root program where commands may read and run it.
		suid = filepath.Join(h.conf, "suid-id")
		b, err := os.ReadFile("/usr/bin/id")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(suid, b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(suid, 0o4755); err != nil {
			t.Fatal(err)
		}
	}
	python, _ := exec.LookPath("python3")
	hostIP := nonLoopbackIPv4()
	var outsideLis net.Listener
	var outsideAccepted atomic.Int64
	if hostIP != "" {
		l, err := net.Listen("tcp", hostIP+":0")
		if err == nil {
			outsideLis = l
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					outsideAccepted.Add(1)
					c.Close()
				}
			}()
		}
	}

	probes := func(victimPid int) []escapeProbe {
		ps := []escapeProbe{
			{"environment", "env", func(out string) bool { return strings.Contains(out, h.secretEnv) }, false},
			{"database file", "cat " + filepath.Join(h.outside, "agentd.db"),
				func(out string) bool { return strings.Contains(out, "tenant-a transcript") }, true},
			{"database directory", "ls " + h.outside,
				func(out string) bool { return strings.Contains(out, "agentd.db") }, true},
			{"another workspace", "cat " + filepath.Join(h.other, "secret.txt"),
				func(out string) bool { return strings.Contains(out, "tenant-a file") }, true},
			{"configured file", "cat " + filepath.Join(h.conf, "auth.json"),
				func(out string) bool { return strings.Contains(out, "tenant tokens") }, true},
			{"write outside", "echo pwned > " + filepath.Join(h.outside, "direct"),
				func(string) bool { return h.exists(filepath.Join(h.outside, "direct")) }, true},
			{"write through a symlink", "ln -sfn " + h.outside + " link && echo pwned > link/via-link",
				func(string) bool { return h.exists(filepath.Join(h.outside, "via-link")) }, true},
			{"write through /proc/self/root", "echo pwned > /proc/self/root" + filepath.Join(h.outside, "via-self"),
				func(string) bool { return h.exists(filepath.Join(h.outside, "via-self")) }, true},
			{"write through agentd's /proc root", fmt.Sprintf("echo pwned > /proc/%d/root%s", os.Getpid(), filepath.Join(h.outside, "via-pid")),
				func(string) bool { return h.exists(filepath.Join(h.outside, "via-pid")) }, true},
			{"write /dev/shm", "echo pwned > /dev/shm/" + h.tag,
				func(string) bool { return h.exists("/dev/shm/" + h.tag) }, true},
			{"loopback to agentd's port", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected", h.port),
				func(out string) bool { return strings.Contains(out, "connected") || h.accepted.Load() > 0 }, true},
			{"signal agentd", fmt.Sprintf("kill -9 %d", victimPid),
				func(string) bool { time.Sleep(50 * time.Millisecond); return !alive(victimPid) }, true},
		}
		if root {
			ps = append(ps,
				escapeProbe{"/etc/shadow", "cat /etc/shadow", func(out string) bool { return strings.Contains(out, "root:") }, true},
				escapeProbe{"write /etc", "echo pwned > /etc/" + h.tag, func(string) bool { return h.exists("/etc/" + h.tag) }, true},
				escapeProbe{"root identity and setuid", "id -u; " + suid + " -u", func(out string) bool {
					for _, l := range strings.Fields(out) {
						if l == "0" {
							return true
						}
					}
					return false
				}, true},
			)
		}
		if python != "" {
			ps = append(ps, escapeProbe{"ptrace agentd",
				fmt.Sprintf(`python3 -c 'import ctypes; print("ptrace", ctypes.CDLL(None, use_errno=True).ptrace(16, %d, 0, 0))'`, victimPid),
				func(out string) bool { return strings.Contains(out, "ptrace 0") }, true})
		}
		if outsideLis != nil {
			port := outsideLis.Addr().(*net.TCPAddr).Port
			ps = append(ps, escapeProbe{"outside network", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && echo connected", hostIP, port),
				func(out string) bool { return strings.Contains(out, "connected") || outsideAccepted.Load() > 0 }, true})
		}
		return ps
	}

	run := func(t *testing.T, opts Options, p escapeProbe) string {
		f := newFixture(t, opts)
		got, _, _ := f.bash(t, t.Context(), map[string]any{"command": p.command, "timeout": 20}, nil)
		return got
	}
	t.Run("confined", func(t *testing.T) {
		v := victim(t)
		for _, p := range probes(v.Process.Pid) {
			t.Run(p.name, func(t *testing.T) {
				out := run(t, Options{Sandbox: sb}, p)
				t.Logf("%s\n%s", p.command, out)
				if p.escaped(out) {
					t.Fatalf("escaped the sandbox with %q:\n%s", p.command, out)
				}
			})
		}
		if !alive(v.Process.Pid) {
			t.Fatal("a confined command stopped or killed the process standing in for agentd")
		}
		// What the trees show stays readable.
		f := newFixture(t, Options{Sandbox: sb})
		if got, _, err := f.bash(t, t.Context(), map[string]any{"command": "cat " + filepath.Join(h.conf, "visible.txt")}, nil); err != nil || got != "public" {
			t.Fatalf("a readable tree: %q, %v", got, err)
		}
	})
	t.Run("unconfined", func(t *testing.T) {
		h.accepted.Store(0)
		outsideAccepted.Store(0)
		for _, p := range probes(0) {
			if !p.control {
				continue
			}
			t.Run(p.name, func(t *testing.T) {
				// Each probe gets a victim of its own: the signal and ptrace
				// probes end or stop theirs.
				p := probeFor(probes(victim(t).Process.Pid), p.name)
				if out := run(t, Options{}, p); !p.escaped(out) {
					t.Fatalf("the probe did not get out even unconfined, so it proves nothing: %q:\n%s", p.command, out)
				}
			})
		}
	})
}

func probeFor(ps []escapeProbe, name string) escapeProbe {
	for _, p := range ps {
		if p.name == name {
			return p
		}
	}
	panic("no probe " + name)
}

// nonLoopbackIPv4 is an address of this host outside loopback, or "".
func nonLoopbackIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// TestBashResourceLimits: a fork bomb, a memory hog and a file without
// end each end as an error result, while other confined calls and agentd
// itself go on.
func TestBashResourceLimits(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{MaxProcesses: 64, MaxMemoryBytes: 256 << 20, MaxFileBytes: 1 << 20})
	bomb := newFixture(t, Options{Sandbox: sb})
	other := newFixture(t, Options{Sandbox: sb})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	var bombOut string
	var bombErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		bombOut, _, bombErr = bomb.bash(t, ctx, map[string]any{"command": ":(){ :|:& };:; sleep 5", "timeout": 4}, nil)
	}()
	// While the bomb runs, another session's command and agentd's own
	// processes still start.
	time.Sleep(500 * time.Millisecond)
	for i := range 3 {
		if got, _, err := other.bash(t, t.Context(), map[string]any{"command": "echo alive " + strconv.Itoa(i)}, nil); err != nil || got != "alive "+strconv.Itoa(i) {
			t.Fatalf("another session during the fork bomb: %q, %v", got, err)
		}
		if err := exec.Command("true").Run(); err != nil {
			t.Fatalf("agentd could not start a process during the fork bomb: %v", err)
		}
	}
	wg.Wait()
	if bombErr == nil {
		t.Fatalf("the fork bomb succeeded: %q", bombOut)
	}

	hog := newFixture(t, Options{Sandbox: sb})
	if got, _, err := hog.bash(t, t.Context(), map[string]any{"command": `x="$(head -c 400000000 /dev/zero | tr '\0' a)"; echo survived ${#x}`}, nil); err == nil || strings.Contains(got, "survived 400000000") {
		t.Fatalf("a 400 MB string under a 256 MiB limit: %q, %v", got, err)
	}
	got, d, err := hog.bash(t, t.Context(), map[string]any{"command": "head -c 3000000 /dev/zero > big"}, nil)
	if err == nil || !strings.Contains(got, "File size limit exceeded") || d["exit_code"] != float64(128+syscall.SIGXFSZ) {
		t.Fatalf("a 3 MB file under a 1 MiB limit: %q, %v, %v", got, err, d)
	}
	if fi, err := os.Stat(filepath.Join(hog.root, "big")); err != nil || fi.Size() > 1<<20 {
		t.Fatalf("the file grew past the limit: %v, %v", fi, err)
	}
}

// Confined, bash behaves as unconfined: output and exit codes, the
// timeout, abort, the output cap and streaming, and no process outliving
// its call.
func TestConfinedBashKeepsItsBehaviour(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	f := newFixture(t, Options{Sandbox: sb, MaxOutputLines: 5})
	got, d, err := f.bash(t, t.Context(), map[string]any{"command": "echo hello; echo oops >&2; pwd"}, nil)
	if err != nil || got != "hello\noops\n"+f.root || d["exit_code"] != 0.0 {
		t.Fatalf("output: %q, %v, %v", got, d, err)
	}
	if got, _, err := f.bash(t, t.Context(), map[string]any{"command": "echo partial; exit 3"}, nil); err == nil || got != "partial\n\nCommand exited with code 3" {
		t.Fatalf("exit code: %q, %v", got, err)
	}
	if got, d, err := f.bash(t, t.Context(), map[string]any{"command": "sleep 300", "timeout": 0.3}, nil); err == nil ||
		got != "Command timed out after 0.3 seconds" || d["timed_out"] != true {
		t.Fatalf("timeout: %q, %v, %v", got, d, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	r := &recorder{onText: func(s string) {
		if strings.Contains(s, "started") {
			cancel()
		}
	}}
	if got, d, err := f.bash(t, ctx, map[string]any{"command": "echo started; sleep 300"}, r); err == nil ||
		got != "started\n\nCommand aborted" || d["aborted"] != true {
		t.Fatalf("abort: %q, %v, %v", got, d, err)
	}
	if got, d, err := f.bash(t, t.Context(), map[string]any{"command": "seq 1 12"}, r); err != nil ||
		got != "8\n9\n10\n11\n12\n\n[Showing lines 8-12 of 12.]" || d["truncated"] != true {
		t.Fatalf("output cap: %q, %v, %v", got, d, err)
	}

	// A background process holding a FIFO in the workspace open is gone
	// when the call ends: its reader sees the end of the file.
	gone := sandboxtest.FIFO(t, filepath.Join(f.root, "fifo"))
	if got, _, err := f.bash(t, t.Context(), map[string]any{"command": "setsid sleep 300 > fifo & echo started"}, nil); err != nil || got != "started" {
		t.Fatalf("background: %q, %v", got, err)
	}
	gone()
}
