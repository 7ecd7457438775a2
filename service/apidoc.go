package service

import (
	_ "embed"
	"fmt"
	"log/slog"
	"sync"

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

// lazyFiles is the resolver reflection serves from: documentedFiles,
// built at the first reflection call rather than at start-up (decoding
// and linking the documented descriptors takes tens of milliseconds that
// no other call needs). Should they not decode, reflection serves the
// compiled-in descriptors, without comments, and says so in the log once.
type lazyFiles struct {
	load func() protodesc.Resolver
}

// newLazyFiles returns a lazyFiles that logs a failure to logger.
func newLazyFiles(logger *slog.Logger) lazyFiles {
	return lazyFiles{load: sync.OnceValue(func() protodesc.Resolver {
		files, err := documentedFiles()
		if err != nil {
			logger.Warn("reflection serves descriptors without comments", "err", err)
			return withoutInternal{protoregistry.GlobalFiles}
		}
		return files
	})}
}

// FindFileByPath implements protodesc.Resolver.
func (l lazyFiles) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	return l.load().FindFileByPath(path)
}

// FindDescriptorByName implements protodesc.Resolver.
func (l lazyFiles) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	return l.load().FindDescriptorByName(name)
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
