package tools_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools"
)

// A workspace lends its tools to a loop; each call is confined to the
// workspace's directory. Here write_file creates a file and read_file
// returns it with line numbers; a path outside the workspace is refused as
// an error result the model can read.
func Example() {
	dir, err := os.MkdirTemp("", "workspace")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ws, err := tools.New(dir, tools.Options{})
	if err != nil {
		panic(err)
	}
	defer ws.Close()

	call := func(name string, args map[string]any) {
		tool, _ := ws.Tool(name)
		s, _ := structpb.NewStruct(args)
		res, err := tool.Execute(context.Background(), agentloop.Call{ID: "call-1", Args: s, Update: func([]*agentdv1.ContentBlock, *structpb.Value) {}})
		if err != nil {
			fmt.Printf("%s failed: %s\n", name, strings.ReplaceAll(err.Error(), dir, "<workspace>"))
			return
		}
		fmt.Printf("%s: %q\n", name, res.Content[0].GetText().GetText())
	}
	call(tools.WriteFile, map[string]any{"path": "notes/todo.txt", "content": "ship it\n"})
	call(tools.ReadFile, map[string]any{"path": "notes/todo.txt"})
	call(tools.ReadFile, map[string]any{"path": filepath.Join("..", "..", "etc", "passwd")})
	// Output:
	// write_file: "Successfully wrote 8 bytes to notes/todo.txt"
	// read_file: "     1\tship it"
	// read_file failed: Path ../../etc/passwd is outside the workspace <workspace>
}
