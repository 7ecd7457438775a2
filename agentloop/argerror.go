package agentloop

import "strings"

// ArgumentsError is the refusal of arguments that fail a tool's schema.
// Its text is the error result the model gets; Problems name the failing
// fields for callers that refuse an edit over the wire.
type ArgumentsError struct {
	// Tool is the tool's name.
	Tool string
	// Problems are the failing fields, in the order of the text.
	Problems []ArgumentProblem
	text     string
}

// ArgumentProblem is one failing field of an ArgumentsError.
type ArgumentProblem struct {
	// Path is the field's path in the arguments, dot-separated ("path",
	// "edits.0.old_text"); empty for the arguments as a whole.
	Path string
	// Message says what is wrong, such as "must be string".
	Message string
}

// Error returns the text the model sees.
func (e *ArgumentsError) Error() string { return e.text }

// problemsOf reads the "  - <path>: <message>" lines validateArguments
// writes back into their parts ("root" is the whole).
func problemsOf(lines []string) []ArgumentProblem {
	out := make([]ArgumentProblem, 0, len(lines))
	for _, l := range lines {
		l = strings.TrimPrefix(l, "  - ")
		path, msg, ok := strings.Cut(l, ": ")
		if !ok {
			path, msg = "", l
		}
		if path == "root" {
			path = ""
		}
		out = append(out, ArgumentProblem{Path: path, Message: msg})
	}
	return out
}
