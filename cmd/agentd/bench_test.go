package main

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools/sandbox"
	"github.com/agentd/agentd/tools/sandbox/sandboxtest"
)

// BenchmarkBashCall measures what the sandbox adds to one bash call with
// the agentd binary itself as the helper: a prompt whose answer calls
// bash `true` 20 times one after the other, on an agentd confining bash
// and on one run with --sandbox=off, alternating in one run. It reports
// each one's time per call, their ratio and the milliseconds confinement
// adds to a call (target ≤ 15).
func BenchmarkBashCall(b *testing.B) {
	sandboxtest.New(b, sandbox.Options{})
	const calls = 20
	ws := b.TempDir()
	args, _ := structpb.NewStruct(map[string]any{"command": "true"})
	var content []*agentdv1.ContentBlock
	for i := range calls {
		content = append(content, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{
			Id: "c" + strconv.Itoa(i), Name: "bash", Arguments: args}}})
	}
	cfg := &agentdv1.SessionConfig{
		WorkspaceRoot: ws,
		ToolExecution: agentdv1.ToolExecutionMode_TOOL_EXECUTION_MODE_SEQUENTIAL,
		Tools:         []*agentdv1.Tool{{Name: "bash", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW}},
		Faux:          &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{{Content: content}, {Content: texts("done")}}},
	}
	run := func(p *proc) time.Duration {
		c := p.client()
		id := createSession(b, c, cfg)
		start := time.Now()
		evs, err := drain(c.Prompt(testCtx(b), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")}))
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		for _, ev := range evs {
			if r := ev.GetToolExecutionEnd().GetResult(); r != nil && r.GetIsError() {
				b.Fatalf("a call failed: %v", r)
			}
		}
		return d
	}
	dbs := b.TempDir()
	confined := startProc(b, filepath.Join(dbs, "on.db"))
	bare := startProc(b, filepath.Join(dbs, "off.db"), "--sandbox=off")
	run(confined) // warm both
	run(bare)
	var on, off time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			on += run(confined)
			off += run(bare)
		} else {
			off += run(bare)
			on += run(confined)
		}
	}
	n := float64(b.N * calls)
	b.ReportMetric(float64(on.Microseconds())/n, "µs/call-confined")
	b.ReportMetric(float64(off.Microseconds())/n, "µs/call-unconfined")
	b.ReportMetric(float64(on)/float64(off), "confined/unconfined")
	b.ReportMetric(float64((on-off).Microseconds())/n/1000, "ms-added/call")
}
