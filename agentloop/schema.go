package agentloop

import (
	"errors"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
)

// Schema is a compiled JSON Schema (draft 2020-12) for a JSON object,
// validated exactly as tool arguments are (the same compiler, the same
// coercion, the same problem texts), for values that are not tool calls:
// a run's structured answer. It is read-only once compiled, so concurrent
// runs may share it.
type Schema struct{ as *argSchema }

// CompileSchema compiles s (nil means any object) or says why it does not
// compile.
func CompileSchema(s *structpb.Struct) (*Schema, error) {
	as, err := compileArgSchema(0, s)
	if err != nil {
		return nil, err
	}
	return &Schema{as: as}, nil
}

// Validate returns the coerced copy of v when it is valid, otherwise the
// failing fields (sorted by path, as a tool's validation error lists them).
func (s *Schema) Validate(v *structpb.Struct) (*structpb.Struct, []ArgumentProblem) {
	out, err := s.as.validateArguments("", v)
	if err == nil {
		return out, nil
	}
	var ae *ArgumentsError
	if errors.As(err, &ae) {
		return nil, ae.Problems
	}
	// validateArguments' other failures are a heading and one problem
	// line.
	_, lines, _ := strings.Cut(err.Error(), "\n")
	return nil, problemsOf(strings.Split(lines, "\n"))
}
