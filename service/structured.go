package service

import (
	"context"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
)

// checkOutputRequest checks the output_schema and max_output_retries of
// a Prompt or Continue before a run starts, so a schema that cannot work
// is refused with the request (INVALID_ARGUMENT naming the field) rather
// than failing the run. The session's defaults are checked with its
// configuration.
func (s *Service) checkOutputRequest(schema *structpb.Struct, retries *uint32) error {
	if err := agent.CheckOutputSchema("output_schema", schema); err != nil {
		return s.status(context.Background(), "check output_schema", err)
	}
	return s.status(context.Background(), "check max_output_retries", agent.CheckMaxOutputRetries("max_output_retries", retries))
}
