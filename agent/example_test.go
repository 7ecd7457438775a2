package agent_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
	"github.com/agentd/agentd/provider/faux"
)

// An agent over the in-memory store runs a prompt against the scripted
// faux model: the run's events are followed to agent_end, and the
// transcript holds the prompt and the answer, stored before their
// message_end was sent.
func Example() {
	ctx := context.Background()
	store := memory.New()
	a, err := agent.New(ctx, store, agent.Options{})
	if err != nil {
		panic(err)
	}
	defer a.Close(ctx)

	// The faux model answers from the session's script.
	cfg := &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
		faux.Message(faux.Text("The default port is 8080.")),
	}}}
	s, err := store.CreateSession(ctx, persistence.CreateSessionParams{Config: cfg})
	if err != nil {
		panic(err)
	}
	prompt := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
		Content: []*agentdv1.ContentBlock{faux.Text("Which port does the server use?")},
	}}}
	runID, err := a.Start(ctx, agent.StartRequest{SessionID: s.ID, Prompt: prompt})
	if err != nil {
		panic(err)
	}

	var kinds []string
	err = a.Follow(ctx, s.ID, runID, 0, agent.FollowOptions{}, func(e agent.Event) error {
		ev, err := e.Decode()
		if err != nil {
			return err
		}
		m := ev.ProtoReflect()
		kind := string(m.WhichOneof(m.Descriptor().Oneofs().ByName("event")).Name())
		if kind != "message_update" {
			kinds = append(kinds, kind)
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.Join(kinds, " "))

	path, err := store.Path(ctx, s.ID)
	if err != nil {
		panic(err)
	}
	for _, e := range path {
		switch m := e.GetMessage(); {
		case m.GetUser() != nil:
			fmt.Println("user:", m.GetUser().GetContent()[0].GetText().GetText())
		case m.GetAssistant() != nil:
			fmt.Println("assistant:", m.GetAssistant().GetContent()[0].GetText().GetText())
		}
	}
	// Output:
	// agent_start turn_start message_start message_end message_start message_end turn_end agent_end
	// user: Which port does the server use?
	// assistant: The default port is 8080.
}
