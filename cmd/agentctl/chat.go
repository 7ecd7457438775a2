package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
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

const chatHelp = `/steer TEXT     queue a message for the next run's turn boundary (sent with the next prompt)
/followup TEXT  queue a message delivered when the next run would stop
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
	// queued are /steer and /followup messages for the next run.
	steer, followUp []string
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
				cfg := &agentdv1.SessionConfig{WorkspaceRoot: workspace}
				if echo || model == "" {
					cfg.Faux = &agentdv1.FauxScript{Echo: true}
				}
				if model != "" {
					provider, id, ok := strings.Cut(model, "/")
					if !ok {
						return fmt.Errorf("--model %q: write provider/id", model)
					}
					cfg.Model = &agentdv1.ModelRef{Provider: provider, Id: id}
				}
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
			ch.rl = rl
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
	for {
		line, err := ch.rl.Readline()
		if errors.Is(err, readline.ErrInterrupt) || errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "/") {
			if err := ch.command(line); err != nil {
				fmt.Fprintln(ch.a.out, "error:", ch.a.explain(err))
			}
			continue
		}
		if err := ch.prompt(line); err != nil {
			fmt.Fprintln(ch.a.out, "error:", ch.a.explain(err))
		}
	}
}

func (ch *chat) command(line string) error {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case "/help":
		fmt.Fprintln(ch.a.out, chatHelp)
	case "/steer":
		ch.steer = append(ch.steer, arg)
		fmt.Fprintln(ch.a.out, "queued for the next run")
	case "/followup":
		ch.followUp = append(ch.followUp, arg)
		fmt.Fprintln(ch.a.out, "queued for the next run")
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

// prompt runs one prompt: streams the answer, shows tools, asks for
// approvals; Ctrl-C aborts the run; a dropped connection resumes with
// Attach from the last seq.
func (ch *chat) prompt(text string) error {
	ctx := ch.ctx
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)
	req := &agentdv1.PromptRequest{SessionId: ch.sessionID, Content: texts(text), Detach: true}
	stream, err := ch.c.Prompt(ctx, req)
	// agentd restarting: try again for a few seconds before giving up.
	for retries := 0; status.Code(err) == codes.Unavailable && retries < 20; retries++ {
		if retries == 0 {
			fmt.Fprintln(ch.a.out, ch.dim("agentd is not reachable; retrying…"))
		}
		select {
		case <-interrupts:
			return err
		case <-time.After(500 * time.Millisecond):
		}
		stream, err = ch.c.Prompt(ctx, req)
	}
	if err != nil {
		return err
	}
	events := make(chan *agentdv1.AgentEvent)
	errs := make(chan error, 1)
	recv := func(s interface {
		Recv() (*agentdv1.AgentEvent, error)
	}) {
		for {
			ev, err := s.Recv()
			if err != nil {
				errs <- err
				return
			}
			events <- ev
		}
	}
	go recv(stream)
	var runID string
	var seq uint64
	started := time.Now()
	newline := false
	for {
		select {
		case <-interrupts:
			if runID != "" {
				if _, err := ch.c.Abort(ctx, &agentdv1.AbortRequest{SessionId: ch.sessionID, RunId: runID}); err != nil {
					fmt.Fprintln(ch.a.out, "\nerror:", ch.a.explain(err))
				}
			}
		case err := <-errs:
			if errors.Is(err, io.EOF) {
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
			switch e := ev.GetEvent().(type) {
			case *agentdv1.AgentEvent_AgentStart:
				for _, m := range ch.steer {
					_, _ = ch.c.Steer(ctx, &agentdv1.SteerRequest{SessionId: ch.sessionID, Content: texts(m)})
				}
				for _, m := range ch.followUp {
					_, _ = ch.c.FollowUp(ctx, &agentdv1.FollowUpRequest{SessionId: ch.sessionID, Content: texts(m)})
				}
				ch.steer, ch.followUp = nil, nil
			case *agentdv1.AgentEvent_MessageUpdate:
				if d := e.MessageUpdate.GetTextDelta(); d != nil {
					fmt.Fprint(ch.a.out, d.GetDelta())
					newline = true
				}
				if d := e.MessageUpdate.GetThinkingDelta(); d != nil {
					fmt.Fprint(ch.a.out, ch.dim(d.GetDelta()))
					newline = true
				}
			case *agentdv1.AgentEvent_MessageEnd:
				if newline {
					fmt.Fprintln(ch.a.out)
					newline = false
				}
				if am := e.MessageEnd.GetMessage().GetAssistant(); am != nil && am.GetErrorMessage() != "" {
					fmt.Fprintln(ch.a.out, "error:", am.GetErrorMessage())
				}
			case *agentdv1.AgentEvent_ToolExecutionEnd:
				r := e.ToolExecutionEnd.GetResult()
				fmt.Fprintln(ch.a.out, messageLine(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: r}}))
			case *agentdv1.AgentEvent_ApprovalRequested:
				if err := ch.approve(ctx, e.ApprovalRequested); err != nil {
					fmt.Fprintln(ch.a.out, "error:", ch.a.explain(err))
				}
			case *agentdv1.AgentEvent_AgentEnd:
				u := e.AgentEnd.GetUsage()
				fmt.Fprintln(ch.a.out, ch.dim(fmt.Sprintf("[%s · %d in / %d out tokens · $%.4f · %s]", strings.TrimPrefix(e.AgentEnd.GetOutcome().String(), "RUN_OUTCOME_"),
					u.GetInput(), u.GetOutput(), u.GetCost().GetTotal(), time.Since(started).Round(time.Millisecond))))
			}
		}
	}
}

// approve asks whether a tool call may run and answers the request.
func (ch *chat) approve(ctx context.Context, req *agentdv1.ApprovalRequested) error {
	args, _ := protojson.Marshal(req.GetArguments())
	ch.rl.SetPrompt(fmt.Sprintf("allow %s(%s)? [y/N/reason] ", req.GetToolName(), args))
	defer ch.rl.SetPrompt("> ")
	answer, err := ch.rl.Readline()
	if err != nil {
		answer = ""
	}
	answer = strings.TrimSpace(answer)
	decision, reason := agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED, answer
	if strings.EqualFold(answer, "y") || strings.EqualFold(answer, "yes") {
		decision, reason = agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED, ""
	}
	_, err = ch.c.ResolveApproval(ctx, &agentdv1.ResolveApprovalRequest{SessionId: ch.sessionID, ToolCallId: req.GetToolCallId(),
		Decision: decision, Reason: reason, DecidedBy: "agentctl"})
	return err
}

// dim greys text out on a terminal (NO_COLOR turns it off).
func (ch *chat) dim(s string) string {
	if !ch.color {
		return s
	}
	return "\x1b[2m" + s + "\x1b[0m"
}
