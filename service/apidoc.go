package service

import (
	_ "embed"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// apiDescriptors is the contract as `buf build` writes it at `make
// generate`, with the proto's comments (generated Go code drops them), so
// reflection clients such as grpcurl show the API documentation.
//
//go:embed apidoc/agentd.binpb
var apiDescriptors []byte

// documentedFiles returns the descriptors of apiDescriptors.
func documentedFiles() (*protoregistry.Files, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(apiDescriptors, &set); err != nil {
		return nil, fmt.Errorf("decode the embedded API descriptors: %w", err)
	}
	return protodesc.NewFiles(&set)
}
