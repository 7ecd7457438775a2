package main

// The commands that answer what a run waits for beyond a client tool: a
// lifecycle hook (hook), an approval with its scope and rule (approve,
// deny), the session's approval rules (rules) and a call left in doubt
// (in-doubt). stream() prints a line naming the command to run for each
// such request.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// hookVerdict is the verdict a word of `agentctl hook` names.
func hookVerdict(word string) (agentdv1.HookVerdict, error) {
	switch word {
	case "allow":
		return agentdv1.HookVerdict_HOOK_VERDICT_ALLOW, nil
	case "deny":
		return agentdv1.HookVerdict_HOOK_VERDICT_DENY, nil
	case "modify":
		return agentdv1.HookVerdict_HOOK_VERDICT_MODIFY, nil
	case "redact":
		return agentdv1.HookVerdict_HOOK_VERDICT_REDACT, nil
	}
	return 0, fmt.Errorf("verdict %q: use allow, deny, modify or redact", word)
}

// approvalScope is the scope a word of --scope names.
func approvalScope(word string) (agentdv1.ApprovalScope, error) {
	switch word {
	case "call":
		return agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL, nil
	case "run":
		return agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN, nil
	case "session":
		return agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION, nil
	}
	return 0, fmt.Errorf("--scope %q: use call, run or session", word)
}

// inDoubtAction is the action a word of `agentctl in-doubt` names.
func inDoubtAction(word string) (agentdv1.InDoubtAction, error) {
	switch word {
	case "retry":
		return agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY, nil
	case "skip":
		return agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP, nil
	case "supply":
		return agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY, nil
	}
	return 0, fmt.Errorf("action %q: use retry, skip or supply", word)
}

// hookAnswers lists the verdicts an event accepts, for the line stream()
// prints (agentd checks them again).
func hookAnswers(e agentdv1.HookEvent) string {
	switch e {
	case agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE:
		return "allow|modify|redact"
	case agentdv1.HookEvent_HOOK_EVENT_STOP:
		return "allow|modify"
	}
	return "allow|deny|modify"
}

// jsonObject parses a flag's JSON object.
func jsonObject(flag, s string) (*structpb.Struct, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
		return nil, fmt.Errorf("--%s %q: write a JSON object, such as '{\"command\": \"ls\"}'", flag, s)
	}
	return structpb.NewStruct(m)
}

// jsonValue parses a flag's JSON value.
func jsonValue(flag, s string) (*structpb.Value, error) {
	v := &structpb.Value{}
	if err := protojson.Unmarshal([]byte(s), v); err != nil {
		return nil, fmt.Errorf("--%s %q: not JSON: %v", flag, s, err)
	}
	return v, nil
}

func (a *app) hookCommand() *cobra.Command {
	var reason, arguments, content, details, instructions, by string
	var noDetails, tellModel bool
	cmd := &cobra.Command{
		Use:   "hook SESSION REQUEST_ID allow|deny|modify|redact",
		Short: "Answer a hook_requested event (modify takes --arguments, --content or --instructions)",
		Long: "Answer a lifecycle hook. PRE_TOOL_USE: allow, deny (--reason reaches the model) or modify --arguments JSON. " +
			"POST_TOOL_USE: allow, modify --content TEXT [--details JSON | --no-details] or redact. USER_PROMPT: allow, deny or " +
			"modify --content TEXT (added to this run's model calls). STOP: allow or modify --content TEXT (the run goes on with it). " +
			"PRE_COMPACT: allow, deny or modify --instructions TEXT.",
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := hookVerdict(args[2])
			if err != nil {
				return err
			}
			req := &agentdv1.SubmitHookResultRequest{SessionId: args[0], RequestId: args[1], Verdict: v, Reason: reason,
				Instructions: instructions, IncludeInModelContext: tellModel, DecidedBy: by}
			if cmd.Flags().Changed("arguments") {
				s, err := jsonObject("arguments", arguments)
				if err != nil {
					return err
				}
				req.Arguments = s
			}
			if cmd.Flags().Changed("content") {
				req.Content = texts(content)
			}
			switch {
			case noDetails && cmd.Flags().Changed("details"):
				return errors.New("--details and --no-details: pass one")
			case noDetails:
				req.ReplaceDetails = true
			case cmd.Flags().Changed("details"):
				d, err := jsonValue("details", details)
				if err != nil {
					return err
				}
				req.Details, req.ReplaceDetails = d, true
			}
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.SubmitHookResult(ctx, req)
			if err != nil {
				return err
			}
			return a.print(resp, func() { fmt.Fprintln(a.out, "ok") })
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why; the model sees it on a denied tool call")
	cmd.Flags().StringVar(&arguments, "arguments", "", "PRE_TOOL_USE modify: the call's arguments instead, a JSON object")
	cmd.Flags().StringVar(&content, "content", "", "modify: the result the model sees (POST_TOOL_USE), the added context (USER_PROMPT) or the message the run continues with (STOP)")
	cmd.Flags().StringVar(&details, "details", "", "POST_TOOL_USE modify: the details user interfaces see instead, JSON")
	cmd.Flags().BoolVar(&noDetails, "no-details", false, "POST_TOOL_USE modify: remove the result's details")
	cmd.Flags().StringVar(&instructions, "instructions", "", "PRE_COMPACT modify: the summarizer's instructions")
	cmd.Flags().BoolVar(&tellModel, "tell-model", false, "the model sees the notice this decision records")
	cmd.Flags().StringVar(&by, "by", "agentctl", "who decided, for the record")
	return cmd
}

// approvalCommand is approve (allow) or deny: one waiting call or several of
// one run, with a scope and an optional rule.
func (a *app) approvalCommand(allow bool) *cobra.Command {
	var reason, scope, prefix, glob, tool, arguments, by string
	use, short := "approve SESSION CALL_ID...", "Allow tool calls waiting for approval, for this call, the run (--scope run) or the session (--scope session)"
	decision := agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED
	if !allow {
		use, short = "deny SESSION CALL_ID...", "Refuse tool calls waiting for approval (a --scope run or session refuses the later ones too)"
		decision = agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.MinimumNArgs(2),
		Long: short + ". Several CALL_IDs of one run are decided together, all or none. --command-prefix (bash) or " +
			"--path-glob (file tools) limit a run or session scope to the calls matching them; the rule's tool is the " +
			"first call's, read from the transcript, unless --tool names it.",
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &agentdv1.ResolveApprovalRequest{SessionId: args[0], ToolCallId: args[1], ToolCallIds: args[2:],
				Decision: decision, Reason: reason, DecidedBy: by}
			if cmd.Flags().Changed("scope") {
				s, err := approvalScope(scope)
				if err != nil {
					return err
				}
				req.Scope = s
			}
			if cmd.Flags().Changed("arguments") {
				s, err := jsonObject("arguments", arguments)
				if err != nil {
					return err
				}
				req.Arguments = s
			}
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if prefix != "" || glob != "" || tool != "" {
				if tool == "" {
					if tool, err = toolOfCall(ctx, c, args[0], args[1]); err != nil {
						return err
					}
				}
				req.Rule = &agentdv1.ApprovalRule{ToolName: tool, CommandPrefix: prefix, PathGlob: glob, Reason: reason}
			}
			resp, err := c.ResolveApproval(ctx, req)
			if err != nil {
				return err
			}
			return a.print(resp, func() {
				if r := resp.GetRule(); r != nil {
					fmt.Fprintln(a.out, "ok; rule stored:", ruleLine(r))
					return
				}
				fmt.Fprintln(a.out, "ok")
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why; a denial reaches the model with it")
	cmd.Flags().StringVar(&scope, "scope", "call", "how far the decision reaches: call, run or session (session stores a rule)")
	cmd.Flags().StringVar(&prefix, "command-prefix", "", "the rule: bash commands that start with this text")
	cmd.Flags().StringVar(&glob, "path-glob", "", "the rule: file tool paths matching this glob, such as 'src/*.go'")
	cmd.Flags().StringVar(&tool, "tool", "", "the rule's tool (default: the tool of the first call)")
	if allow {
		cmd.Flags().StringVar(&arguments, "arguments", "", "run the call with these arguments instead, a JSON object (one call only)")
	}
	cmd.Flags().StringVar(&by, "by", "agentctl", "who decided, for the record")
	return cmd
}

// toolOfCall finds the name of the tool a call of the session's current
// path called: a rule names its tool, and no request lists waiting calls.
func toolOfCall(ctx context.Context, c agentdv1.AgentServiceClient, session, callID string) (string, error) {
	token, name := "", ""
	for {
		resp, err := c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: session, PageSize: 1000, PageToken: token})
		if err != nil {
			return "", err
		}
		for _, e := range resp.GetEntries() {
			for _, b := range e.GetMessage().GetAssistant().GetContent() {
				if tc := b.GetToolCall(); tc != nil && tc.GetId() == callID {
					name = tc.GetName()
				}
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if name == "" {
		return "", fmt.Errorf("no call %s in the transcript of %s to take the rule's tool from: pass --tool", callID, session)
	}
	return name, nil
}

// ruleLine is one readable line of an approval rule.
func ruleLine(r *agentdv1.ApprovalRule) string {
	line := fmt.Sprintf("%s  %s  %s", r.GetId(), strings.ToLower(strings.TrimPrefix(r.GetDecision().String(), "APPROVAL_DECISION_")), r.GetToolName())
	switch {
	case r.GetCommandPrefix() != "":
		line += fmt.Sprintf("  command %q…", r.GetCommandPrefix())
	case r.GetPathGlob() != "":
		line += fmt.Sprintf("  path %q", r.GetPathGlob())
	default:
		line += "  any call"
	}
	if r.GetCreatedBy() != "" {
		line += "  by " + r.GetCreatedBy()
	}
	if r.GetReason() != "" {
		line += "  (" + r.GetReason() + ")"
	}
	return line
}

func (a *app) rulesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use: "rules SESSION", Short: "List the session's approval rules (rules delete SESSION RULE_ID removes one)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.ListApprovalRules(ctx, &agentdv1.ListApprovalRulesRequest{SessionId: args[0]})
			if err != nil {
				return err
			}
			if len(resp.GetRules()) == 0 && !a.json {
				fmt.Fprintln(a.out, "no approval rules")
			}
			for _, r := range resp.GetRules() {
				if err := a.print(r, func() { fmt.Fprintln(a.out, ruleLine(r)) }); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use: "delete SESSION RULE_ID", Short: "Remove an approval rule: the calls it decided ask again", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.DeleteApprovalRule(ctx, &agentdv1.DeleteApprovalRuleRequest{SessionId: args[0], RuleId: args[1]})
			if err != nil {
				return err
			}
			return a.print(resp, func() { fmt.Fprintln(a.out, "removed", args[1]) })
		},
	})
	return cmd
}

func (a *app) inDoubtCommand() *cobra.Command {
	var message, content, details string
	var isError bool
	cmd := &cobra.Command{
		Use:   "in-doubt SESSION CALL_ID retry|skip|supply",
		Short: "Decide a tool call left in doubt by a crash: retry it (server tools), skip it (--message) or supply its result (--content)",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			action, err := inDoubtAction(args[2])
			if err != nil {
				return err
			}
			req := &agentdv1.ResolveInDoubtRequest{SessionId: args[0], ToolCallId: args[1], Action: action, Message: message, IsError: isError}
			if cmd.Flags().Changed("content") {
				req.Content = texts(content)
			}
			if cmd.Flags().Changed("details") {
				d, err := jsonValue("details", details)
				if err != nil {
					return err
				}
				req.Details = d
			}
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.ResolveInDoubt(ctx, req)
			if err != nil {
				return err
			}
			return a.print(resp, func() {
				if m := resp.GetEntry().GetMessage(); m != nil {
					fmt.Fprintln(a.out, messageLine(m))
				}
				if len(resp.GetRemaining()) == 0 {
					fmt.Fprintln(a.out, "ok; no call in doubt: the session takes new runs")
					return
				}
				ids := make([]string, len(resp.GetRemaining()))
				for i, r := range resp.GetRemaining() {
					ids[i] = r.GetToolCallId()
				}
				fmt.Fprintf(a.out, "ok; still in doubt: %s\n", strings.Join(ids, ", "))
			})
		},
	}
	cmd.Flags().StringVar(&message, "message", "", "skip: what the model sees (default: the call was not retried)")
	cmd.Flags().StringVar(&content, "content", "", "supply: the result the model sees")
	cmd.Flags().StringVar(&details, "details", "", "supply: structured data for user interfaces, JSON")
	cmd.Flags().BoolVar(&isError, "error", false, "supply: the result is an error")
	return cmd
}

// waitLine is the readable line of an event that waits for an answer (an
// approval, a hook) or a decision (a call in doubt), naming the agentctl
// command that gives it; empty for other events.
func waitLine(ev *agentdv1.AgentEvent) string {
	s := ev.GetSessionId()
	switch e := ev.GetEvent().(type) {
	case *agentdv1.AgentEvent_ApprovalRequested:
		r := e.ApprovalRequested
		args, _ := protojson.Marshal(r.GetArguments())
		return fmt.Sprintf("? approval: %s %s → agentctl approve|deny %s %s [--scope run|session]", r.GetToolName(), args, s, r.GetToolCallId())
	case *agentdv1.AgentEvent_HookRequested:
		r := e.HookRequested
		what := ""
		switch {
		case r.GetToolCall() != nil:
			args, _ := protojson.Marshal(r.GetToolCall().GetArguments())
			what = fmt.Sprintf(" %s %s", r.GetToolCall().GetName(), args)
		case r.GetMessage() != nil:
			what = " " + firstLine(messageLine(r.GetMessage()), 80)
		}
		event := strings.ToLower(strings.TrimPrefix(r.GetEvent().String(), "HOOK_EVENT_"))
		return fmt.Sprintf("? hook %s (%s)%s → agentctl hook %s %s %s", r.GetHook(), event, what, s, r.GetRequestId(), hookAnswers(r.GetEvent()))
	case *agentdv1.AgentEvent_ToolInDoubt:
		r := e.ToolInDoubt
		args, _ := protojson.Marshal(r.GetArguments())
		return fmt.Sprintf("! in doubt: %s %s → agentctl in-doubt %s %s retry|skip|supply", r.GetToolName(), args, s, r.GetToolCallId())
	}
	return ""
}
