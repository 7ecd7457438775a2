package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/agentd/agentd/internal/replicapb"
)

// TestReflectionHidesReplicaWire checks that the replica-to-replica
// messages, compiled into the binary, are no part of what reflection
// offers, under their old public name or their internal one, while a
// public message beside them still resolves.
func TestReflectionHidesReplicaWire(t *testing.T) {
	conn, _ := startServer(t, newService(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	internal := (&replicapb.ReplicaControl{}).ProtoReflect().Descriptor()
	cases := []struct {
		name  string
		req   *reflectionpb.ServerReflectionRequest
		found bool
	}{
		{"public symbol", &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "agentd.v1.PromptRequest"}}, true},
		{"internal symbol", &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: string(internal.FullName())}}, false},
		{"old public name", &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "agentd.v1.ReplicaControl"}}, false},
		{"internal file", &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{FileByFilename: internal.ParentFile().Path()}}, false},
		{"old file", &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{FileByFilename: "agentd/v1/replica.proto"}}, false},
	}
	for _, c := range cases {
		if err := stream.Send(c.req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got := len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) > 0
		if got != c.found {
			t.Errorf("%s: reflection found it = %v, want %v (error %v)", c.name, got, c.found, resp.GetErrorResponse())
		}
	}
}

// TestContractLeavesOutInternalPackages checks that the descriptor set
// shipped for reflection and for other languages' code generation holds
// none of agentd's internal packages.
func TestContractLeavesOutInternalPackages(t *testing.T) {
	for _, f := range readContract(t).GetFile() {
		if strings.HasPrefix(f.GetPackage(), "agentd.") && f.GetPackage() != publicPackage {
			t.Errorf("the contract ships %s (package %s)", f.GetName(), f.GetPackage())
		}
	}
}
