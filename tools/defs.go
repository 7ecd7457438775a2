package tools

import (
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Names of the built-in tools.
const (
	ReadFile  = "read_file"
	WriteFile = "write_file"
	EditFile  = "edit_file"
	Ls        = "ls"
	Find      = "find"
	Grep      = "grep"
	Bash      = "bash"
)

// Names lists the built-in tools in a stable order.
func Names() []string {
	return []string{ReadFile, WriteFile, EditFile, Ls, Find, Grep, Bash}
}

// IsBuiltin reports whether name is a built-in tool, so the service can
// refuse an unknown server tool at CreateSession.
func IsBuiltin(name string) bool {
	for _, n := range Names() {
		if n == name {
			return true
		}
	}
	return false
}

// ReadOnly reports whether a built-in tool only reads the workspace. The
// approval gate allows read-only tools by default and asks for the others;
// unknown names are not read-only.
func ReadOnly(name string) bool {
	switch name {
	case ReadFile, Ls, Find, Grep:
		return true
	}
	return false
}

// Definitions returns the declarations of every built-in tool with the
// default limits, without a workspace, so a session config can be validated
// and tool schemas shown before any workspace exists. Each call returns new
// messages the caller may modify.
func Definitions() []*agentdv1.Tool {
	o, _ := Options{}.withDefaults()
	defs := make([]*agentdv1.Tool, 0, len(Names()))
	for _, n := range Names() {
		defs = append(defs, definition(n, o))
	}
	return defs
}

// Definition returns one built-in declaration with the default limits.
func Definition(name string) (*agentdv1.Tool, bool) {
	if !IsBuiltin(name) {
		return nil, false
	}
	o, _ := Options{}.withDefaults()
	return definition(name, o), true
}

func prop(typ, desc string, extra ...any) map[string]any {
	p := map[string]any{"type": typ, "description": desc}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i].(string)] = extra[i+1]
	}
	return p
}

func objectSchema(props map[string]any, required ...string) *structpb.Struct {
	req := make([]any, len(required))
	for i, r := range required {
		req[i] = r
	}
	s, err := structpb.NewStruct(map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             req,
		"additionalProperties": false,
	})
	if err != nil {
		// The schemas are literals of this file; a failure is a bug here.
		panic(fmt.Sprintf("tools: schema literal: %v", err))
	}
	return s
}

func definition(name string, o Options) *agentdv1.Tool {
	size := formatSize(o.MaxOutputBytes)
	d := &agentdv1.Tool{Name: name, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_SERVER}
	switch name {
	case ReadFile:
		d.Description = fmt.Sprintf("Read the contents of a file in the workspace. Supports text files and images (png, jpeg, gif, webp); images are sent as attachments. "+
			"Text lines are prefixed with their line number and a tab, which are not part of the file. "+
			"Output is truncated to %d lines or %s (whichever is hit first). Use offset/limit for large files. "+
			"When you need the full file, continue with offset until complete.", o.MaxOutputLines, size)
		d.Parameters = objectSchema(map[string]any{
			"path":   prop("string", "Path to the file to read (relative to the workspace, or absolute inside it)", "minLength", 1),
			"offset": prop("integer", "Line number to start reading from (1-indexed)", "minimum", 1),
			"limit":  prop("integer", "Maximum number of lines to read", "minimum", 1),
		}, "path")
	case WriteFile:
		d.Description = "Write content to a file in the workspace. Creates the file if it doesn't exist, overwrites if it does. Automatically creates parent directories."
		d.Parameters = objectSchema(map[string]any{
			"path":    prop("string", "Path to the file to write (relative to the workspace, or absolute inside it)", "minLength", 1),
			"content": prop("string", "Content to write to the file"),
		}, "path", "content")
	case EditFile:
		d.Description = "Edit a file in the workspace using exact text replacement. old_text must match exactly one region of the file, including all whitespace and newlines " +
			"(without the line-number prefixes read_file shows). Keep old_text as small as possible while still unique in the file; include more surrounding lines only to make it unique."
		d.Parameters = objectSchema(map[string]any{
			"path":     prop("string", "Path to the file to edit (relative to the workspace, or absolute inside it)", "minLength", 1),
			"old_text": prop("string", "Exact text to replace; it must occur exactly once in the file", "minLength", 1),
			"new_text": prop("string", "Replacement text"),
		}, "path", "old_text", "new_text")
	case Ls:
		d.Description = fmt.Sprintf("List directory contents in the workspace. Returns entries sorted alphabetically, with '/' suffix for directories. Includes dotfiles. "+
			"Output is truncated to %d entries or %s (whichever is hit first).", DefaultLsLimit, size)
		d.Parameters = objectSchema(map[string]any{
			"path":  prop("string", "Directory to list (default: the workspace root)"),
			"limit": prop("integer", fmt.Sprintf("Maximum number of entries to return (default: %d)", DefaultLsLimit), "minimum", 1),
		})
	case Find:
		d.Description = fmt.Sprintf("Search for files by glob pattern in the workspace. Returns matching paths relative to the search directory, with '/' suffix for directories. "+
			"A pattern without '/' matches names at any depth; '**' matches any number of directories; {a,b} gives alternatives. "+
			"Includes hidden files; skips .git directories. Output is truncated to %d results or %s (whichever is hit first).", DefaultFindLimit, size)
		d.Parameters = objectSchema(map[string]any{
			"pattern": prop("string", "Glob pattern to match files, e.g. '*.go', '**/*.json', or 'src/**/*_test.go'", "minLength", 1),
			"path":    prop("string", "Directory to search in (default: the workspace root)"),
			"limit":   prop("integer", fmt.Sprintf("Maximum number of results (default: %d)", DefaultFindLimit), "minimum", 1),
		}, "pattern")
	case Grep:
		d.Description = fmt.Sprintf("Search file contents in the workspace for a pattern. Returns matching lines with file paths and line numbers. "+
			"The pattern is a regular expression in RE2 syntax (no backreferences or lookaround) unless literal is true. "+
			"Includes hidden files; skips .git directories and binary files. Output is truncated to %d matches or %s (whichever is hit first). "+
			"Long lines are truncated to %d chars.", DefaultGrepLimit, size, GrepMaxLineChars)
		d.Parameters = objectSchema(map[string]any{
			"pattern":     prop("string", "Search pattern (regex or literal string)", "minLength", 1),
			"path":        prop("string", "Directory or file to search (default: the workspace root)"),
			"glob":        prop("string", "Filter files by glob pattern, e.g. '*.go' or '**/*_test.go'"),
			"ignore_case": prop("boolean", "Case-insensitive search (default: false)"),
			"literal":     prop("boolean", "Treat pattern as literal string instead of regex (default: false)"),
			"context":     prop("integer", "Number of lines to show before and after each match (default: 0)", "minimum", 0),
			"limit":       prop("integer", fmt.Sprintf("Maximum number of matches to return (default: %d)", DefaultGrepLimit), "minimum", 1),
		}, "pattern")
	case Bash:
		d.Description = fmt.Sprintf("Execute a bash command with the workspace as the current working directory. Returns stdout and stderr combined. "+
			"Output is truncated to the last %d lines or %s (whichever is hit first). "+
			"The timeout defaults to %s; at most %s may be given. Background processes are killed when the command finishes.",
			o.MaxOutputLines, size, seconds(o.BashTimeout.Seconds()), seconds(o.MaxBashTimeout.Seconds()))
		d.Parameters = objectSchema(map[string]any{
			"command": prop("string", "Bash command to execute", "minLength", 1),
			"timeout": prop("number", fmt.Sprintf("Timeout in seconds (default: %g, at most %g)", o.BashTimeout.Seconds(), o.MaxBashTimeout.Seconds()), "exclusiveMinimum", 0),
		}, "command")
	}
	return d
}

// seconds prints a duration in seconds without a trailing .0.
func seconds(s float64) string {
	return fmt.Sprintf("%g seconds", s)
}
