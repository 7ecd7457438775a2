// Command example runs the seed's two-prompt scenario against a running
// agentd with the faux model, through the generated Go client: read_file is a
// client-executed tool implemented here in Go, and the built-in edit_file asks
// for approval, granted here.
//
//	make run &          # agentd on 127.0.0.1:7777
//	make go-example     # or: go run ./clients/go/example --address 127.0.0.1:7777
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// prompts are the seed's two user turns.
var prompts = [...]string{"读取 src/config.ts，告诉我默认端口。", "把它改成 8080"}

const configSource = "export const config = {\n  port: 3000,\n};\n"

func main() {
	address := flag.String("address", "127.0.0.1:7777", "agentd's host:port")
	token := flag.String("token", "", "bearer token when agentd runs with --auth-token")
	flag.Parse()

	workspace, err := os.MkdirTemp("", "agentd-example-")
	if err != nil {
		log.Fatal(err)
	}
	if err := writeWorkspace(workspace); err != nil {
		log.Fatal(err)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if *token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(*token)))
	}
	conn, err := grpc.NewClient(*address, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	res, err := twoPrompts(context.Background(), agentdv1.NewAgentServiceClient(conn), workspace, os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
	edited, err := os.ReadFile(filepath.Join(workspace, "src", "config.ts"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("session %s: %d answers; %s/src/config.ts now reads %q\n", res.sessionID, len(res.answers), workspace, edited)
}

func writeWorkspace(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "src", "config.ts"), []byte(configSource), 0o644)
}

// result is what the scenario observed.
type result struct {
	sessionID string
	answers   []string                               // the assistant texts, in order
	tools     map[string]*agentdv1.ToolResultMessage // by tool call id
	approvals []*agentdv1.ApprovalNotice
	events    []*agentdv1.AgentEvent
}

// twoPrompts creates a scripted session and runs both prompts, answering
// tool_call_requested with readFile and approval_requested with "allow".
func twoPrompts(ctx context.Context, client agentdv1.AgentServiceClient, workspace string, out io.Writer) (*result, error) {
	cfg, err := sessionConfig(workspace)
	if err != nil {
		return nil, err
	}
	created, err := client.CreateSession(ctx, &agentdv1.CreateSessionRequest{Config: cfg})
	if err != nil {
		return nil, fmt.Errorf("create session: %w", err)
	}
	sid := created.GetSession().GetId()
	res := &result{sessionID: sid, tools: map[string]*agentdv1.ToolResultMessage{}}
	for _, p := range prompts {
		fmt.Fprintf(out, "  you: %s\n", p)
		stream, err := client.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sid, Content: text(p)})
		if err != nil {
			return nil, fmt.Errorf("prompt %q: %w", p, err)
		}
		for {
			ev, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("prompt %q stream: %w", p, err)
			}
			res.events = append(res.events, ev)
			if err := handle(ctx, client, sid, workspace, ev, res, out); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

// handle answers what the run waits for and prints what settled.
func handle(ctx context.Context, client agentdv1.AgentServiceClient, sid, workspace string, ev *agentdv1.AgentEvent, res *result, out io.Writer) error {
	switch e := ev.GetEvent().(type) {
	case *agentdv1.AgentEvent_ToolCallRequested:
		req := e.ToolCallRequested
		content, isErr := readFile(workspace, req.GetArguments().AsMap())
		_, err := client.SubmitToolResult(ctx, &agentdv1.SubmitToolResultRequest{
			SessionId: sid, ToolCallId: req.GetToolCallId(), Content: text(content), IsError: isErr,
		})
		if err != nil {
			return fmt.Errorf("submit %s result: %w", req.GetToolName(), err)
		}
	case *agentdv1.AgentEvent_ApprovalRequested:
		req := e.ApprovalRequested
		fmt.Fprintf(out, "  ? approve %s %v → yes\n", req.GetToolName(), req.GetArguments().AsMap())
		_, err := client.ResolveApproval(ctx, &agentdv1.ResolveApprovalRequest{
			SessionId: sid, ToolCallId: req.GetToolCallId(), Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED,
			Reason: "looks right", DecidedBy: "example",
		})
		if err != nil {
			return fmt.Errorf("resolve approval of %s: %w", req.GetToolName(), err)
		}
	case *agentdv1.AgentEvent_MessageEnd:
		switch m := e.MessageEnd.GetMessage().GetKind().(type) {
		case *agentdv1.AgentMessage_Assistant:
			if t := textOf(m.Assistant.GetContent()); t != "" {
				res.answers = append(res.answers, t)
				fmt.Fprintf(out, "  assistant: %s\n", t)
			}
		case *agentdv1.AgentMessage_ToolResult:
			r := m.ToolResult
			res.tools[r.GetToolCallId()] = r
			state := "success"
			if r.GetIsError() {
				state = "error"
			}
			fmt.Fprintf(out, "  tool %s [%s]\n", r.GetToolName(), state)
		case *agentdv1.AgentMessage_ApprovalNotice:
			res.approvals = append(res.approvals, m.ApprovalNotice)
			fmt.Fprintf(out, "  approval %s [%s by %s]\n", m.ApprovalNotice.GetToolName(), m.ApprovalNotice.GetDecision(), m.ApprovalNotice.GetDecidedBy())
		}
	}
	return nil
}

// readFile is the client-executed tool: a file of the workspace, confined
// to it. It returns the text the model sees and whether it failed.
func readFile(workspace string, args map[string]any) (string, bool) {
	rel, _ := args["path"].(string)
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return err.Error(), true
	}
	defer root.Close()
	body, err := root.ReadFile(rel)
	if err != nil {
		return fmt.Sprintf("read_file %s: %v", rel, err), true
	}
	return string(body), false
}

func sessionConfig(workspace string) (*agentdv1.SessionConfig, error) {
	params, err := structpb.NewStruct(map[string]any{
		"type":       "object",
		"properties": map[string]any{"path": map[string]any{"type": "string"}},
		"required":   []any{"path"},
	})
	if err != nil {
		return nil, fmt.Errorf("read_file schema: %w", err)
	}
	readCall, err := call("call_read", "read_file", map[string]any{"path": "src/config.ts"})
	if err != nil {
		return nil, err
	}
	editCall, err := call("call_edit", "edit_file", map[string]any{"path": "src/config.ts", "old_text": "port: 3000", "new_text": "port: 8080"})
	if err != nil {
		return nil, err
	}
	return &agentdv1.SessionConfig{
		SystemPrompt:  "你是桌面开发助手。",
		WorkspaceRoot: workspace,
		Tools: []*agentdv1.Tool{
			{Name: "read_file", Description: "Read a file of the user's project (runs in the client).", Parameters: params, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT},
			{Name: "edit_file", Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_SERVER, Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK},
		},
		// The faux model's answers, in order: one per model call.
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
			readCall,
			{Content: text("默认端口是 3000。")},
			editCall,
			{Content: text("已把默认端口改成 8080。")},
		}},
	}, nil
}

func call(id, name string, args map[string]any) (*agentdv1.AssistantMessage, error) {
	s, err := structpb.NewStruct(args)
	if err != nil {
		return nil, fmt.Errorf("%s arguments: %w", name, err)
	}
	return &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{{
		Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: id, Name: name, Arguments: s}},
	}}}, nil
}

func text(t string) []*agentdv1.ContentBlock {
	return []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: t}}}}
}

func textOf(blocks []*agentdv1.ContentBlock) string {
	var b strings.Builder
	for _, c := range blocks {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

// bearer sends the agentd auth token on every call.
type bearer string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (bearer) RequireTransportSecurity() bool { return false }
