package agentloop_test

import (
	"context"
	"fmt"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
)

// The faux provider drives the loop end to end: one tool call, one answer.
func ExampleRun() {
	model := faux.New(faux.Options{},
		faux.Reply(faux.Message(faux.ToolCall("call_1", "read_file", map[string]any{"path": "src/config.ts"}))),
		faux.Reply(faux.Message(faux.Text("The default port is 3000."))))
	readFile := agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "read_file"},
		Fn: func(_ context.Context, _ agentloop.Call) (agentloop.Result, error) {
			return agentloop.Result{Content: []*agentdv1.ContentBlock{faux.Text("export const port = 3000;")}}, nil
		},
	}
	tools, _ := agentloop.NewToolSet(readFile)
	prompt := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
		Content: []*agentdv1.ContentBlock{faux.Text("What is the default port?")}}}}

	msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{prompt},
		agentloop.State{Tools: tools},
		agentloop.Config{Model: faux.DefaultModel(), Stream: model.Stream},
		func(_ context.Context, ev *agentdv1.AgentEvent) error {
			if end := ev.GetAgentEnd(); end != nil {
				fmt.Println("outcome:", end.Outcome)
			}
			return nil
		})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(msgs), "messages; answer:", msgs[len(msgs)-1].GetAssistant().Content[0].GetText().GetText())
	// Output:
	// outcome: RUN_OUTCOME_COMPLETED
	// 4 messages; answer: The default port is 3000.
}
