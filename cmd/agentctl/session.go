package main

import (
	"fmt"
	"strings"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// newSessionConfig is the configuration of a session agentctl creates
// (sessions create, chat): the model given as provider/id, or else the
// faux model echoing each prompt, so that a session made without flags
// answers (an unscripted faux model fails every call).
func newSessionConfig(model string, echo bool) (*agentdv1.SessionConfig, error) {
	cfg := &agentdv1.SessionConfig{}
	if echo || model == "" {
		cfg.Faux = &agentdv1.FauxScript{Echo: true}
	}
	if model != "" {
		provider, id, ok := strings.Cut(model, "/")
		if !ok || provider == "" || id == "" {
			return nil, fmt.Errorf("--model %q: write provider/id, such as anthropic/claude-sonnet-4-5", model)
		}
		cfg.Model = &agentdv1.ModelRef{Provider: provider, Id: id}
	}
	return cfg, nil
}
