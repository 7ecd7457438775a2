package agentloop_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
)

// A schema compiles with references within itself, never with one that
// would make agentd load a file or a URL; Validate coerces as tool
// arguments are coerced and names the failing fields.
func TestCompileSchema(t *testing.T) {
	mk := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	internal := mk(map[string]any{"type": "object", "$defs": map[string]any{"tag": map[string]any{"type": "string"}},
		"properties": map[string]any{"n": map[string]any{"type": "integer"}, "tag": map[string]any{"$ref": "#/$defs/tag"}}, "required": []any{"n"}})
	s, err := agentloop.CompileSchema(internal)
	if err != nil {
		t.Fatalf("an internal $ref: %v", err)
	}
	out, problems := s.Validate(mk(map[string]any{"n": "7", "tag": "x"}))
	if problems != nil || out.GetFields()["n"].GetNumberValue() != 7 {
		t.Fatalf("coerced %v, problems %v", out, problems)
	}
	if _, problems := s.Validate(mk(map[string]any{"m": 1})); len(problems) != 1 || problems[0].Path != "n" || !strings.Contains(problems[0].Message, "required") {
		t.Fatalf("problems %+v, want n missing", problems)
	}
	if _, problems := s.Validate(mk(map[string]any{"n": 1, "tag": []any{}})); len(problems) != 1 || problems[0].Path != "tag" {
		t.Fatalf("problems %+v, want tag through its $ref", problems)
	}
	for _, ref := range []string{"file:///etc/passwd", "file:///dev/zero", "https://example.com/schema.json"} {
		if _, err := agentloop.CompileSchema(mk(map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"$ref": ref}}})); err == nil ||
			!strings.Contains(err.Error(), "outside the schema") {
			t.Errorf("$ref %q: %v, want a refusal", ref, err)
		}
	}
}
