package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// Structured output: a run with an output schema delivers its answer as a
// JSON object valid against it (docs/ARCHITECTURE.md, "Typed answers").
const (
	// SubmitOutputTool is the reserved finalizer tool a run with an output
	// schema offers when its model has no native structured-output mode
	// usable with its tools; no session tool may take its name.
	SubmitOutputTool = "submit_output"
	// DefaultMaxOutputRetries is how many times an answer that does not
	// validate goes back to the model when neither the request nor the
	// session says.
	DefaultMaxOutputRetries = 2
	// MaxOutputRetries bounds max_output_retries.
	MaxOutputRetries = 10
	// MaxOutputSchemaBytes bounds an output schema, encoded.
	MaxOutputSchemaBytes = 64 << 10
)

// The texts the model sees of structured output, defined here only.
const (
	// submitOutputDescription describes the finalizer tool.
	submitOutputDescription = "Deliver your final answer. Call this tool once, when you are done, with the answer as its arguments; " +
		"they must match its parameters schema. The arguments are your answer: text you write besides this call is not."
	// submitOutputAcceptedText is the finalizer tool's result; the run
	// ends after it.
	submitOutputAcceptedText = "Answer accepted."
	// nativeCorrectionText asks for a corrected JSON answer; %s are the
	// validation errors, one per line.
	nativeCorrectionText = "Your answer must be only a JSON object valid against the required output schema, and it is not:\n%s\n" +
		"Answer again with only the corrected JSON object."
	// finalizerCorrectionText answers a plain-text answer of a run whose
	// answer goes through the finalizer tool.
	finalizerCorrectionText = "Give your final answer by calling the " + SubmitOutputTool + " tool with the answer as its arguments; " +
		"an answer in plain text is not accepted."
)

// outputSchemaStage is the stage of the error event of a run whose answer
// never validated.
const outputSchemaStage = "output_schema"

// CheckOutputSchema checks an output schema of a request or a session
// configuration, named field: at most MaxOutputSchemaBytes encoded, an
// object schema at its root, and compiling as JSON Schema draft 2020-12
// with references only within itself. nil (no schema) passes.
func CheckOutputSchema(field string, s *structpb.Struct) error {
	if s == nil {
		return nil
	}
	if n := proto.Size(s); n > MaxOutputSchemaBytes {
		return invalid(field, "%d bytes exceed the limit of %d", n, MaxOutputSchemaBytes)
	}
	if t := s.GetFields()["type"]; t.GetStringValue() != "object" {
		return invalid(field, `must be an object schema: its root needs "type": "object" (the answer is a JSON object)`)
	}
	if _, err := agentloop.CompileSchema(s); err != nil {
		return invalid(field, "is not a valid JSON Schema (draft 2020-12): %v", err)
	}
	return nil
}

// CheckMaxOutputRetries checks a max_output_retries of a request or a
// session configuration, named field.
func CheckMaxOutputRetries(field string, n *uint32) error {
	if n != nil && *n > MaxOutputRetries {
		return invalid(field, "%d exceeds the limit of %d", *n, MaxOutputRetries)
	}
	return nil
}

// checkOutputConfig checks a session's output schema settings and keeps
// its tools off the reserved finalizer tool's name.
func checkOutputConfig(cfg *agentdv1.SessionConfig) error {
	if err := CheckOutputSchema("config.output_schema", cfg.GetOutputSchema()); err != nil {
		return err
	}
	if err := CheckMaxOutputRetries("config.max_output_retries", maxOutputRetriesOf(cfg)); err != nil {
		return err
	}
	for i, t := range cfg.GetTools() {
		if t.GetName() == SubmitOutputTool {
			return invalid(fmt.Sprintf("config.tools[%d].name", i), "%q is reserved: runs with an output schema offer it to deliver their answer; choose another name", SubmitOutputTool)
		}
	}
	return nil
}

// outputSchemaFor is the one decision of a run's output schema and its
// corrections: the request's schema, else the session's; the request's
// max_output_retries, else the session's, else DefaultMaxOutputRetries.
// A nil schema means the run has none.
func outputSchemaFor(cfg *agentdv1.SessionConfig, run *agentdv1.RunRequest) (*structpb.Struct, uint32) {
	schema := run.GetOutputSchema()
	if schema == nil {
		schema = cfg.GetOutputSchema()
	}
	retries := uint32(DefaultMaxOutputRetries)
	switch {
	case run != nil && run.MaxOutputRetries != nil:
		retries = run.GetMaxOutputRetries()
	case maxOutputRetriesOf(cfg) != nil:
		retries = cfg.GetMaxOutputRetries()
	}
	return schema, retries
}

// maxOutputRetriesOf is cfg's max_output_retries, nil when unset (or cfg
// is nil: generated getters hide presence).
func maxOutputRetriesOf(cfg *agentdv1.SessionConfig) *uint32 {
	if cfg == nil {
		return nil
	}
	return cfg.MaxOutputRetries
}

// runOutput holds a run's output schema and what became of its answers.
// A nil *runOutput is a run without a schema: every method does nothing.
type runOutput struct {
	schema     *structpb.Struct
	compiled   *agentloop.Schema
	native     bool
	maxRetries uint32
	now        func() time.Time

	mu sync.Mutex
	// retries counts the corrections the model got.
	retries uint32
	// answer is the latest final answer, when it validated.
	answer *structpb.Struct
	// problems say why the latest final answer did not validate; nil when
	// it did, or when the latest answer was not final (it called tools).
	problems []string
	// In finalizer mode: the latest answer called submit_output
	// (submitted), pending holds the arguments of its first valid call
	// (pendingID) until the call's result accepts them.
	submitted bool
	pending   *structpb.Struct
	pendingID string
	accepted  bool
}

// newRunOutput prepares the structured output of a run of cfg started by
// run on model, whose tools (hasTools) decide whether its API's native
// mode applies; nil when the run has no schema.
func newRunOutput(cfg *agentdv1.SessionConfig, run *agentdv1.RunRequest, model provider.Model, hasTools bool, now func() time.Time) (*runOutput, error) {
	schema, retries := outputSchemaFor(cfg, run)
	if schema == nil {
		return nil, nil
	}
	field := "output_schema"
	if run.GetOutputSchema() == nil {
		field = "config.output_schema"
	}
	if err := CheckOutputSchema(field, schema); err != nil {
		return nil, err
	}
	compiled, err := agentloop.CompileSchema(schema)
	if err != nil {
		return nil, invalid(field, "%v", err)
	}
	return &runOutput{schema: schema, compiled: compiled, native: provider.NativeStructuredOutput(model, hasTools),
		maxRetries: min(retries, MaxOutputRetries), now: now}, nil
}

// withTool returns set with the finalizer tool added when the run
// answers through it, else set unchanged.
func (o *runOutput) withTool(schemas *agentloop.SchemaCache, set *agentloop.ToolSet) (*agentloop.ToolSet, error) {
	if o == nil || o.native {
		return set, nil
	}
	defs := set.Definitions()
	list := make([]agentloop.Tool, 0, len(defs)+1)
	for _, d := range defs {
		t, _ := set.Tool(d.GetName())
		list = append(list, t)
	}
	list = append(list, agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: SubmitOutputTool, Description: submitOutputDescription, Parameters: o.schema,
			Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_SERVER},
		Fn: func(context.Context, agentloop.Call) (agentloop.Result, error) {
			return agentloop.Result{Content: []*agentdv1.ContentBlock{textBlock(submitOutputAcceptedText)}}, nil
		},
	})
	return schemas.NewToolSet(list...)
}

// streamOptions asks the provider for the schema natively, in native mode.
func (o *runOutput) streamOptions(opts *provider.Options) {
	if o != nil && o.native {
		opts.OutputSchema = o.schema
	}
}

// configure puts the output checks in the loop: BeforeStop sends an
// answer that did not validate back before the session's STOP hooks are
// asked (they see only valid answers); ShouldStopAfterTurn ends the run
// once submit_output accepted an answer, or when the corrections are used
// up.
func (o *runOutput) configure(cfg *agentloop.Config) {
	if o == nil {
		return
	}
	hooks := cfg.BeforeStop
	cfg.BeforeStop = func(ctx context.Context, info agentloop.StopInfo) ([]*agentdv1.AgentMessage, error) {
		if correction := o.beforeStop(); correction != nil {
			return []*agentdv1.AgentMessage{correction}, nil
		}
		if hooks == nil || !o.valid() {
			return nil, nil
		}
		return hooks(ctx, info)
	}
	stop := cfg.ShouldStopAfterTurn
	cfg.ShouldStopAfterTurn = func(ctx context.Context, info agentloop.TurnInfo) bool {
		done := o.turnEnded()
		return (stop != nil && stop(ctx, info)) || done
	}
}

// valid reports whether the latest final answer validated.
func (o *runOutput) valid() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.answer != nil
}

// messageEnded looks at each message of the run before it is stored: an
// answer's structured_output is set here, so the stored message carries
// it.
func (o *runOutput) messageEnded(m *agentdv1.AgentMessage) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if tr := m.GetToolResult(); tr != nil {
		if !o.native && o.pending != nil && tr.GetToolCallId() == o.pendingID {
			if tr.GetIsError() {
				// Refused after it validated (a hook or a policy): the
				// result says why.
				o.problems = []string{problemLine("", resultText(tr))}
			} else {
				o.answer, o.problems, o.accepted = o.pending, nil, true
			}
			o.pending = nil
		}
		return
	}
	a := m.GetAssistant()
	if a == nil || provider.IsFailedAnswer(a) {
		return
	}
	o.answer, o.problems, o.submitted, o.pending, o.accepted = nil, nil, false, nil, false
	var calls []*agentdv1.ToolCall
	for _, b := range a.GetContent() {
		if tc := b.GetToolCall(); tc != nil {
			calls = append(calls, tc)
		}
	}
	if o.native {
		if len(calls) == 0 {
			o.answer, o.problems = o.validateText(a.GetContent())
			a.StructuredOutput = o.answer
		}
		return
	}
	for _, tc := range calls {
		if tc.GetName() != SubmitOutputTool {
			continue
		}
		o.submitted = true
		v, problems := o.validate(tc.GetArguments())
		if v != nil {
			a.StructuredOutput, o.pending, o.pendingID, o.problems = v, v, tc.GetId(), nil
			return
		}
		o.problems = problems
	}
	if len(calls) == 0 {
		o.problems = []string{problemLine("", "the answer is plain text, not a call of "+SubmitOutputTool)}
	}
}

// validate validates a JSON object against the schema: the coerced
// object, or the problems as lines.
func (o *runOutput) validate(v *structpb.Struct) (*structpb.Struct, []string) {
	out, problems := o.compiled.Validate(v)
	if out != nil {
		return out, nil
	}
	lines := make([]string, len(problems))
	for i, p := range problems {
		lines[i] = problemLine(p.Path, p.Message)
	}
	return nil, lines
}

// validateText validates a native answer: its text must be a JSON object
// (a Markdown code fence around it is tolerated).
func (o *runOutput) validateText(blocks []*agentdv1.ContentBlock) (*structpb.Struct, []string) {
	var sb strings.Builder
	for _, b := range blocks {
		sb.WriteString(b.GetText().GetText())
	}
	text := strings.TrimSpace(sb.String())
	if rest, ok := strings.CutPrefix(text, "```"); ok {
		if body, ok := strings.CutSuffix(rest, "```"); ok {
			_, body, _ = strings.Cut(body, "\n") // the fence's info string
			text = strings.TrimSpace(body)
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil || m == nil {
		reason := "the answer is not a JSON object"
		if err != nil {
			reason += " (" + err.Error() + ")"
		}
		return nil, []string{problemLine("", reason)}
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil, []string{problemLine("", err.Error())}
	}
	return o.validate(s)
}

// problemLine is one validation error as the model and agent_end see it,
// worded as a tool's argument errors are.
func problemLine(path, msg string) string {
	if path == "" {
		path = "root"
	}
	return "  - " + path + ": " + msg
}

func resultText(tr *agentdv1.ToolResultMessage) string {
	var parts []string
	for _, b := range tr.GetContent() {
		if t := b.GetText().GetText(); t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, " ")
}

// beforeStop is asked where the run would end: the correction to send
// when the latest answer did not validate and corrections remain, else
// nil.
func (o *runOutput) beforeStop() *agentdv1.AgentMessage {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.answer != nil || o.problems == nil || o.retries >= o.maxRetries {
		return nil
	}
	o.retries++
	text := finalizerCorrectionText
	if o.native {
		text = fmt.Sprintf(nativeCorrectionText, strings.Join(o.problems, "\n"))
	}
	return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
		Content: []*agentdv1.ContentBlock{textBlock(text)}, Timestamp: timestamppb.New(o.now())}}}
}

// turnEnded says whether the run ends after a turn in finalizer mode:
// when submit_output accepted the answer, or when the turn's call of it
// failed with no corrections left (its error result was the correction
// otherwise).
func (o *runOutput) turnEnded() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.native || !o.submitted {
		return false
	}
	if o.accepted {
		return true
	}
	if o.retries >= o.maxRetries {
		return true
	}
	o.retries++
	return false
}

// end completes agent_end of a run that completed: its structured output,
// or the outcome OUTPUT_INVALID with the errors of the last answer, which
// the returned fatal error event also carries.
func (o *runOutput) end(end *agentdv1.AgentEnd) *agentdv1.AgentEvent {
	if o == nil || end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.answer != nil {
		end.StructuredOutput = o.answer
		return nil
	}
	end.Outcome = agentdv1.RunOutcome_RUN_OUTCOME_OUTPUT_INVALID
	if o.problems == nil {
		end.ErrorMessage = "the run ended without a final answer to validate against its output schema"
	} else {
		end.ErrorMessage = fmt.Sprintf("the answer does not validate against the output schema (after %d correction(s)):\n%s",
			o.retries, strings.Join(o.problems, "\n"))
	}
	return &agentdv1.AgentEvent{Time: timestamppb.New(o.now()), Event: &agentdv1.AgentEvent_Error{Error: &agentdv1.AgentError{
		Message: end.ErrorMessage, Stage: outputSchemaStage, Fatal: true}}}
}
