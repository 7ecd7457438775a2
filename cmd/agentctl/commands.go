package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/agentd/agentd/clients/go/sessionfile"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

func texts(s string) []*agentdv1.ContentBlock {
	return []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}}
}

func (a *app) sessionsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "sessions", Short: "List, show, create, update and delete sessions"}
	var echo bool
	var model, system, title string
	create := &cobra.Command{
		Use: "create", Short: "Create a session and print it", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			cfg, err := newSessionConfig(model, echo)
			if err != nil {
				return err
			}
			cfg.SystemPrompt = system
			resp, err := c.CreateSession(ctx, &agentdv1.CreateSessionRequest{Config: cfg, Title: title})
			if err != nil {
				return err
			}
			return a.print(resp.GetSession(), func() { fmt.Fprintln(a.out, resp.GetSession().GetId()) })
		},
	}
	create.Flags().BoolVar(&echo, "faux-echo", false, "the faux model answers by echoing each prompt (the default without --model)")
	create.Flags().StringVar(&model, "model", "", "the model, provider/id (default: the faux model, echoing)")
	create.Flags().StringVar(&system, "system", "", "the system prompt")
	create.Flags().StringVar(&title, "title", "", "a title")
	list := &cobra.Command{
		Use: "list", Short: "List sessions, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			token := ""
			for {
				resp, err := c.ListSessions(ctx, &agentdv1.ListSessionsRequest{PageSize: 1000, PageToken: token})
				if err != nil {
					return err
				}
				for _, s := range resp.GetSessions() {
					if err := a.print(s, func() {
						fmt.Fprintf(a.out, "%s  %-8s  %s  %s\n", s.GetId(), strings.TrimPrefix(s.GetState().String(), "SESSION_STATE_"),
							s.GetUpdateTime().AsTime().Local().Format(time.DateTime), s.GetTitle())
					}); err != nil {
						return err
					}
				}
				if token = resp.GetNextPageToken(); token == "" {
					return nil
				}
			}
		},
	}
	show := &cobra.Command{
		Use: "show SESSION", Short: "Show a session", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: args[0]})
			if err != nil {
				return err
			}
			s := resp.GetSession()
			return a.print(s, func() {
				fmt.Fprintf(a.out, "id:     %s\ntitle:  %s\nstate:  %s\nmodel:  %s/%s\nleaf:   %s\n", s.GetId(), s.GetTitle(),
					strings.TrimPrefix(s.GetState().String(), "SESSION_STATE_"), s.GetConfig().GetModel().GetProvider(), s.GetConfig().GetModel().GetId(), s.GetLeafEntryId())
			})
		},
	}
	var force bool
	del := &cobra.Command{
		Use: "delete SESSION", Short: "Delete a session", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			_, err = c.DeleteSession(ctx, &agentdv1.DeleteSessionRequest{SessionId: args[0], Force: force})
			return err
		},
	}
	del.Flags().BoolVar(&force, "force", false, "abort an active run first")
	var setTitle, setSystem, setModel string
	update := &cobra.Command{
		Use: "update SESSION", Short: "Change a session's title, system prompt or model", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			req := &agentdv1.UpdateSessionRequest{SessionId: args[0], Config: &agentdv1.SessionConfig{}, UpdateMask: &fieldmaskpb.FieldMask{}}
			if cmd.Flags().Changed("title") {
				req.Title = setTitle
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "title")
			}
			if cmd.Flags().Changed("system") {
				req.Config.SystemPrompt = setSystem
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "config.system_prompt")
			}
			if cmd.Flags().Changed("model") {
				provider, id, ok := strings.Cut(setModel, "/")
				if !ok {
					return fmt.Errorf("--model %q: write provider/id", setModel)
				}
				req.Config.Model = &agentdv1.ModelRef{Provider: provider, Id: id}
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "config.model")
			}
			if len(req.UpdateMask.Paths) == 0 {
				return errors.New("nothing to change: pass --title, --system or --model")
			}
			resp, err := c.UpdateSession(ctx, req)
			if err != nil {
				return err
			}
			return a.print(resp.GetSession(), func() { fmt.Fprintln(a.out, "updated", resp.GetSession().GetId()) })
		},
	}
	update.Flags().StringVar(&setTitle, "title", "", "the new title")
	update.Flags().StringVar(&setSystem, "system", "", "the new system prompt")
	update.Flags().StringVar(&setModel, "model", "", "the new model, provider/id")
	cmd.AddCommand(create, list, show, del, update)
	return cmd
}

// stream prints a run's events until agent_end and returns the exit code
// the run's outcome calls for: 0 when it completed, 2 on an error, 3 when
// it was aborted or interrupted. ctx is the stream's: when it ends (Ctrl-C)
// the stream's own call aborts the run if owns says so (Prompt and
// Continue without detach), and only stops following it otherwise.
func (a *app) stream(ctx context.Context, recv func() (*agentdv1.AgentEvent, error), owns bool) error {
	var end *agentdv1.AgentEnd
	newline := false
	started := time.Now()
	// A failed answer's error waits for the next event: when that is the
	// retry's announcement, its line says both what failed and that it is
	// retried, and a retried call does not look like one failure per try.
	failed := ""
	flushFailed := func() {
		if failed != "" {
			fmt.Fprintln(a.out, "error:", failed)
			failed = ""
		}
	}
	for {
		ev, err := recv()
		if !a.json && !isRetry(ev) {
			flushFailed()
		}
		failed = ""
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if newline {
				fmt.Fprintln(a.out)
			}
			return interrupted(ctx, err, owns)
		}
		if a.json {
			if err := a.print(ev, nil); err != nil {
				return err
			}
		} else {
			switch e := ev.GetEvent().(type) {
			case *agentdv1.AgentEvent_MessageUpdate:
				if d := e.MessageUpdate.GetTextDelta(); d != nil {
					fmt.Fprint(a.out, d.GetDelta())
					newline = true
				}
			case *agentdv1.AgentEvent_MessageEnd:
				if newline {
					fmt.Fprintln(a.out)
					newline = false
				}
				if tr := e.MessageEnd.GetMessage().GetToolResult(); tr != nil {
					fmt.Fprintln(a.out, messageLine(e.MessageEnd.GetMessage()))
				}
				if am := e.MessageEnd.GetMessage().GetAssistant(); am != nil && am.GetErrorMessage() != "" {
					failed = am.GetErrorMessage()
				}
			case *agentdv1.AgentEvent_Error:
				if newline {
					fmt.Fprintln(a.out)
					newline = false
				}
				fmt.Fprintln(a.out, errorLine(e.Error))
			case *agentdv1.AgentEvent_AgentEnd:
				if newline {
					fmt.Fprintln(a.out)
					newline = false
				}
				if o := e.AgentEnd.GetStructuredOutput(); o != nil {
					fmt.Fprintln(a.out, structuredJSON(o))
				}
				fmt.Fprintln(a.out, runSummary(e.AgentEnd, time.Since(started)))
			default:
				if line := waitLine(ev); line != "" {
					if newline {
						fmt.Fprintln(a.out)
						newline = false
					}
					fmt.Fprintln(a.out, line)
				}
			}
		}
		if e := ev.GetAgentEnd(); e != nil {
			end = e
		}
	}
	switch end.GetOutcome() {
	case agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED:
		return nil
	case agentdv1.RunOutcome_RUN_OUTCOME_ERROR:
		return exitError{code: 2}
	default:
		return exitError{code: 3}
	}
}

func (a *app) promptCommand() *cobra.Command {
	var parent string
	var flags runFlags
	cmd := &cobra.Command{
		Use: "prompt SESSION TEXT", Short: "Send a prompt and stream the run (exit 0 completed, 2 error, 3 aborted)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			settings, err := flags.parse(cmd)
			if err != nil {
				return err
			}
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			s, err := c.Prompt(ctx, settings.prompt(&agentdv1.PromptRequest{SessionId: args[0], Content: texts(args[1]), ParentEntryId: parent}))
			if err != nil {
				return err
			}
			return a.stream(ctx, s.Recv, true)
		},
	}
	cmd.Flags().StringVar(&parent, "parent", "", "edit and resend: append the prompt below this entry")
	flags.add(cmd, true)
	return cmd
}

func (a *app) attachCommand() *cobra.Command {
	var after uint64
	cmd := &cobra.Command{
		Use: "attach SESSION [RUN]", Short: "Follow a run (the active one by default)", Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			req := &agentdv1.AttachRequest{SessionId: args[0], AfterSeq: after}
			if len(args) == 2 {
				req.RunId = args[1]
			}
			s, err := c.Attach(ctx, req)
			if err != nil {
				return err
			}
			return a.stream(ctx, s.Recv, false)
		},
	}
	cmd.Flags().Uint64Var(&after, "after", 0, "the last seq already seen")
	return cmd
}

func (a *app) transcriptCommand() *cobra.Command {
	var leaf string
	cmd := &cobra.Command{
		Use: "transcript SESSION", Short: "Print the transcript (the current branch, or the one to --leaf)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			token := ""
			for {
				resp, err := c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: args[0], PageSize: 1000, PageToken: token, LeafEntryId: leaf})
				if err != nil {
					return err
				}
				for _, e := range resp.GetEntries() {
					if err := a.print(e, func() { fmt.Fprintf(a.out, "%s  %s\n", e.GetId(), entryLine(e)) }); err != nil {
						return err
					}
				}
				if token = resp.GetNextPageToken(); token == "" {
					return nil
				}
			}
		},
	}
	cmd.Flags().StringVar(&leaf, "leaf", "", "read the branch ending at this entry")
	return cmd
}

func (a *app) contextCommand() *cobra.Command {
	return &cobra.Command{
		Use: "context SESSION", Short: "Show what the next model call would receive, with token estimates", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.GetContext(ctx, &agentdv1.GetContextRequest{SessionId: args[0]})
			if err != nil {
				return err
			}
			return a.print(resp, func() {
				fmt.Fprintf(a.out, "%d tokens of %d (compacts above %d; would compact: %v)\n", resp.GetTotalTokens(), resp.GetContextWindow(),
					resp.GetCompactionThreshold(), resp.GetWouldCompact())
				for i, m := range resp.GetContext().GetMessages() {
					var line string
					switch r := m.GetRole().(type) {
					case *agentdv1.Message_User:
						line = "user: " + blocksText(r.User.GetContent())
					case *agentdv1.Message_Assistant:
						line = "assistant: " + blocksText(r.Assistant.GetContent())
					case *agentdv1.Message_ToolResult:
						line = "tool " + r.ToolResult.GetToolName() + ": " + blocksText(r.ToolResult.GetContent())
					}
					fmt.Fprintf(a.out, "%6d  %s\n", resp.GetMessageTokens()[i], firstLine(line, 110))
				}
			})
		},
	}
}

func (a *app) treeCommand() *cobra.Command {
	return &cobra.Command{
		Use: "tree SESSION", Short: "Print the session's tree of entries", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			// All pages first: a node's depth depends on how many children
			// its parent has, which a later page may add to.
			var nodes []*agentdv1.TreeNode
			token := ""
			for {
				resp, err := c.GetTree(ctx, &agentdv1.GetTreeRequest{SessionId: args[0], PageSize: 1000, PageToken: token})
				if err != nil {
					return err
				}
				nodes = append(nodes, resp.GetNodes()...)
				if token = resp.GetNextPageToken(); token == "" {
					break
				}
			}
			depth := treeDepths(nodes)
			for _, n := range nodes {
				if err := a.print(n, func() { fmt.Fprintln(a.out, treeLine(n, depth[n.GetId()])) }); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (a *app) modelsCommand() *cobra.Command {
	return &cobra.Command{
		Use: "models", Short: "List the models agentd knows", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.ListModels(ctx, &agentdv1.ListModelsRequest{})
			if err != nil {
				return err
			}
			for _, m := range resp.GetModels() {
				if err := a.print(m, func() {
					ready := "not configured"
					if m.GetConfigured() {
						ready = "ready"
					}
					fmt.Fprintf(a.out, "%s/%s  %d tokens  %s\n", m.GetRef().GetProvider(), m.GetRef().GetId(), m.GetContextWindow(), ready)
				}); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (a *app) toolSourcesCommand() *cobra.Command {
	var refresh bool
	cmd := &cobra.Command{
		Use: "tool-sources", Short: "List agentd's MCP servers: state, process and tools", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.ListToolSources(ctx, &agentdv1.ListToolSourcesRequest{Refresh: refresh})
			if err != nil {
				return err
			}
			if len(resp.GetSources()) == 0 && !a.json {
				fmt.Fprintln(a.out, "no MCP servers (agentd --mcp-config names them)")
			}
			for _, s := range resp.GetSources() {
				if err := a.print(s, func() {
					state := strings.ToLower(strings.TrimPrefix(s.GetState().String(), "TOOL_SOURCE_STATE_"))
					line := fmt.Sprintf("%s  %s  %s", s.GetName(), s.GetTransport(), state)
					if s.GetPid() != 0 {
						line += fmt.Sprintf("  pid %d", s.GetPid())
					}
					if s.GetReadOnly() {
						line += "  read-only"
					}
					names := make([]string, len(s.GetTools()))
					for i, t := range s.GetTools() {
						names[i] = t.GetName()
					}
					line += fmt.Sprintf("  %d tools", len(names))
					if len(names) > 0 {
						line += ": " + strings.Join(names, ", ")
					}
					if s.GetLastError() != "" {
						line += "  (last error: " + s.GetLastError() + ")"
					}
					fmt.Fprintln(a.out, line)
				}); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&refresh, "refresh", false, "connect to every server (starting stdio ones) and list its tools now")
	return cmd
}

func (a *app) healthCommand() *cobra.Command {
	return &cobra.Command{
		Use: "health", Short: "Check that agentd serves", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, _, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := healthpb.NewHealthClient(a.conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			return a.print(resp, func() { fmt.Fprintln(a.out, strings.ToLower(resp.GetStatus().String())) })
		},
	}
}

func (a *app) labelCommand() *cobra.Command {
	return &cobra.Command{
		Use: "label SESSION ENTRY [LABEL]", Short: "Name an entry (no LABEL clears it)", Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			label := ""
			if len(args) == 3 {
				label = args[2]
			}
			_, err = c.SetLabel(ctx, &agentdv1.SetLabelRequest{SessionId: args[0], EntryId: args[1], Label: label})
			return err
		},
	}
}

func (a *app) redactCommand() *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use: "redact SESSION ENTRY...", Short: "Remove the content of entries (tombstones keep the conversation valid)", Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.RedactEntries(ctx, &agentdv1.RedactEntriesRequest{SessionId: args[0], EntryIds: args[1:], Reason: reason, RedactedBy: by})
			if err != nil {
				return err
			}
			return a.print(resp, func() { fmt.Fprintf(a.out, "redacted %d entries\n", len(resp.GetEntries())-1) })
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the record (required)")
	cmd.Flags().StringVar(&by, "by", "", "who asked, for the record")
	return cmd
}

func (a *app) navigateCommand() *cobra.Command {
	var summary string
	var summarize bool
	cmd := &cobra.Command{
		Use: "navigate SESSION ENTRY", Short: "Move the leaf to an entry, optionally summarizing the branch left", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.Navigate(ctx, &agentdv1.NavigateRequest{SessionId: args[0], EntryId: args[1], Summary: summary, Summarize: summarize})
			if err != nil {
				return err
			}
			return a.print(resp, func() { fmt.Fprintln(a.out, "leaf:", resp.GetSession().GetLeafEntryId()) })
		},
	}
	cmd.Flags().StringVar(&summary, "summary", "", "your summary of the branch left")
	cmd.Flags().BoolVar(&summarize, "summarize", false, "have the session's model summarize the branch left")
	return cmd
}

func (a *app) forkCommand() *cobra.Command {
	var title string
	cmd := &cobra.Command{
		Use: "fork SESSION [ENTRY]", Short: "Copy the path to an entry (default the leaf) into a new session", Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			req := &agentdv1.ForkSessionRequest{SessionId: args[0], Title: title}
			if len(args) == 2 {
				req.EntryId = args[1]
			}
			resp, err := c.ForkSession(ctx, req)
			if err != nil {
				return err
			}
			return a.print(resp.GetSession(), func() { fmt.Fprintln(a.out, resp.GetSession().GetId()) })
		},
	}
	cmd.Flags().StringVar(&title, "title", "", "the new session's title")
	return cmd
}

func (a *app) compactCommand() *cobra.Command {
	var summary, instructions string
	var dryRun bool
	cmd := &cobra.Command{
		Use: "compact SESSION", Short: "Summarize the older conversation", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			s, err := c.Compact(ctx, &agentdv1.CompactRequest{SessionId: args[0], Summary: summary, Instructions: instructions, DryRun: dryRun})
			if err != nil {
				return err
			}
			for {
				ev, err := s.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if dryRun && refusedFor(err, agentdv1.ErrorReason_ERROR_REASON_NOTHING_TO_COMPACT) {
					// A dry run asks whether compacting would do anything:
					// "no" is its answer, not a failure (with --json: no
					// compaction_end).
					if !a.json {
						fmt.Fprintln(a.out, "nothing to compact:", status.Convert(err).Message())
					}
					return nil
				}
				if err != nil {
					return err
				}
				end := ev.GetCompactionEnd()
				if end == nil && !a.json {
					continue
				}
				if err := a.print(ev, func() {
					if end.GetErrorMessage() != "" {
						fmt.Fprintln(a.out, "compaction failed:", end.GetErrorMessage())
						return
					}
					fmt.Fprintf(a.out, "%d → %d tokens, %d messages summarized, kept from %s\n", end.GetTokensBefore(), end.GetTokensAfter(),
						end.GetSummarizedMessages(), end.GetFirstKeptEntryId())
				}); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().StringVar(&summary, "summary", "", "your own summary (no model is called)")
	cmd.Flags().StringVar(&instructions, "instructions", "", "what the summary should focus on")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show the cut point and token counts only; exits 0 also when there is nothing to compact")
	return cmd
}

func (a *app) exportCommand() *cobra.Command {
	var out, format string
	cmd := &cobra.Command{
		Use: "export SESSION", Short: "Write a session to a file (agentd's format, or pi's with --format pi)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if format != string(sessionfile.Agentd) && format != string(sessionfile.Pi) {
				return fmt.Errorf(`--format %q: use "agentd" or "pi"`, format)
			}
			w := a.out
			if out != "" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			bw := bufio.NewWriter(w)
			if err := sessionfile.Export(ctx, c, args[0], sessionfile.Format(format), bw); err != nil {
				return err
			}
			return bw.Flush()
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the file to write (default standard output)")
	cmd.Flags().StringVar(&format, "format", "agentd", `"agentd" or "pi"`)
	return cmd
}

func (a *app) importCommand() *cobra.Command {
	return &cobra.Command{
		Use: "import FILE", Short: "Create a session from a file of agentd's or pi's format; prints its id", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			sess, err := sessionfile.Import(ctx, c, f)
			if err != nil {
				return err
			}
			return a.print(sess, func() { fmt.Fprintln(a.out, sess.GetId()) })
		},
	}
}

func (a *app) runControlCommands() []*cobra.Command {
	unary := func(use, short string, args cobra.PositionalArgs, call func(ctx context.Context, c agentdv1.AgentServiceClient, args []string) (proto.Message, error)) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: args, RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := call(ctx, c, args)
			if err != nil {
				return err
			}
			return a.print(resp, func() { fmt.Fprintln(a.out, "ok") })
		}}
	}
	var contFlags runFlags
	cont := &cobra.Command{
		Use: "continue SESSION", Short: "Run the agent from the transcript as it is (after a failed call or a restart)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			settings, err := contFlags.parse(cmd)
			if err != nil {
				return err
			}
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			s, err := c.Continue(ctx, settings.continueRequest(&agentdv1.ContinueRequest{SessionId: args[0]}))
			if err != nil {
				return err
			}
			return a.stream(ctx, s.Recv, true)
		},
	}
	contFlags.add(cont, false)
	var isError bool
	result := unary("tool-result SESSION CALL_ID TEXT", "Answer a client-executed tool call", cobra.ExactArgs(3),
		func(ctx context.Context, c agentdv1.AgentServiceClient, args []string) (proto.Message, error) {
			return c.SubmitToolResult(ctx, &agentdv1.SubmitToolResultRequest{SessionId: args[0], ToolCallId: args[1], Content: texts(args[2]), IsError: isError})
		})
	result.Flags().BoolVar(&isError, "error", false, "the tool failed")
	return []*cobra.Command{
		cont,
		unary("abort SESSION [RUN]", "Abort the active run", cobra.RangeArgs(1, 2), func(ctx context.Context, c agentdv1.AgentServiceClient, args []string) (proto.Message, error) {
			req := &agentdv1.AbortRequest{SessionId: args[0]}
			if len(args) == 2 {
				req.RunId = args[1]
			}
			return c.Abort(ctx, req)
		}),
		unary("steer SESSION TEXT", "Queue a message for the active run, delivered after the current turn's tools", cobra.ExactArgs(2),
			func(ctx context.Context, c agentdv1.AgentServiceClient, args []string) (proto.Message, error) {
				return c.Steer(ctx, &agentdv1.SteerRequest{SessionId: args[0], Content: texts(args[1])})
			}),
		unary("followup SESSION TEXT", "Queue a message for the active run, delivered when it would stop", cobra.ExactArgs(2),
			func(ctx context.Context, c agentdv1.AgentServiceClient, args []string) (proto.Message, error) {
				return c.FollowUp(ctx, &agentdv1.FollowUpRequest{SessionId: args[0], Content: texts(args[1])})
			}),
		unary("append SESSION TEXT", "Append a user message without running the agent", cobra.ExactArgs(2),
			func(ctx context.Context, c agentdv1.AgentServiceClient, args []string) (proto.Message, error) {
				return c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: args[0], Messages: []*agentdv1.AgentMessage{
					{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts(args[1])}}}}})
			}),
		a.approvalCommand(true),
		a.approvalCommand(false),
		a.hookCommand(),
		a.inDoubtCommand(),
		result,
		unary("context-answer SESSION REQUEST_ID ENTRY...", "Answer a context_requested event with the entries to keep, in order", cobra.MinimumNArgs(3),
			func(ctx context.Context, c agentdv1.AgentServiceClient, args []string) (proto.Message, error) {
				req := &agentdv1.SubmitContextRequest{SessionId: args[0], RequestId: args[1]}
				for _, id := range args[2:] {
					req.Items = append(req.Items, &agentdv1.ContextSelection{Item: &agentdv1.ContextSelection_EntryId{EntryId: id}})
				}
				return c.SubmitContext(ctx, req)
			}),
	}
}
