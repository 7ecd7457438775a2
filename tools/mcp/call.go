package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Progress is one progress notification of a running call.
type Progress struct {
	// Progress so far, and Total when the server knows it (0 otherwise).
	Progress, Total float64
	// Message is the server's note, when it sends one.
	Message string
}

// ProgressFunc receives a call's progress notifications.
type ProgressFunc func(Progress)

// connectionEndWait is how long a call that failed without an answer
// waits to learn whether its connection ended.
const connectionEndWait = 2 * time.Second

// errCallTimeout is the cause of a call's context when its timeout passes.
var errCallTimeout = errors.New("MCP call timed out")

// Call calls the tool named tool of the server named server, connecting
// to it first when needed, with args as its arguments object; progress,
// when not nil, receives its progress notifications. Cancelling ctx
// cancels the request (MCP cancellation). A failure of the server (it
// cannot be started or reached, it stops during the call, it does not
// answer within the server's timeout, it refuses the request) is an error
// whose text says which and what happens next; a result the tool marked
// isError is returned as a result.
func (m *Manager) Call(ctx context.Context, server, tool string, args map[string]any, progress ProgressFunc) (*mcpsdk.CallToolResult, error) {
	return m.call(ctx, server, tool, args, progress, "")
}

// IdempotencyKeyMeta is the key of the request's _meta under which a
// tools/call carries the call's idempotency key ("<session id>/<run id>/
// <tool call id>"): the same for a retry of the call, so a server can
// apply its effect once.
const IdempotencyKeyMeta = "agentd/idempotency_key"

// call is Call, sending key (when not empty) as the idempotency key.
func (m *Manager) call(ctx context.Context, server, tool string, args map[string]any, progress ProgressFunc, key string) (*mcpsdk.CallToolResult, error) {
	s, err := m.server(server)
	if err != nil {
		return nil, err
	}
	s.begin()
	defer s.end()
	c, err := s.connect(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("MCP server %q could not be used: %w", server, err)
	}
	timeout := s.cfg.callTimeout()
	callCtx, cancel := context.WithTimeoutCause(ctx, timeout, errCallTimeout)
	defer cancel()
	if args == nil {
		args = map[string]any{}
	}
	params := &mcpsdk.CallToolParams{Name: tool, Arguments: args}
	if key != "" {
		params.Meta = mcpsdk.Meta{IdempotencyKeyMeta: key}
	}
	if progress != nil {
		token := "agentd-" + strconv.FormatUint(m.tokens.Add(1), 10)
		params.SetProgressToken(token)
		s.progress.Store(token, progress)
		defer s.progress.Delete(token)
	}
	res, err := c.session.CallTool(callCtx, params)
	if err == nil {
		s.mu.Lock()
		s.failures = 0
		s.mu.Unlock()
		return res, nil
	}
	switch {
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case errors.Is(context.Cause(callCtx), errCallTimeout):
		return nil, fmt.Errorf("MCP server %q did not answer the call of %q within %s (its timeout); the call was cancelled", server, tool, timeout)
	}
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		return nil, fmt.Errorf("MCP server %q refused the call of %q: %w", server, tool, err)
	}
	// Not an answer of the server's: the connection broke. Its end is
	// noticed on its own, a moment later, with the reason.
	select {
	case <-c.done:
		s.mu.Lock()
		reason := s.lastErr
		s.mu.Unlock()
		if reason == "" {
			reason = err.Error()
		}
		return nil, fmt.Errorf("MCP server %q stopped during the call of %q: %s; it is started again for the next call", server, tool, reason)
	case <-time.After(connectionEndWait):
	}
	return nil, fmt.Errorf("MCP server %q refused the call of %q: %w", server, tool, err)
}

// tool is one MCP tool as the loop calls it.
type tool struct {
	m      *Manager
	server string
	spec   *agentdv1.McpTool
	def    *agentdv1.Tool
}

// Tool returns the loop's tool for spec, a tool of the server named server
// as a snapshot declares it; it connects to the server only when called.
func (m *Manager) Tool(server string, spec *agentdv1.McpTool) agentloop.Tool {
	return tool{m: m, server: server, spec: spec, def: &agentdv1.Tool{
		Name:        ModelName(server, spec.GetName()),
		Description: spec.GetDescription(),
		Parameters:  spec.GetInputSchema(),
		Executor:    agentdv1.ToolExecutor_TOOL_EXECUTOR_SERVER,
	}}
}

// Definition implements [agentloop.Tool].
func (t tool) Definition() *agentdv1.Tool { return t.def }

// Execute implements [agentloop.Tool].
func (t tool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	return t.ExecuteIdempotent(ctx, call, "")
}

// ReadOnly reports whether the operator marked the tool's server
// read-only (ServerConfig.ReadOnly): its calls change nothing.
func (t tool) ReadOnly() bool {
	cfg, ok := t.m.Server(t.server)
	return ok && cfg.ReadOnly
}

// ExecuteIdempotent is Execute with the call's idempotency key sent to the
// server in the request's _meta (IdempotencyKeyMeta); an empty key sends
// none.
func (t tool) ExecuteIdempotent(ctx context.Context, call agentloop.Call, key string) (agentloop.Result, error) {
	var progress ProgressFunc
	if call.Update != nil {
		progress = func(p Progress) {
			call.Update([]*agentdv1.ContentBlock{textBlock(progressText(p))}, progressDetails(p))
		}
	}
	res, err := t.m.call(ctx, t.server, t.spec.GetName(), call.Args.AsMap(), progress, key)
	if err != nil {
		return agentloop.Result{}, err
	}
	return convertResult(res), nil
}

func progressText(p Progress) string {
	var b strings.Builder
	b.WriteString("progress ")
	b.WriteString(strconv.FormatFloat(p.Progress, 'f', -1, 64))
	if p.Total > 0 {
		b.WriteString("/" + strconv.FormatFloat(p.Total, 'f', -1, 64))
	}
	if p.Message != "" {
		b.WriteString(": " + p.Message)
	}
	return b.String()
}

func progressDetails(p Progress) *structpb.Value {
	fields := map[string]*structpb.Value{"progress": structpb.NewNumberValue(p.Progress)}
	if p.Total > 0 {
		fields["total"] = structpb.NewNumberValue(p.Total)
	}
	if p.Message != "" {
		fields["message"] = structpb.NewStringValue(p.Message)
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: fields})
}

func textBlock(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}

// convertResult splits an MCP result between the model and the details:
// text, images and the text of embedded resources go to the model;
// structuredContent, resource links, embedded binary resources and audio
// go to details. When nothing is left for the model, it gets the
// structured content as JSON, or the links, so it never sees an empty
// result.
func convertResult(res *mcpsdk.CallToolResult) agentloop.Result {
	out := agentloop.Result{IsError: res.IsError}
	details := map[string]any{}
	var links, resources, audio []any
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcpsdk.TextContent:
			out.Content = append(out.Content, textBlock(c.Text))
		case *mcpsdk.ImageContent:
			out.Content = append(out.Content, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Image{Image: &agentdv1.ImageContent{Data: c.Data, MimeType: c.MIMEType}}})
		case *mcpsdk.ResourceLink:
			links = append(links, jsonValue(c))
		case *mcpsdk.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				out.Content = append(out.Content, textBlock(c.Resource.Text))
			}
			resources = append(resources, jsonValue(c))
		case *mcpsdk.AudioContent:
			audio = append(audio, map[string]any{"mimeType": c.MIMEType, "bytes": len(c.Data)})
		default:
			details["unsupportedContent"] = append(asSlice(details["unsupportedContent"]), jsonValue(c))
		}
	}
	if res.StructuredContent != nil {
		details["structuredContent"] = jsonValue(res.StructuredContent)
	}
	if links != nil {
		details["resourceLinks"] = links
	}
	if resources != nil {
		details["resources"] = resources
	}
	if audio != nil {
		details["audio"] = audio
	}
	if len(out.Content) == 0 {
		switch {
		case res.StructuredContent != nil:
			b, _ := json.Marshal(res.StructuredContent)
			out.Content = []*agentdv1.ContentBlock{textBlock(string(b))}
		case links != nil:
			var b strings.Builder
			b.WriteString("Resource links:")
			for _, c := range res.Content {
				if l, ok := c.(*mcpsdk.ResourceLink); ok {
					fmt.Fprintf(&b, "\n- %s <%s>", l.Name, l.URI)
				}
			}
			out.Content = []*agentdv1.ContentBlock{textBlock(b.String())}
		default:
			out.Content = []*agentdv1.ContentBlock{textBlock("(the tool returned no content)")}
		}
	}
	if len(details) > 0 {
		if v, err := structpb.NewValue(details); err == nil {
			out.Details = v
		}
	}
	return out
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// jsonValue turns v into plain JSON values (maps, slices, strings,
// float64, bool, nil) the way it goes over the wire, so structpb accepts
// it.
func jsonValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return string(b)
	}
	return out
}

// toolFromSDK converts a listed tool to its snapshot form.
func toolFromSDK(t *mcpsdk.Tool) (*agentdv1.McpTool, error) {
	schema, ok := jsonValue(t.InputSchema).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("input schema is %T", t.InputSchema)
	}
	st, err := structpb.NewStruct(schema)
	if err != nil {
		return nil, err
	}
	mt := &agentdv1.McpTool{Name: t.Name, Description: t.Description, InputSchema: st, Title: t.Title}
	if a := t.Annotations; a != nil {
		mt.ReadOnlyHint = a.ReadOnlyHint
		if mt.Title == "" {
			mt.Title = a.Title
		}
	}
	return mt, nil
}
