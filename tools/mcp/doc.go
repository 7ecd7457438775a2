// Package mcp offers the tools of Model Context Protocol servers to agentd's
// sessions, through the official Go SDK.
//
// The operator names the servers in a file (--mcp-config) of the common
// "mcpServers" shape: a stdio server is a command that agentd starts, a
// streamable HTTP server is a URL. A session enables servers by name; it can
// never start a command of its own. Each server has one connection in a
// [Manager], shared by every session that enables it: a stdio server starts
// on first use, in a process group of its own, stops after being idle and at
// Close, and is killed with its whole group. A server that crashes, hangs
// past its timeout or cannot be reached turns the call into an error result
// for the model with a text that says what happened, and is connected again
// for the next call after a back-off that grows with each failure in a row.
//
// Tools appear to the model as "mcp__<server>__<tool>" (see [ModelName]); a
// call's text and image content goes to the model, its structuredContent and
// resource links to the result's details, its isError flag is kept, and the
// server's progress notifications become tool_execution_update events.
package mcp
