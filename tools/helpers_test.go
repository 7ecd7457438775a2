package tools

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a workspace in a temporary directory next to an "outside"
// directory that no tool may touch.
type fixture struct {
	ws      *Workspace
	root    string
	outside string
	set     *agentloop.ToolSet
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "ws")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(outside, "secret.txt"), "top secret\n")
	ws, err := New(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	set, err := agentloop.NewToolSet(ws.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ws: ws, root: root, outside: outside, set: set}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) write(t *testing.T, rel, content string) {
	t.Helper()
	writeFile(t, filepath.Join(f.root, rel), content)
}

func (f *fixture) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// call validates args against the tool's schema, as the loop does, and runs
// the tool.
func (f *fixture) call(t *testing.T, name string, args map[string]any) (agentloop.Result, error) {
	t.Helper()
	return f.callCtx(t, context.Background(), name, args, nil)
}

func (f *fixture) callCtx(t *testing.T, ctx context.Context, name string, args map[string]any, onUpdate agentloop.UpdateFunc) (agentloop.Result, error) {
	t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	valid, err := f.set.ValidateArguments(name, s)
	if err != nil {
		t.Fatalf("%s: arguments rejected by schema: %v", name, err)
	}
	tool, ok := f.ws.Tool(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	if onUpdate == nil {
		onUpdate = func([]*agentdv1.ContentBlock, *structpb.Value) {}
	}
	return tool.Execute(ctx, agentloop.Call{ID: "call-1", Args: valid, Update: onUpdate})
}

// direct runs a tool without schema validation, for the defensive checks
// the schema normally makes unreachable.
func (f *fixture) direct(t *testing.T, name string, args map[string]any) (agentloop.Result, error) {
	t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := f.ws.Tool(name)
	return tool.Execute(context.Background(), agentloop.Call{ID: "call-1", Args: s, Update: func([]*agentdv1.ContentBlock, *structpb.Value) {}})
}

// ok runs a tool that must succeed.
func (f *fixture) ok(t *testing.T, name string, args map[string]any) agentloop.Result {
	t.Helper()
	res, err := f.call(t, name, args)
	if err != nil {
		t.Fatalf("%s %v: unexpected error: %v", name, args, err)
	}
	return res
}

func textOf(t *testing.T, res agentloop.Result) string {
	t.Helper()
	var parts []string
	for _, b := range res.Content {
		if tx := b.GetText(); tx != nil {
			parts = append(parts, tx.GetText())
		}
	}
	return strings.Join(parts, "\n")
}

func detailsOf(t *testing.T, res agentloop.Result) map[string]any {
	t.Helper()
	if res.Details == nil {
		t.Fatal("no details")
	}
	m, ok := res.Details.AsInterface().(map[string]any)
	if !ok {
		t.Fatalf("details are %T, not an object", res.Details.AsInterface())
	}
	return m
}

// waitGone waits until pid has exited (gone or a zombie). A killed process
// dies asynchronously, so this polls /proc with a deadline.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		// The state follows the ")" that ends the command name.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			switch s[i+2] {
			case 'Z', 'X':
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running: %s", pid, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
