package agentloop

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

func cacheTool(t *testing.T, name, schema string) Tool {
	t.Helper()
	params := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(schema), params); err != nil {
		t.Fatal(err)
	}
	return FuncTool{Def: &agentdv1.Tool{Name: name, Parameters: params},
		Fn: func(context.Context, Call) (Result, error) { return Result{}, nil }}
}

// A schema cache compiles a schema once for every tool set that has it
// (whatever the tool's name or place), never keeps one that fails, stays
// within its size, and serves runs at once.
func TestSchemaCacheCompilesEachSchemaOnce(t *testing.T) {
	const count = `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`
	c := NewSchemaCache(2)
	first, err := c.NewToolSet(cacheTool(t, "a", count), cacheTool(t, "b", `{"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.NewToolSet(cacheTool(t, "other", `{"type":"object"}`), cacheTool(t, "again", count))
	if err != nil {
		t.Fatal(err)
	}
	if first.lookup("a").schema != second.lookup("again").schema || first.lookup("b").schema != second.lookup("other").schema {
		t.Fatal("the same schemas were compiled again for the second tool set")
	}
	if first.lookup("a").schema == first.lookup("b").schema {
		t.Fatal("two different schemas share a compiled one")
	}
	uncached, err := NewToolSet(cacheTool(t, "a", count))
	if err != nil || uncached.lookup("a").schema == first.lookup("a").schema {
		t.Fatalf("NewToolSet without a cache reused a compiled schema (err %v)", err)
	}

	// No parameters ({"type":"object"}) and empty ones ({}) are two schemas.
	bare := FuncTool{Def: &agentdv1.Tool{Name: "bare"}, Fn: func(context.Context, Call) (Result, error) { return Result{}, nil }}
	mixed, err := c.NewToolSet(bare, cacheTool(t, "empty", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if mixed.lookup("bare").schema == mixed.lookup("empty").schema {
		t.Fatal("a tool without parameters shares the compiled schema of one with an empty schema")
	}

	for range 2 {
		_, err := c.NewToolSet(cacheTool(t, "ok", count), cacheTool(t, "broken", `{"type":"nonsense"}`))
		if err == nil || !strings.Contains(err.Error(), `"broken"`) {
			t.Fatalf("a schema that does not compile: %v, want an error naming the tool", err)
		}
	}
	for i := range 3 {
		if _, err := c.NewToolSet(cacheTool(t, "t", fmt.Sprintf(`{"type":"object","maxProperties":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.schemas); n > 2 {
		t.Fatalf("the cache holds %d schemas; its size is 2", n)
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			set, err := c.NewToolSet(cacheTool(t, "a", count))
			if err != nil {
				t.Error(err)
				return
			}
			args, _ := structpb.NewStruct(map[string]any{"n": "7"})
			out, err := set.ValidateArguments("a", args)
			if err != nil || out.GetFields()["n"].GetNumberValue() != 7 {
				t.Errorf("validating through a shared schema: %v, %v", out, err)
			}
			if _, err := set.ValidateArguments("a", &structpb.Struct{}); err == nil {
				t.Error("a shared schema accepted arguments without n")
			}
		})
	}
	wg.Wait()
}
