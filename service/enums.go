package service

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// checkEnums refuses an enum value outside its declared set anywhere in a
// request, naming the field: protobuf keeps unknown numbers of an open
// enum, and a stored session or message must not carry one that no
// reader knows.
func checkEnums(m protoreflect.Message, path string) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		if path != "" {
			name = path + "." + name
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = checkEnumValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", name, i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				err = checkEnumValue(fd.MapValue(), mv, fmt.Sprintf("%s[%q]", name, k.String()))
				return err == nil
			})
		default:
			err = checkEnumValue(fd, v, name)
		}
		return err == nil
	})
	return err
}

func checkEnumValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, name string) error {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		values := fd.Enum().Values()
		if values.ByNumber(v.Enum()) != nil {
			return nil
		}
		names := make([]string, values.Len())
		for i := range values.Len() {
			names[i] = string(values.Get(i).Name())
		}
		return invalid(name, "%d is not a value of %s; use one of %s", v.Enum(), fd.Enum().FullName(), strings.Join(names, ", "))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkEnums(v.Message(), name)
	}
	return nil
}

// enumCheckUnary checks the enums of every unary request before its
// handler runs.
func enumCheckUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok {
		if err := checkEnums(m.ProtoReflect(), ""); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

// enumCheckStream checks the enums of every message a streaming call
// receives.
func enumCheckStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, enumCheckedStream{ss})
}

type enumCheckedStream struct{ grpc.ServerStream }

// RecvMsg receives a request message and checks its enums.
func (s enumCheckedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok {
		return checkEnums(pm.ProtoReflect(), "")
	}
	return nil
}
