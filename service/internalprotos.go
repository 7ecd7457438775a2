package service

import (
	"strings"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// internalPackage prefixes the proto packages that are agentd's own wire
// formats between replicas (proto/agentd/internal), compiled into the binary
// but no part of the API: reflection must not offer them to clients, who
// would otherwise build on messages that change in any release.
const internalPackage = "agentd.internal."

// internalPath is where the files of internalPackage live in the proto tree.
const internalPath = "agentd/internal/"

// withoutInternal resolves descriptors as its resolver does, except those
// of agentd's internal packages, which it reports as not found.
type withoutInternal struct{ protodesc.Resolver }

// FindFileByPath implements protodesc.Resolver.
func (w withoutInternal) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if strings.HasPrefix(path, internalPath) {
		return nil, protoregistry.NotFound
	}
	return w.Resolver.FindFileByPath(path)
}

// FindDescriptorByName implements protodesc.Resolver.
func (w withoutInternal) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if strings.HasPrefix(string(name), internalPackage) {
		return nil, protoregistry.NotFound
	}
	return w.Resolver.FindDescriptorByName(name)
}
