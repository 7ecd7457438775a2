package agentloop

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// UpdateFunc lets a running tool report progress; each call becomes a
// tool_execution_update event. Calls after Execute returned are ignored.
type UpdateFunc func(content []*agentdv1.ContentBlock, details *structpb.Value)

// Result is what a tool produced.
type Result struct {
	// Content is what the model sees.
	Content []*agentdv1.ContentBlock
	// Details is for user interfaces and logs, never sent to the model.
	Details *structpb.Value
	// Terminate asks to end the run after this batch; honoured only when
	// every result of the batch asks for it.
	Terminate bool
	// IsError marks the result as a failure while keeping Content and
	// Details as given (a returned error carries only its text).
	IsError bool
}

// Scope is what the loop lends a tool or a hook for the run it belongs to:
// the way to add events and transcript messages to the run, in order with
// the loop's own. Use it only while the call it was handed to runs.
type Scope interface {
	// Emit sends an event of the run to the sink, for events the loop does
	// not produce itself, such as a request for the user's approval. The
	// loop stamps its time.
	Emit(ev *agentdv1.AgentEvent) error
	// Record adds a message to the run's transcript: the sink receives its
	// message_start and message_end (and stores it), and the run's later
	// model calls see it. Recorded from a tool call or its hooks, it lands
	// before the batch's tool results, so a record of a decision about a
	// call precedes the call's result.
	Record(msg *agentdv1.AgentMessage) error
}

// Call is one execution of a tool.
type Call struct {
	// ID is the tool call's id, as the model gave it.
	ID string
	// Args are the arguments, validated and coerced against the tool's
	// schema.
	Args *structpb.Struct
	// Update reports progress as tool_execution_update events.
	Update UpdateFunc
	// Run is the run the call belongs to.
	Run Scope
}

// Tool is a tool the model may call. Execute must honour ctx: an abort
// cancels it. A tool fails in one of two forms of one result: a returned
// error becomes an error result holding the error's text (a panic becomes
// one too); a failure that has more to show (details for user interfaces,
// images) returns a [Result] with IsError set.
type Tool interface {
	// Definition is the declaration sent to the model: name, description,
	// JSON Schema parameters and the sequential flag. It must not change.
	Definition() *agentdv1.Tool
	// Execute runs one call of the tool.
	Execute(ctx context.Context, call Call) (Result, error)
}

// FuncTool adapts a function to Tool.
type FuncTool struct {
	// Def is returned by Definition.
	Def *agentdv1.Tool
	// Fn is called by Execute.
	Fn func(ctx context.Context, call Call) (Result, error)
}

// Definition implements Tool.
func (t FuncTool) Definition() *agentdv1.Tool { return t.Def }

// Execute implements Tool.
func (t FuncTool) Execute(ctx context.Context, call Call) (Result, error) {
	return t.Fn(ctx, call)
}

// ToolSet is an immutable set of tools with their schemas compiled once, so
// validation costs no compilation per call. Runs may share a ToolSet.
type ToolSet struct {
	defs   []*agentdv1.Tool
	byName map[string]*toolEntry
}

type toolEntry struct {
	tool   Tool
	def    *agentdv1.Tool
	schema *argSchema
}

// NewToolSet compiles the tools' schemas. It fails on a missing or
// duplicate name and on a schema that does not compile.
func NewToolSet(tools ...Tool) (*ToolSet, error) {
	return (*SchemaCache)(nil).NewToolSet(tools...)
}

// NewToolSet is the package's NewToolSet with each schema compiled once
// for every tool set c builds; a nil c compiles every schema.
func (c *SchemaCache) NewToolSet(tools ...Tool) (*ToolSet, error) {
	ts := &ToolSet{byName: make(map[string]*toolEntry, len(tools))}
	for i, t := range tools {
		def := t.Definition()
		if def.GetName() == "" {
			return nil, fmt.Errorf("agentloop: tool %d has no name", i)
		}
		if _, dup := ts.byName[def.GetName()]; dup {
			return nil, fmt.Errorf("agentloop: duplicate tool name %q", def.GetName())
		}
		sch, err := c.compile(i, def.GetParameters())
		if err != nil {
			return nil, fmt.Errorf("agentloop: tool %q: invalid parameters schema: %w", def.GetName(), err)
		}
		ts.byName[def.GetName()] = &toolEntry{tool: t, def: def, schema: sch}
		ts.defs = append(ts.defs, def)
	}
	return ts, nil
}

// Definitions returns the declarations for the model context, in the order
// the tools were given. The slice is shared: do not modify it.
func (ts *ToolSet) Definitions() []*agentdv1.Tool {
	if ts == nil {
		return nil
	}
	return ts.defs
}

// Tool returns the tool named name, for a caller that runs a call outside
// the loop (a retry of a call whose outcome is unknown) with the tools the
// loop would use.
func (ts *ToolSet) Tool(name string) (Tool, bool) {
	e := ts.lookup(name)
	if e == nil {
		return nil, false
	}
	return e.tool, true
}

func (ts *ToolSet) lookup(name string) *toolEntry {
	if ts == nil {
		return nil
	}
	return ts.byName[name]
}

// ValidateArguments validates and coerces arguments for the named tool the
// way the loop does before running it, for callers (such as a client-tool
// gateway) that need the same check.
func (ts *ToolSet) ValidateArguments(name string, args *structpb.Struct) (*structpb.Struct, error) {
	e := ts.lookup(name)
	if e == nil {
		return nil, errors.New(NotFoundText(name))
	}
	return e.schema.validateArguments(name, args)
}

// ToolCallInfo describes the call a hook is asked about.
type ToolCallInfo struct {
	// AssistantMessage is the message that holds the call.
	AssistantMessage *agentdv1.AssistantMessage
	// ToolCall is the call itself, with the arguments as the model sent them.
	ToolCall *agentdv1.ToolCall
	// Args are the validated, coerced arguments.
	Args *structpb.Struct
	// Messages is the run's transcript so far; read-only.
	Messages []*agentdv1.AgentMessage
	// Run is the run the call belongs to.
	Run Scope
}

// BeforeDecision is a BeforeToolCall hook's answer.
type BeforeDecision struct {
	// Block refuses the call; the model gets an error result with Reason, or
	// "Tool execution was blocked" when Reason is empty.
	Block bool
	// Reason tells the model why the call was blocked.
	Reason string
	// Args, when set, replaces the arguments the tool runs with (a hook's
	// or a resolver's edit). The loop validates them against the tool's
	// schema again; an invalid replacement becomes the call's error result.
	Args *structpb.Struct
}

// BeforeToolCallFunc runs after validation and before execution, in the
// call's own goroutine (in parallel mode the calls of a batch wait for
// their hooks concurrently). It may block for a long time (an approval
// gate) and must return promptly once ctx is cancelled. A returned error
// becomes the call's error result.
type BeforeToolCallFunc func(ctx context.Context, call ToolCallInfo) (BeforeDecision, error)

// AfterToolCallInfo is what AfterToolCall sees.
type AfterToolCallInfo struct {
	ToolCallInfo
	// Result is what the tool returned (or the error result made for it).
	Result Result
	// IsError says whether Result is an error result.
	IsError bool
}

// ResultOverride rewrites a tool's result; nil fields keep the original.
type ResultOverride struct {
	// Content replaces what the model sees.
	Content []*agentdv1.ContentBlock
	// Details replaces what UIs see.
	Details *structpb.Value
	// RemoveDetails drops the result's details (a redaction); it wins
	// over Details.
	RemoveDetails bool
	// Terminate replaces the tool's request to end the run after this batch.
	Terminate *bool
	// IsError replaces whether the result is an error result.
	IsError *bool
}

// AfterToolCallFunc runs after a tool executed (not for immediate errors
// such as an unknown tool). Returning nil keeps the result; an error
// replaces it with an error result.
type AfterToolCallFunc func(ctx context.Context, info AfterToolCallInfo) (*ResultOverride, error)
