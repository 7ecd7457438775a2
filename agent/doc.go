// Package agent runs the agent loop (package agentloop) for the sessions of
// a transcript store (package persistence): the Go counterpart of pi's
// Agent class beside its agent loop, for many sessions at once.
//
// An Agent owns the runs: Start begins one (Prompt or Continue) with one
// active run per session, Steer and FollowUp queue messages into it, Abort
// ends it, and SubmitToolResult and ResolveApproval answer the waits for
// client-executed tools and approvals. Its sink commits each message at
// message_end before the event is published, and logs every event of a
// run: in memory while the run streams, and in the store in batches, so
// Follow (Attach) can replay a run after it ended, after a restart, or from
// another process. Failed model calls are retried and recorded, and at
// start-up the runs a stopped agentd left active are closed and their logs
// ended.
//
// Before every model call a run shapes what the model sees (docs/ARCHITECTURE.md §4):
// the transcript path as the latest compaction left it (package
// contextview), the session's context policy (package contextpolicy), the
// client's context hook (SubmitContext), the context blocks. It compacts
// (package compaction) when the estimate passes the model's window minus
// the reserve, and once when the provider answers that the context
// overflowed; Compact does it on request, and UpdateSession changes a
// session between runs, writing model and thinking changes as entries.
//
// The package knows nothing of gRPC or of a database driver: it works on
// persistence.Store, agentloop and provider, and reports refusals as *Error
// (with a kind such as ErrBusy) and *FieldError, which the gRPC layer maps
// onto status codes.
package agent
