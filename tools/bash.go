package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/agentloop"
	"github.com/agentd/agentd/tools/sandbox"
)

// drainGrace bounds the wait for output after the process group is gone: a
// process that left the group (setsid) may hold the pipe open.
const drainGrace = 2 * time.Second

type bashTool struct{ base }

// Execute implements [agentloop.Tool].
func (t *bashTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	command, err := stringArg(call.Args, "command", true)
	if err != nil {
		return agentloop.Result{}, err
	}
	if strings.TrimSpace(command) == "" {
		return agentloop.Result{}, errors.New("command must not be empty")
	}
	o := t.w.opts
	timeout := o.BashTimeout
	if secs, ok, err := numberArg(call.Args, "timeout"); err != nil {
		return agentloop.Result{}, err
	} else if ok {
		if secs <= 0 {
			return agentloop.Result{}, errors.New("argument \"timeout\" must be greater than 0")
		}
		timeout = min(time.Duration(secs*float64(time.Second)), o.MaxBashTimeout)
	}
	if ctx.Err() != nil {
		return agentloop.Result{}, errors.New("Command aborted")
	}
	shell := o.Shell
	if shell == "" {
		if shell, err = exec.LookPath("bash"); err != nil {
			shell = "/bin/sh"
		}
	}

	cmd, start, err := t.command(shell, command)
	if err != nil {
		return agentloop.Result{}, fmt.Errorf("Cannot run command: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return agentloop.Result{}, fmt.Errorf("Cannot run command: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := start(); err != nil {
		pw.Close()
		pr.Close()
		return agentloop.Result{}, fmt.Errorf("Cannot run command: %w", err)
	}
	pw.Close()
	pgid := cmd.Process.Pid

	out := newOutput(o, call.Update)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		out.consume(pr)
	}()
	exited := make(chan struct{})
	var reap func() error
	go func() {
		defer close(exited)
		reap = waitExited(cmd)
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut, aborted bool
	select {
	case <-exited:
	case <-ctx.Done():
		aborted = true
		killGroup(pgid)
	case <-timer.C:
		timedOut = true
		killGroup(pgid)
	}
	<-exited
	// The shell has exited but is not reaped yet, so its process group id
	// cannot have been reused: kill what it left running in the background.
	killGroup(pgid)
	waitErr := reap()
	_ = pr.SetReadDeadline(time.Now().Add(drainGrace))
	<-readDone
	pr.Close()

	body, tr, totalBytes := out.final()
	d := map[string]any{
		"command":         command,
		"timeout_seconds": timeout.Seconds(),
		"timed_out":       timedOut,
		"aborted":         aborted,
		"total_bytes":     totalBytes,
		"truncated":       tr.truncated,
	}
	if tr.truncated {
		d["truncation"] = tr.details()
	}
	var status string
	state := cmd.ProcessState
	switch {
	case timedOut:
		status = fmt.Sprintf("Command timed out after %g seconds", timeout.Seconds())
	case aborted:
		status = "Command aborted"
	case state == nil:
		status = fmt.Sprintf("Command failed: %v", waitErr)
	case state.ExitCode() >= 0:
		d["exit_code"] = state.ExitCode()
		if state.ExitCode() != 0 {
			status = fmt.Sprintf("Command exited with code %d", state.ExitCode())
		}
	default:
		if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			d["signal"] = ws.Signal().String()
			status = fmt.Sprintf("Command terminated by signal %s", ws.Signal())
		} else {
			status = fmt.Sprintf("Command failed: %v", state)
		}
	}
	det, derr := details(d)
	if derr != nil {
		return agentloop.Result{}, derr
	}
	if status != "" {
		msg := status
		if body != "" {
			msg = body + "\n\n" + status
		}
		// A failed command still has details for user interfaces (its
		// exit code, where the full output went).
		return agentloop.Result{Content: text(msg), Details: det, IsError: true}, nil
	}
	if body == "" {
		body = "(no output)"
	}
	return agentloop.Result{Content: text(body), Details: det}, nil
}

// command prepares `shell -c command` in the workspace, confined when the
// workspace has a sandbox, in a process group of its own either way.
func (t *bashTool) command(shell, command string) (*exec.Cmd, func() error, error) {
	o := t.w.opts
	env := CommandEnv(t.w.dir, o.Env)
	if o.Sandbox != nil {
		c, err := o.Sandbox.Command(sandbox.Spec{Dir: t.w.dir, Writable: o.WritablePaths, Network: o.Network, Env: env}, []string{shell, "-c", command})
		if err != nil {
			return nil, nil, err
		}
		return c.Cmd, c.Start, nil
	}
	cmd := exec.Command(shell, "-c", command)
	cmd.Dir = t.w.dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, cmd.Start, nil
}

func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// output collects a command's combined output: it streams new text to
// onUpdate (up to a cap) and keeps a bounded tail for the result.
type output struct {
	maxBytes, maxLines int
	onUpdate           agentloop.UpdateFunc
	streamCap          int
	streamLeft         int
	streamStopped      bool
	// pending holds the start of a UTF-8 sequence split across reads.
	pending []byte
	// tail is the end of the output, at most 2*maxBytes long.
	tail      []byte
	total     int
	newlines  int
	lineBytes int // bytes since the last newline
	lastLine  int // length of the last complete line
	lastByte  byte
}

func newOutput(o Options, onUpdate agentloop.UpdateFunc) *output {
	return &output{maxBytes: o.MaxOutputBytes, maxLines: o.MaxOutputLines, onUpdate: onUpdate, streamCap: o.MaxStreamBytes, streamLeft: o.MaxStreamBytes}
}

func (o *output) consume(r io.Reader) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			o.add(buf[:n])
		}
		if err != nil {
			o.flush()
			return
		}
	}
}

func (o *output) add(b []byte) {
	o.total += len(b)
	for _, c := range b {
		if c == '\n' {
			o.newlines++
			o.lastLine, o.lineBytes = o.lineBytes, 0
		} else {
			o.lineBytes++
		}
	}
	o.lastByte = b[len(b)-1]
	keep := 2 * o.maxBytes
	o.tail = append(o.tail, b...)
	if len(o.tail) > keep {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-keep:]...)
	}
	o.stream(b)
}

// stream sends the new bytes that form whole UTF-8 sequences.
func (o *output) stream(b []byte) {
	if o.onUpdate == nil || o.streamStopped {
		return
	}
	o.pending = append(o.pending, b...)
	cut := len(o.pending)
	// Hold back an incomplete sequence at the end (at most 3 bytes).
	for i := len(o.pending) - 1; i >= 0 && i >= len(o.pending)-utf8.UTFMax; i-- {
		if utf8.RuneStart(o.pending[i]) {
			if !utf8.FullRune(o.pending[i:]) {
				cut = i
			}
			break
		}
	}
	o.emit(o.pending[:cut])
	o.pending = append(o.pending[:0], o.pending[cut:]...)
}

func (o *output) flush() {
	if o.onUpdate != nil && !o.streamStopped && len(o.pending) > 0 {
		o.emit(o.pending)
		o.pending = nil
	}
}

func (o *output) emit(b []byte) {
	if len(b) == 0 {
		return
	}
	if len(b) > o.streamLeft {
		n := o.streamLeft
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		b = b[:n]
		o.streamStopped = true
	}
	o.streamLeft -= len(b)
	s := validText(b)
	if o.streamStopped {
		s += fmt.Sprintf("\n[Output streaming stopped after %s; the result shows the end of the output.]", formatSize(o.streamCap))
	}
	o.onUpdate(text(s), nil)
}

// final returns the text for the result: the last lines that fit the caps,
// with pi's note when output was cut.
func (o *output) final() (string, truncation, int) {
	s := validText(o.tail)
	cutFront := o.total > len(o.tail)
	if cutFront {
		// The tail starts inside a line; drop that partial line unless it is
		// the only (last) one.
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
	}
	totalLines := o.newlines
	if o.total > 0 && o.lastByte != '\n' {
		totalLines++
	}
	kept, tr := tailLines(splitLines(s), o.maxLines, o.maxBytes)
	if cutFront && !tr.truncated {
		tr.truncated, tr.by = true, "bytes"
	}
	tr.totalLines = totalLines
	body := strings.Join(kept, "\n")
	if !tr.truncated {
		return body, tr, o.total
	}
	start, end := totalLines-tr.outputLines+1, totalLines
	switch {
	case tr.lastLinePartial:
		lineSize := o.lineBytes
		if o.lastByte == '\n' {
			lineSize = o.lastLine
		}
		body += fmt.Sprintf("\n\n[Showing last %s of line %d (line is %s).]", formatSize(tr.outputBytes), end, formatSize(lineSize))
	case tr.by == "lines":
		body += fmt.Sprintf("\n\n[Showing lines %d-%d of %d.]", start, end, totalLines)
	default:
		body += fmt.Sprintf("\n\n[Showing lines %d-%d of %d (%s limit).]", start, end, totalLines, formatSize(o.maxBytes))
	}
	return body, tr, o.total
}
