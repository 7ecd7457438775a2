// Package tools holds agentd's built-in tools: read_file, write_file,
// edit_file, ls, find, grep and bash. They port the behaviour and wording of
// pi-coding-agent's tools (read, write, edit, ls, find, grep, bash) with two
// differences on purpose: argument names are snake_case (old_text, not
// oldText) like the rest of agentd's API, and every tool is confined to one
// workspace directory.
//
// Confinement. A Workspace holds an os.Root opened on its directory, and every
// file operation goes through it, so the kernel-level checks of os.Root refuse
// `..` escapes and symbolic links that resolve outside the root even when the
// tree changes between a check and its use. Before that, each path is checked
// explicitly so the model gets a clear error that names the path: a relative
// path that climbs out with `..`, an absolute path outside the root, a
// symbolic link that resolves outside, and device files, named pipes and
// sockets are all refused before anything is opened for writing.
//
// The bash tool runs its command with the workspace as working directory, in
// a process group of its own; a timeout, a cancelled context or the end of
// the command kills the whole group, so no background process outlives the
// call.
//
// Results follow the split agentd makes between model and user interface:
// Content is short text for the model (with a note when output was cut), and
// Details carries structured data for UIs (file lists, matches, a unified
// diff, an exit code).
package tools
