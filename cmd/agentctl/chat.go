package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chzyer/readline"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

const chatHelp = `While an answer streams:
/steer TEXT     deliver TEXT after the current turn's tools
/followup TEXT  deliver TEXT when the agent would stop (plain text does the same)
/abort          abort the run (so does Ctrl-C)
Any time:
/compact        summarize the older conversation
/model P/ID     switch the session's model
/context        show what the model will see, with token estimates
/tree           show the session's tree
/fork [ENTRY]   continue in a fork of this session
/back ENTRY     move the leaf back to ENTRY (navigate)
/help           this help
Ctrl-C during an answer aborts it; Ctrl-C or Ctrl-D at the prompt exits.`

// chat holds an interactive conversation.
type chat struct {
	a         *app
	ctx       context.Context
	c         agentdv1.AgentServiceClient
	rl        *readline.Instance
	sessionID string
	color     bool
	out       io.Writer
	// lines delivers what the line editor reads, also while a run streams.
	lines chan input
	done  chan struct{}
}

// input is one line the user typed, or the editor's error (Ctrl-C is
// readline.ErrInterrupt, Ctrl-D io.EOF).
type input struct {
	line string
	err  error
}

func (a *app) chatCommand() *cobra.Command {
	var sessionID, model, workspace, toolList string
	var echo bool
	cmd := &cobra.Command{
		Use: "chat", Short: "Talk to the agent in the terminal", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ch := &chat{a: a, ctx: ctx, c: c, color: os.Getenv("NO_COLOR") == "" && readline.IsTerminal(int(os.Stdout.Fd()))}
			if sessionID == "" {
				cfg, err := newSessionConfig(model, echo)
				if err != nil {
					return err
				}
				cfg.WorkspaceRoot = workspace
				for _, name := range strings.Split(toolList, ",") {
					if name = strings.TrimSpace(name); name != "" {
						cfg.Tools = append(cfg.Tools, &agentdv1.Tool{Name: name})
					}
				}
				resp, err := c.CreateSession(ctx, &agentdv1.CreateSessionRequest{Config: cfg, Title: "agentctl chat"})
				if err != nil {
					return err
				}
				sessionID = resp.GetSession().GetId()
				fmt.Fprintf(a.out, "session %s (/help for commands)\n", sessionID)
			} else if err := ch.history(sessionID); err != nil {
				return err
			}
			ch.sessionID = sessionID
			rl, err := readline.NewEx(&readline.Config{Prompt: "> ", Stdout: a.out, HistoryLimit: 500})
			if err != nil {
				return err
			}
			defer rl.Close()
			ch.rl, ch.out = rl, rl.Stdout()
			a.out = ch.out // subcommands (/context, /tree) print above the prompt too
			return ch.loop()
		},
	}
	cmd.Flags().StringVar(&sessionID, "session", "", "resume this session")
	cmd.Flags().StringVar(&model, "model", "", "a new session's model, provider/id (default: the faux model, echoing)")
	cmd.Flags().BoolVar(&echo, "faux-echo", false, "a new session's faux model echoes each prompt")
	cmd.Flags().StringVar(&workspace, "workspace", "", "the directory built-in tools work in")
	cmd.Flags().StringVar(&toolList, "tools", "", "built-in tools to enable, comma-separated (read_file,edit_file,...)")
	return cmd
}

// history prints a resumed session's transcript compactly.
func (ch *chat) history(sessionID string) error {
	token := ""
	for {
		resp, err := ch.c.GetTranscript(ch.ctx, &agentdv1.GetTranscriptRequest{SessionId: sessionID, PageSize: 1000, PageToken: token})
		if err != nil {
			return err
		}
		for _, e := range resp.GetEntries() {
			if m := e.GetMessage(); m != nil {
				fmt.Fprintln(ch.a.out, firstLine(messageLine(m), 160))
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

func (ch *chat) loop() error {
	ch.lines, ch.done = make(chan input), make(chan struct{})
	defer close(ch.done)
	go ch.read()
	for in := range ch.lines {
		if in.err != nil {
			return nil // Ctrl-C or Ctrl-D at the prompt
		}
		line := strings.TrimSpace(in.line)
		if line == "" {
			continue
		}
		var err error
		if strings.HasPrefix(line, "/") {
			err = ch.command(line)
		} else {
			err = ch.prompt(line)
		}
		if errors.Is(err, errQuit) {
			return nil
		}
		if err != nil {
			fmt.Fprintln(ch.out, "error:", ch.a.explain(err))
		}
	}
	return nil
}

// errQuit ends the chat after a run (Ctrl-D while it streamed).
var errQuit = errors.New("quit")

// read reads lines until the editor ends, also while a run streams, so
// /steer, /abort and approvals are answered as they are typed.
func (ch *chat) read() {
	defer close(ch.lines)
	for {
		line, err := ch.rl.Readline()
		select {
		case ch.lines <- input{line, err}:
		case <-ch.done:
			return
		}
		if err != nil && !errors.Is(err, readline.ErrInterrupt) {
			return
		}
	}
}

func (ch *chat) command(line string) error {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case "/help":
		fmt.Fprintln(ch.a.out, chatHelp)
	case "/steer", "/followup", "/abort":
		return fmt.Errorf("%s works while an answer streams; type a prompt to start one", name)
	case "/compact":
		sub := ch.a.compactCommand()
		sub.SetContext(ch.ctx)
		if err := sub.Flags().Set("instructions", arg); err != nil {
			return err
		}
		return sub.RunE(sub, []string{ch.sessionID})
	case "/model":
		provider, id, ok := strings.Cut(arg, "/")
		if !ok {
			return fmt.Errorf("/model provider/id")
		}
		_, err := ch.c.UpdateSession(ch.ctx, &agentdv1.UpdateSessionRequest{SessionId: ch.sessionID,
			Config: &agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: provider, Id: id}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.model"}}})
		if err == nil {
			fmt.Fprintln(ch.a.out, "model:", arg)
		}
		return err
	case "/context", "/tree":
		sub := ch.a.contextCommand()
		if name == "/tree" {
			sub = ch.a.treeCommand()
		}
		sub.SetContext(ch.ctx)
		return sub.RunE(sub, []string{ch.sessionID})
	case "/fork":
		resp, err := ch.c.ForkSession(ch.ctx, &agentdv1.ForkSessionRequest{SessionId: ch.sessionID, EntryId: arg})
		if err != nil {
			return err
		}
		ch.sessionID = resp.GetSession().GetId()
		fmt.Fprintln(ch.a.out, "now in fork", ch.sessionID)
	case "/back":
		resp, err := ch.c.Navigate(ch.ctx, &agentdv1.NavigateRequest{SessionId: ch.sessionID, EntryId: arg})
		if err != nil {
			return err
		}
		fmt.Fprintln(ch.a.out, "leaf:", resp.GetSession().GetLeafEntryId())
	default:
		return fmt.Errorf("unknown command %s (/help lists them)", name)
	}
	return nil
}

// spinner are the frames the prompt shows until the first token.
var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// prompt runs one prompt: streams the answer, shows tools, asks for
// approvals, and reads the keyboard meanwhile (/steer, /followup, /abort,
// Ctrl-C aborts); a dropped connection resumes with Attach from the last
// seq, and a prompt while agentd restarts waits for it.
func (ch *chat) prompt(text string) error {
	ctx := ch.ctx
	req := &agentdv1.PromptRequest{SessionId: ch.sessionID, Content: texts(text), Detach: true}
	stream, err := ch.c.Prompt(ctx, req)
	for retries := 0; status.Code(err) == codes.Unavailable && retries < 20; retries++ {
		if retries == 0 {
			fmt.Fprintln(ch.out, ch.dim("agentd is not reachable; retrying…"))
		}
		time.Sleep(500 * time.Millisecond)
		stream, err = ch.c.Prompt(ctx, req)
	}
	if err != nil {
		return err
	}
	events := make(chan *agentdv1.AgentEvent)
	errs := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	recv := func(s interface {
		Recv() (*agentdv1.AgentEvent, error)
	}) {
		for {
			ev, err := s.Recv()
			if err != nil {
				select {
				case errs <- err:
				case <-stop:
				}
				return
			}
			select {
			case events <- ev:
			case <-stop:
				return
			}
		}
	}
	go recv(stream)
	var (
		runID     string
		seq       uint64
		started   = time.Now()
		quit      bool
		approvals []*agentdv1.ApprovalRequested
		frame     int
		running   = map[string]string{} // tool call id → its line
	)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	defer ch.setPrompt("> ")
	waiting := true // for the first token
	pendingAbort := false
	abort := func() {
		if runID == "" {
			pendingAbort = true // before the run's first event: abort when it comes
			return
		}
		if _, err := ch.c.Abort(ctx, &agentdv1.AbortRequest{SessionId: ch.sessionID, RunId: runID}); err != nil && status.Code(err) != codes.FailedPrecondition {
			fmt.Fprintln(ch.out, "error:", ch.a.explain(err))
		}
	}
	var partial strings.Builder
	endLine := func() {
		if partial.Len() > 0 {
			ch.setPrompt("> ")
			fmt.Fprintln(ch.out, partial.String())
			partial.Reset()
		}
	}
	for {
		select {
		case <-tick.C:
			if waiting && len(approvals) == 0 {
				frame++
				ch.setPrompt(ch.dim(spinner[frame%len(spinner)]) + " ")
			}
		case in, ok := <-ch.lines:
			switch {
			case !ok || errors.Is(in.err, io.EOF):
				quit = true
				abort()
			case in.err != nil: // Ctrl-C
				abort()
			case len(approvals) > 0:
				if err := ch.answer(ctx, approvals[0], in.line); err != nil {
					fmt.Fprintln(ch.out, "error:", ch.a.explain(err))
				}
				approvals = approvals[1:]
				ch.askNext(approvals)
			default:
				ch.during(ctx, strings.TrimSpace(in.line), abort)
			}
		case err := <-errs:
			if errors.Is(err, io.EOF) {
				if quit {
					return errQuit
				}
				return nil
			}
			if status.Code(err) == codes.Unavailable && runID != "" {
				// The connection dropped: resume after the last event shown.
				time.Sleep(500 * time.Millisecond)
				s, aerr := ch.c.Attach(ctx, &agentdv1.AttachRequest{SessionId: ch.sessionID, RunId: runID, AfterSeq: seq})
				if aerr != nil {
					return aerr
				}
				go recv(s)
				continue
			}
			return err
		case ev := <-events:
			runID, seq = ev.GetRunId(), ev.GetSeq()
			if pendingAbort {
				pendingAbort = false
				abort()
			}
			switch e := ev.GetEvent().(type) {
			case *agentdv1.AgentEvent_MessageUpdate:
				if waiting && (e.MessageUpdate.GetTextDelta() != nil || e.MessageUpdate.GetThinkingDelta() != nil || e.MessageUpdate.GetToolCallStart() != nil) {
					waiting = false
					ch.setPrompt("> ")
				}
				if d := e.MessageUpdate.GetTextDelta(); d != nil {
					partial.WriteString(d.GetDelta())
				}
				if d := e.MessageUpdate.GetThinkingDelta(); d != nil {
					partial.WriteString(ch.dim(d.GetDelta()))
				}
				// The line editor redraws its prompt line after each write:
				// finished lines are printed above it, and the line being
				// generated streams in the prompt line itself.
				if i := strings.LastIndexByte(partial.String(), '\n'); i >= 0 {
					done := partial.String()[:i+1]
					rest := partial.String()[i+1:]
					fmt.Fprint(ch.out, done)
					partial.Reset()
					partial.WriteString(rest)
				}
				ch.setPrompt(tail(partial.String(), 150))
			case *agentdv1.AgentEvent_MessageEnd:
				endLine()
				if am := e.MessageEnd.GetMessage().GetAssistant(); am != nil && am.GetErrorMessage() != "" {
					fmt.Fprintln(ch.out, "error:", am.GetErrorMessage())
				}
			case *agentdv1.AgentEvent_ToolExecutionStart:
				// A running call shows in the prompt line and turns into its
				// ✓/✗ line when it ends.
				endLine()
				args, _ := protojson.Marshal(e.ToolExecutionStart.GetArguments())
				running[e.ToolExecutionStart.GetToolCallId()] = fmt.Sprintf("⋯ %s(%s)", e.ToolExecutionStart.GetToolName(), firstLine(string(args), 80))
				ch.showRunning(running, approvals)
			case *agentdv1.AgentEvent_ToolExecutionEnd:
				r := e.ToolExecutionEnd.GetResult()
				delete(running, r.GetToolCallId())
				fmt.Fprintln(ch.out, messageLine(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: r}}))
				ch.showRunning(running, approvals)
			case *agentdv1.AgentEvent_ApprovalRequested:
				endLine()
				approvals = append(approvals, e.ApprovalRequested)
				if len(approvals) == 1 {
					ch.askNext(approvals)
				}
			case *agentdv1.AgentEvent_Error:
				endLine()
				fmt.Fprintln(ch.out, ch.dim(errorLine(e.Error)))
			case *agentdv1.AgentEvent_QueueUpdate:
				q := e.QueueUpdate
				fmt.Fprintln(ch.out, ch.dim(fmt.Sprintf("[queued: %d steering, %d follow-up]", len(q.GetSteering()), len(q.GetFollowUp()))))
			case *agentdv1.AgentEvent_AgentEnd:
				endLine()
				fmt.Fprintln(ch.out, ch.dim(runSummary(e.AgentEnd, time.Since(started))))
			}
		}
	}
}

// during handles a line typed while a run streams.
func (ch *chat) during(ctx context.Context, line string, abort func()) {
	name, arg, _ := strings.Cut(line, " ")
	var err error
	switch {
	case line == "":
	case name == "/abort":
		abort()
	case name == "/steer":
		_, err = ch.c.Steer(ctx, &agentdv1.SteerRequest{SessionId: ch.sessionID, Content: texts(strings.TrimSpace(arg))})
	case name == "/followup":
		_, err = ch.c.FollowUp(ctx, &agentdv1.FollowUpRequest{SessionId: ch.sessionID, Content: texts(strings.TrimSpace(arg))})
	case strings.HasPrefix(line, "/"):
		err = fmt.Errorf("%s waits until the answer ends; during it use /steer, /followup or /abort", name)
	default:
		_, err = ch.c.FollowUp(ctx, &agentdv1.FollowUpRequest{SessionId: ch.sessionID, Content: texts(line)})
	}
	if err != nil {
		fmt.Fprintln(ch.out, "error:", ch.a.explain(err))
	}
}

// showRunning shows the running tool calls in the prompt line, unless an
// approval is being asked.
func (ch *chat) showRunning(running map[string]string, approvals []*agentdv1.ApprovalRequested) {
	if len(approvals) > 0 {
		return
	}
	lines := make([]string, 0, len(running))
	for _, l := range running {
		lines = append(lines, l)
	}
	slices.Sort(lines)
	if len(lines) == 0 {
		ch.setPrompt("> ")
		return
	}
	ch.setPrompt(ch.dim(strings.Join(lines, "  ")) + " ")
}

// askNext shows the first waiting approval as the prompt.
func (ch *chat) askNext(approvals []*agentdv1.ApprovalRequested) {
	if len(approvals) == 0 {
		ch.setPrompt("> ")
		return
	}
	args, _ := protojson.Marshal(approvals[0].GetArguments())
	ch.setPrompt(fmt.Sprintf("allow %s(%s)? [y/N/reason] ", approvals[0].GetToolName(), firstLine(string(args), 120)))
}

// answer resolves an approval with what was typed: y or yes allows, any
// other text denies with it as the reason.
func (ch *chat) answer(ctx context.Context, req *agentdv1.ApprovalRequested, typed string) error {
	typed = strings.TrimSpace(typed)
	decision, reason := agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED, typed
	if strings.EqualFold(typed, "y") || strings.EqualFold(typed, "yes") {
		decision, reason = agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED, ""
	}
	_, err := ch.c.ResolveApproval(ctx, &agentdv1.ResolveApprovalRequest{SessionId: ch.sessionID, ToolCallId: req.GetToolCallId(),
		Decision: decision, Reason: reason, DecidedBy: "agentctl"})
	return err
}

// tail is the last n runes of s.
func tail(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return "…" + string(r[len(r)-n+1:])
	}
	return s
}

func (ch *chat) setPrompt(p string) {
	ch.rl.SetPrompt(p)
	ch.rl.Refresh()
}

// dim greys text out on a terminal (NO_COLOR turns it off).
func (ch *chat) dim(s string) string {
	if !ch.color {
		return s
	}
	return "\x1b[2m" + s + "\x1b[0m"
}
