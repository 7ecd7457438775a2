package service

import (
	_ "embed"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// apiDescriptors is the contract as `buf build` writes it at `make
// generate`, with the proto's comments (generated Go code drops them), so
// reflection clients such as grpcurl show the API documentation.
//
//go:embed apidoc/agentd.binpb
var apiDescriptors []byte

// documentedFiles resolves descriptors from apiDescriptors first, then
// from the descriptors compiled into the binary (the health and
// reflection services), never those of agentd's internal packages.
func documentedFiles() (protodesc.Resolver, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(apiDescriptors, &set); err != nil {
		return nil, fmt.Errorf("decode the embedded API descriptors: %w", err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, err
	}
	return layeredFiles{files, withoutInternal{protoregistry.GlobalFiles}}, nil
}

// layeredFiles looks a descriptor up in each of its resolvers in turn.
type layeredFiles []protodesc.Resolver

// FindFileByPath implements protodesc.Resolver.
func (l layeredFiles) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	for _, r := range l[:len(l)-1] {
		if fd, err := r.FindFileByPath(path); err == nil {
			return fd, nil
		}
	}
	return l[len(l)-1].FindFileByPath(path)
}

// FindDescriptorByName implements protodesc.Resolver.
func (l layeredFiles) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	for _, r := range l[:len(l)-1] {
		if d, err := r.FindDescriptorByName(name); err == nil {
			return d, nil
		}
	}
	return l[len(l)-1].FindDescriptorByName(name)
}
