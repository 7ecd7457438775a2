package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"syscall"

	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// errAborted is what a file tool returns when its call was aborted before
// it changed anything.
var errAborted = errors.New("Operation aborted")

// The loop validates arguments against the schema before Execute, so these
// helpers only guard direct callers; their errors name the field.

func stringArg(args *structpb.Struct, name string, required bool) (string, error) {
	v, ok := args.GetFields()[name]
	if !ok || isNull(v) {
		if required {
			return "", fmt.Errorf("missing required argument %q", name)
		}
		return "", nil
	}
	s, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		return "", fmt.Errorf("argument %q must be a string", name)
	}
	return s.StringValue, nil
}

func boolArg(args *structpb.Struct, name string) (bool, error) {
	v, ok := args.GetFields()[name]
	if !ok || isNull(v) {
		return false, nil
	}
	b, ok := v.GetKind().(*structpb.Value_BoolValue)
	if !ok {
		return false, fmt.Errorf("argument %q must be a boolean", name)
	}
	return b.BoolValue, nil
}

// numberArg returns the number and whether it was given.
func numberArg(args *structpb.Struct, name string) (float64, bool, error) {
	v, ok := args.GetFields()[name]
	if !ok || isNull(v) {
		return 0, false, nil
	}
	n, ok := v.GetKind().(*structpb.Value_NumberValue)
	if !ok || math.IsNaN(n.NumberValue) || math.IsInf(n.NumberValue, 0) {
		return 0, false, fmt.Errorf("argument %q must be a number", name)
	}
	return n.NumberValue, true, nil
}

// intArg returns a whole number of at least min, or def when absent.
func intArg(args *structpb.Struct, name string, def, min int) (int, bool, error) {
	f, ok, err := numberArg(args, name)
	if err != nil || !ok {
		return def, false, err
	}
	if f != math.Trunc(f) || f > math.MaxInt32 || f < math.MinInt32 {
		return 0, false, fmt.Errorf("argument %q must be a whole number", name)
	}
	if int(f) < min {
		return 0, false, fmt.Errorf("argument %q must be at least %d", name, min)
	}
	return int(f), true, nil
}

func isNull(v *structpb.Value) bool {
	_, null := v.GetKind().(*structpb.Value_NullValue)
	return v == nil || null
}

func text(s string) []*agentdv1.ContentBlock {
	return []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}}
}

// details converts a map of plain Go values (strings, bools, ints, slices,
// nested maps) to a Value. The inputs are built by this package, so a
// failure is a programming error and is reported as one.
func details(m map[string]any) (*structpb.Value, error) {
	v, err := structpb.NewValue(normalize(m))
	if err != nil {
		return nil, fmt.Errorf("tools: build details: %w", err)
	}
	return v, nil
}

// normalize turns the ints and typed slices used here into the types
// structpb.NewValue accepts.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalize(e)
		}
		return out
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	default:
		return v
	}
}

// openRegular opens a file of the workspace and refuses anything but a
// regular file. O_NONBLOCK keeps a named pipe swapped in after the checks
// from blocking the open; the type is checked on the open descriptor, so
// nothing is read or written before it is known to be a regular file.
func (w *Workspace) openRegular(t target, flag int) (*os.File, fs.FileInfo, error) {
	f, err := w.root.OpenFile(t.rel, flag|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0o644)
	if err != nil {
		if notFound(err) {
			return nil, nil, fmt.Errorf("File not found: %s", t.shown)
		}
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(pe.Err, syscall.EISDIR) {
			return nil, nil, fmt.Errorf("Path %s is a directory, not a file", t.shown)
		}
		if errors.As(err, &pe) && errors.Is(pe.Err, syscall.ENXIO) {
			return nil, nil, fmt.Errorf("Path %s is %s, not a regular file", t.shown, "a named pipe")
		}
		return nil, nil, w.rootErr(t.shown, fmt.Errorf("Cannot open %s: %w", t.shown, err))
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("Cannot stat %s: %w", t.shown, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegular(t.shown, fi.Mode())
	}
	return f, fi, nil
}

// checkSpecial refuses a path that already exists as something other than a
// regular file or directory, before any tool opens it.
func (w *Workspace) checkSpecial(t target) error {
	fi, err := w.root.Lstat(t.rel)
	if err != nil {
		return nil
	}
	if fi.Mode().IsRegular() || fi.IsDir() {
		return nil
	}
	return notRegular(t.shown, fi.Mode())
}

// notFound is true for a missing path, also when a component of it is a
// file rather than a directory.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
