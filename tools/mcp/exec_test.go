package mcp_test

import (
	"context"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
)

// execute runs a loop tool as the loop would, with args as its arguments.
func execute(tl agentloop.Tool, ctx context.Context, args map[string]any, update agentloop.UpdateFunc) (agentloop.Result, error) {
	st, err := structpb.NewStruct(args)
	if err != nil {
		return agentloop.Result{}, err
	}
	return tl.Execute(ctx, agentloop.Call{ID: "call-1", Args: st, Update: update})
}
