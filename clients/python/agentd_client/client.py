"""AgentdClient: the thin layer an app needs over the generated stubs.

Besides prompts and streams it answers what a run waits for: client tools,
approvals (with a scope, a rule and edited arguments), lifecycle hooks
(see agentd_client.hooks) and calls left in doubt.

Everything not wrapped here is on ``client.rpc``, the generated
``AgentServiceStub`` over a ``grpc.aio`` channel.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, AsyncIterator, Dict, Iterable, Mapping, Optional, Sequence, Union

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory, struct_pb2

from agentd.v1 import agent_messages_pb2, content_pb2, events_pb2, service_pb2, service_pb2_grpc, session_pb2
from agentd_client.hooks import KEEP, HookAnswer, HookHandler, handler_for

Content = Union[str, Sequence[content_pb2.ContentBlock]]

# Status codes after which a run can still be followed with Attach.
_RESUMABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
)


_SCOPES = {
    "call": agent_messages_pb2.APPROVAL_SCOPE_CALL,
    "run": agent_messages_pb2.APPROVAL_SCOPE_RUN,
    "session": agent_messages_pb2.APPROVAL_SCOPE_SESSION,
}

_IN_DOUBT = {
    "retry": service_pb2.IN_DOUBT_ACTION_RETRY,
    "skip": service_pb2.IN_DOUBT_ACTION_SKIP,
    "supply": service_pb2.IN_DOUBT_ACTION_SUPPLY,
}

#: Pass as ``rule`` to take the approval request's suggested_rule.
SUGGESTED = "suggested"


@dataclass(frozen=True)
class Approval:
    """What an ``approve`` handler of handle() may return instead of a tuple.

    scope is "call", "run" or "session"; rule limits a run or session scope
    to the calls matching it: an ``ApprovalRule`` (tool_name defaults to the
    call's tool), a dict of its fields, or SUGGESTED; arguments (with allow
    only) replaces the call's arguments, validated by agentd.
    """

    allow: bool
    reason: str = ""
    decided_by: str = ""
    scope: Optional[str] = None
    rule: Any = None
    arguments: Optional[dict] = None


def to_content(content: Content) -> list:
    """Text or content blocks, as the content blocks a request carries."""
    if isinstance(content, str):
        return [content_pb2.ContentBlock(text=content_pb2.TextContent(text=content))]
    return list(content)


def is_resumable(err: BaseException) -> bool:
    """True for the stream errors after which Attach can pick the run up."""
    return isinstance(err, grpc.aio.AioRpcError) and err.code() in _RESUMABLE


def _rpc_messages() -> tuple:
    """google.rpc.Status and google.rpc.ErrorInfo, built from their field
    numbers: Debian ships no Python package of the google.rpc types."""
    fdp = descriptor_pb2.FileDescriptorProto(name="agentd_client/google_rpc.proto", package="google.rpc", syntax="proto3",
                                             dependency=["google/protobuf/any.proto"])
    t = descriptor_pb2.FieldDescriptorProto
    status = fdp.message_type.add(name="Status")
    status.field.add(name="code", number=1, type=t.TYPE_INT32, label=t.LABEL_OPTIONAL)
    status.field.add(name="message", number=2, type=t.TYPE_STRING, label=t.LABEL_OPTIONAL)
    status.field.add(name="details", number=3, type=t.TYPE_MESSAGE, label=t.LABEL_REPEATED, type_name=".google.protobuf.Any")
    info = fdp.message_type.add(name="ErrorInfo")
    info.field.add(name="reason", number=1, type=t.TYPE_STRING, label=t.LABEL_OPTIONAL)
    info.field.add(name="domain", number=2, type=t.TYPE_STRING, label=t.LABEL_OPTIONAL)
    entry = info.nested_type.add(name="MetadataEntry", options=descriptor_pb2.MessageOptions(map_entry=True))
    entry.field.add(name="key", number=1, type=t.TYPE_STRING, label=t.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=t.TYPE_STRING, label=t.LABEL_OPTIONAL)
    info.field.add(name="metadata", number=3, type=t.TYPE_MESSAGE, label=t.LABEL_REPEATED,
                   type_name=".google.rpc.ErrorInfo.MetadataEntry")
    from google.protobuf import any_pb2  # noqa: F401 - registers google/protobuf/any.proto in the default pool
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    fd = pool.Add(fdp)
    # GetMessageClass is protobuf 4's; Debian's 3.x has the factory only.
    get = getattr(message_factory, "GetMessageClass", None) or message_factory.MessageFactory(pool).GetPrototype
    return get(fd.message_types_by_name["Status"]), get(fd.message_types_by_name["ErrorInfo"])


_Status, _ErrorInfo = _rpc_messages()


@dataclass(frozen=True)
class Refusal:
    """Why agentd refused a call: branch on ``reason``, never on the text."""

    #: The reason, a ``service_pb2.ErrorReason`` value.
    reason: int
    #: The reason as the ErrorInfo detail carries it, such as "SESSION_BUSY".
    reason_name: str
    #: The status code.
    code: grpc.StatusCode
    #: The refusal's particulars, such as "session_id" and "run_id".
    metadata: Dict[str, str] = field(default_factory=dict)


def refusal_of(err: BaseException) -> Optional[Refusal]:
    """The Refusal a gRPC error carries (its google.rpc.ErrorInfo of domain
    "agentd.v1"), or None."""
    if not isinstance(err, grpc.RpcError):
        return None
    trailers = err.trailing_metadata() or ()
    for key, value in trailers:
        if key != "grpc-status-details-bin":
            continue
        status = _Status.FromString(value)
        for detail in status.details:
            if detail.type_url.rsplit("/", 1)[-1] != "google.rpc.ErrorInfo":
                continue
            info = _ErrorInfo.FromString(detail.value)
            if info.domain != "agentd.v1":
                continue
            try:
                reason = service_pb2.ErrorReason.Value("ERROR_REASON_" + info.reason)
            except ValueError:
                reason = service_pb2.ERROR_REASON_UNSPECIFIED
            return Refusal(reason=reason, reason_name=info.reason, code=err.code(), metadata=dict(info.metadata))
    return None


class AgentdClient:
    """A connection to one agentd. Use ``async with`` or call ``close()``."""

    def __init__(self, address: str, token: Optional[str] = None,
                 credentials: Optional[grpc.ChannelCredentials] = None) -> None:
        """Connects lazily to host:port (plaintext unless credentials are given)."""
        if credentials is not None:
            self._channel = grpc.aio.secure_channel(address, credentials)
        else:
            self._channel = grpc.aio.insecure_channel(address)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        #: The generated stub, for every RPC the wrapper does not cover.
        self.rpc = service_pb2_grpc.AgentServiceStub(self._channel)

    async def __aenter__(self) -> "AgentdClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the channel; open streams are cancelled."""
        await self._channel.close()

    async def create_session(self, config: session_pb2.SessionConfig, title: str = "",
                             labels: Optional[dict] = None, session_id: str = "") -> session_pb2.Session:
        """Creates a session; config.faux scripts the faux model.

        With a session_id of the caller's choosing it is idempotent: the same
        id and config return the existing session.
        """
        res = await self.rpc.CreateSession(
            service_pb2.CreateSessionRequest(config=config, title=title, labels=labels or {},
                                             session_id=session_id),
            metadata=self._metadata)
        return res.session

    async def list_sessions(self, *, origin_session_id: str = "", label_filter: Optional[Mapping[str, str]] = None,
                            page_size: int = 0, page_token: str = "") -> service_pb2.ListSessionsResponse:
        """One page of sessions, newest first (sessions, next_page_token).

        origin_session_id keeps the sessions forked from that session and the
        subagents its runs spawned (each Session.origin names the parent
        session and, for a subagent, its run, spawn_agent tool call and
        profile); label_filter keeps those carrying each label with its
        value. Pass next_page_token, with the same filters, for the next page
        until it is empty; page_size 0 means 100.
        """
        req = service_pb2.ListSessionsRequest(origin_session_id=origin_session_id, label_filter=label_filter or {},
                                              page_size=page_size, page_token=page_token)
        return await self.rpc.ListSessions(req, metadata=self._metadata)

    def prompt(self, session_id: str, content: Content, *, detach: bool = False,
               request_id: str = "", if_busy: int = 0, output_schema: Optional[Mapping[str, Any]] = None,
               max_output_retries: Optional[int] = None,
               metadata: Optional[Mapping[str, str]] = None) -> AsyncIterator[events_pb2.AgentEvent]:
        """Sends a prompt and yields the run's events until agent_end.

        Leaving the iteration early (break, cancellation) ends the stream; the
        run goes on only when detach is set. if_busy (a service_pb2.BusyPolicy)
        says what to do while another run is active: REJECT (the default)
        refuses, ENQUEUE and STEER queue the prompt into that run and yield its
        events, INTERRUPT aborts it and yields this prompt's own run.
        output_schema (a JSON Schema whose root is "type": "object") asks for
        a typed answer: it arrives as structured_output on agent_end and on
        the final assistant message (see structured_output()); unset uses the
        session's. metadata (the caller's correlation ids, a str to str
        mapping) is stored with the run (get_run; list_runs filters on it) and
        echoed on agent_start and agent_end.
        """
        req = service_pb2.PromptRequest(session_id=session_id, content=to_content(content),
                                        detach=detach, request_id=request_id, if_busy=if_busy,
                                        metadata=metadata or {})
        _set_output(req, output_schema, max_output_retries)
        return self._stream(self.rpc.Prompt(req, metadata=self._metadata))

    def continue_run(self, session_id: str, *, detach: bool = False, request_id: str = "",
                     output_schema: Optional[Mapping[str, Any]] = None,
                     max_output_retries: Optional[int] = None,
                     metadata: Optional[Mapping[str, str]] = None) -> AsyncIterator[events_pb2.AgentEvent]:
        """Runs the agent on the current transcript and yields the run's events.

        output_schema, max_output_retries and metadata are as in prompt().
        """
        req = service_pb2.ContinueRequest(session_id=session_id, detach=detach, request_id=request_id,
                                          metadata=metadata or {})
        _set_output(req, output_schema, max_output_retries)
        return self._stream(self.rpc.Continue(req, metadata=self._metadata))

    def attach(self, session_id: str, run_id: str = "", after_seq: int = 0) -> AsyncIterator[events_pb2.AgentEvent]:
        """Yields a run's events after after_seq (0 replays all), then live ones."""
        req = service_pb2.AttachRequest(session_id=session_id, run_id=run_id, after_seq=after_seq)
        return self._stream(self.rpc.Attach(req, metadata=self._metadata))

    async def resume(self, session_id: str, stream: AsyncIterator[events_pb2.AgentEvent],
                     max_retries: int = 5) -> AsyncIterator[events_pb2.AgentEvent]:
        """Yields stream's events; after a transport error re-joins with Attach.

        Attach starts after the last seq seen, so every event arrives exactly
        once. Start the stream with detach=True so the run survives the drop.
        """
        run_id, last_seq, retries, current = "", 0, 0, stream
        while True:
            try:
                async for event in current:
                    if event.run_id == run_id and event.seq <= last_seq:
                        continue
                    run_id, last_seq = event.run_id, event.seq
                    yield event
                    if event.WhichOneof("event") == "agent_end":
                        return
                return
            except grpc.aio.AioRpcError as err:
                if not run_id or not is_resumable(err) or retries >= max_retries:
                    raise
                retries += 1
                current = self.attach(session_id, run_id=run_id, after_seq=last_seq)

    async def handle(self, session_id: str, stream: AsyncIterator[events_pb2.AgentEvent], *,
                     tools: Optional[dict] = None, approve=None,
                     hooks: Optional[Sequence[HookHandler]] = None) -> AsyncIterator[events_pb2.AgentEvent]:
        """Yields stream's events and answers on the way.

        tool_call_requested runs ``tools[name](args: dict, request)`` and
        submits what it returns: a ``(content, details)`` pair, or a string;
        an exception or an unknown tool becomes an error result the model
        sees. approval_requested calls ``approve(request)``, which returns
        ``(allow, reason, decided_by)`` or an Approval (with a scope, a rule,
        edited arguments); without approve the request stays pending until
        it times out. hook_requested asks the first of ``hooks`` (see
        ``on_pre_tool_use`` and its siblings) whose event matches and submits
        its HookAnswer; a request none matches waits until its hook times
        out. Handlers may be plain or async functions.
        """
        async for event in stream:
            yield event
            which = event.WhichOneof("event")
            if which == "tool_call_requested":
                req = event.tool_call_requested
                tool = (tools or {}).get(req.tool_name)
                details, is_error = None, False
                try:
                    if tool is None:
                        raise LookupError(f"no client tool named {req.tool_name}")
                    out = await _maybe_await(tool(arguments_dict(req.arguments), req))
                    content, details = out if isinstance(out, tuple) else (out, None)
                except Exception as err:  # the model sees the failure, the run goes on
                    content, is_error = f"{req.tool_name} failed: {err}", True
                await self.submit_tool_result(session_id, req.tool_call_id, content, details=details, is_error=is_error)
            elif which == "approval_requested" and approve is not None:
                req = event.approval_requested
                out = await _maybe_await(approve(req))
                a = out if isinstance(out, Approval) else Approval(*out)
                await self._resolve(session_id, [req.tool_call_id], a.allow, reason=a.reason, decided_by=a.decided_by,
                                    scope=a.scope, rule=a.rule, arguments=a.arguments, request=req)
            elif which == "hook_requested" and hooks:
                req = event.hook_requested
                h = handler_for(hooks, req)
                if h is not None:
                    await self.submit_hook_result(session_id, req.request_id, await _maybe_await(h.answer(req)))

    async def steer(self, session_id: str, content: Content) -> int:
        """Queues a message for the active run, after the current tool batch."""
        res = await self.rpc.Steer(service_pb2.SteerRequest(session_id=session_id, content=to_content(content)),
                                   metadata=self._metadata)
        return res.queued

    async def follow_up(self, session_id: str, content: Content) -> int:
        """Queues a message for the active run, delivered when it would stop."""
        res = await self.rpc.FollowUp(service_pb2.FollowUpRequest(session_id=session_id, content=to_content(content)),
                                      metadata=self._metadata)
        return res.queued

    async def clear_queue(self, session_id: str) -> service_pb2.ClearQueueResponse:
        """Removes and returns the steering and follow-up messages waiting for the active run."""
        return await self.rpc.ClearQueue(service_pb2.ClearQueueRequest(session_id=session_id),
                                         metadata=self._metadata)

    async def get_run(self, session_id: str, run_id: str) -> service_pb2.Run:
        """One run of the session: when and how it ran and ended, the request that
        started it (with its metadata), its usage, error and structured output.

        NOT_FOUND (RUN_NOT_FOUND) for a run of another session.
        """
        res = await self.rpc.GetRun(service_pb2.GetRunRequest(session_id=session_id, run_id=run_id),
                                    metadata=self._metadata)
        return res.run

    async def list_runs(self, session_id: str, *, outcomes: Sequence[int] = (),
                        start_time_after: Optional[datetime] = None, start_time_before: Optional[datetime] = None,
                        metadata_filter: Optional[Mapping[str, str]] = None, page_size: int = 0,
                        page_token: str = "") -> service_pb2.ListRunsResponse:
        """One page of the session's runs, newest first (runs, next_page_token).

        outcomes (events_pb2.RunOutcome values; UNSPECIFIED is the active run)
        keeps the runs that ended so; start_time_after (inclusive) and
        start_time_before bound their start (a naive datetime is UTC);
        metadata_filter keeps those whose request metadata has each key with
        its value (an empty value matches any). Pass next_page_token, with the
        same filters, for the next page until it is empty; page_size 0 means 100.
        """
        req = service_pb2.ListRunsRequest(session_id=session_id, outcomes=list(outcomes),
                                          metadata_filter=metadata_filter or {}, page_size=page_size,
                                          page_token=page_token)
        if start_time_after is not None:
            req.start_time_after.FromDatetime(start_time_after)
        if start_time_before is not None:
            req.start_time_before.FromDatetime(start_time_before)
        return await self.rpc.ListRuns(req, metadata=self._metadata)

    async def abort(self, session_id: str, run_id: str = "") -> str:
        """Aborts the active run; its stream still ends with agent_end."""
        res = await self.rpc.Abort(service_pb2.AbortRequest(session_id=session_id, run_id=run_id),
                                   metadata=self._metadata)
        return res.run_id

    async def submit_tool_result(self, session_id: str, tool_call_id: str, content: Content, *,
                                 details: Any = None, is_error: bool = False) -> None:
        """Answers a tool_call_requested event; details is plain JSON for UIs."""
        req = service_pb2.SubmitToolResultRequest(session_id=session_id, tool_call_id=tool_call_id,
                                                  content=to_content(content), is_error=is_error)
        if details is not None:
            req.details.CopyFrom(json_format.ParseDict(details, struct_pb2.Value()))
        await self.rpc.SubmitToolResult(req, metadata=self._metadata)

    async def resolve_approval(self, session_id: str, tool_call_id: str, allow: bool, *,
                               reason: str = "", decided_by: str = "", scope: Optional[str] = None, rule: Any = None,
                               arguments: Optional[dict] = None,
                               tool_call_ids: Sequence[str] = ()) -> Optional[agent_messages_pb2.ApprovalRule]:
        """Answers an approval_requested event; returns the rule stored for scope "session".

        scope is "call" (the default), "run" or "session"; rule (an
        ApprovalRule or a dict of its fields, naming its tool_name) limits a
        run or session scope to matching calls; arguments (with allow only)
        replaces the call's arguments; tool_call_ids decides more waiting calls
        of the run the same way, all or none.
        """
        return await self._resolve(session_id, [tool_call_id, *tool_call_ids], allow, reason=reason,
                                   decided_by=decided_by, scope=scope, rule=rule, arguments=arguments, request=None)

    async def approve(self, session_id: str, call: Any, *, reason: str = "", decided_by: str = "",
                      scope: Optional[str] = None, rule: Any = None,
                      arguments: Optional[dict] = None) -> Optional[agent_messages_pb2.ApprovalRule]:
        """Allows a waiting call, or several of one run (all or none).

        call is an ApprovalRequested, a tool call id, or a list of them. Given
        the request, a rule's tool defaults to the call's and rule=SUGGESTED
        takes its suggested_rule: ``approve(sid, req, scope="session",
        rule=SUGGESTED)``. Returns the rule stored for scope "session".
        """
        calls = list(call) if isinstance(call, (list, tuple)) else [call]
        return await self._resolve(session_id, [_call_id(c) for c in calls], True, reason=reason, decided_by=decided_by,
                                   scope=scope, rule=rule, arguments=arguments, request=_request_of(calls))

    async def deny(self, session_id: str, call: Any, *, reason: str = "", decided_by: str = "",
                   scope: Optional[str] = None, rule: Any = None) -> Optional[agent_messages_pb2.ApprovalRule]:
        """Refuses a waiting call or several (see approve); the model gets an error result carrying reason."""
        calls = list(call) if isinstance(call, (list, tuple)) else [call]
        return await self._resolve(session_id, [_call_id(c) for c in calls], False, reason=reason,
                                   decided_by=decided_by, scope=scope, rule=rule, arguments=None,
                                   request=_request_of(calls))

    async def _resolve(self, session_id: str, tool_call_ids: Sequence[str], allow: bool, *, reason: str,
                       decided_by: str, scope: Optional[str], rule: Any, arguments: Optional[dict],
                       request: Optional[events_pb2.ApprovalRequested]) -> Optional[agent_messages_pb2.ApprovalRule]:
        decision = (agent_messages_pb2.APPROVAL_DECISION_ALLOWED if allow
                    else agent_messages_pb2.APPROVAL_DECISION_DENIED)
        req = service_pb2.ResolveApprovalRequest(session_id=session_id, tool_call_id=tool_call_ids[0],
                                                 tool_call_ids=list(tool_call_ids[1:]), decision=decision,
                                                 reason=reason, decided_by=decided_by)
        if scope is not None:
            req.scope = _SCOPES[scope] if isinstance(scope, str) else scope
        built = _rule_of(rule, request)
        if built is not None:
            req.rule.CopyFrom(built)
        if arguments is not None:
            json_format.ParseDict(arguments, req.arguments)
        res = await self.rpc.ResolveApproval(req, metadata=self._metadata)
        return res.rule if res.HasField("rule") else None

    async def list_approval_rules(self, session_id: str) -> list:
        """The approval rules in force on the session's current path, oldest first."""
        res = await self.rpc.ListApprovalRules(service_pb2.ListApprovalRulesRequest(session_id=session_id),
                                               metadata=self._metadata)
        return list(res.rules)

    async def delete_approval_rule(self, session_id: str, rule_id: str) -> agent_messages_pb2.Entry:
        """Removes a rule (ApprovalRule.id) from the session's path; returns the ApprovalRuleRemoval entry."""
        res = await self.rpc.DeleteApprovalRule(
            service_pb2.DeleteApprovalRuleRequest(session_id=session_id, rule_id=rule_id), metadata=self._metadata)
        return res.entry

    async def submit_hook_result(self, session_id: str, request_id: str, answer: HookAnswer) -> None:
        """Answers a hook_requested event with a HookAnswer (allow, deny, modify or redact)."""
        req = service_pb2.SubmitHookResultRequest(
            session_id=session_id, request_id=request_id, verdict=answer.verdict, reason=answer.reason,
            instructions=answer.instructions, include_in_model_context=answer.include_in_model_context,
            decided_by=answer.decided_by)
        if answer.arguments is not None:
            json_format.ParseDict(answer.arguments, req.arguments)
        if answer.content is not None:
            req.content.extend(to_content(answer.content))
        if answer.details is not KEEP:
            req.replace_details = True
            if answer.details is not None:
                req.details.CopyFrom(json_format.ParseDict(answer.details, struct_pb2.Value()))
        await self.rpc.SubmitHookResult(req, metadata=self._metadata)

    async def resolve_in_doubt(self, session_id: str, tool_call_id: str, action: str, *, message: str = "",
                               content: Optional[Content] = None, details: Any = None,
                               is_error: bool = False) -> service_pb2.ResolveInDoubtResponse:
        """Decides a tool call left in doubt (tool_in_doubt) by a crash or a lost lease.

        On the idle session, action "retry" runs a server tool again (same
        arguments and idempotency key; a client tool you run yourself with
        its key, then "supply"), "skip" gives the model an error result
        carrying message, "supply" stores content (details, is_error) as its
        result. The session takes new runs once no call is in doubt; the
        response lists those left.
        """
        req = service_pb2.ResolveInDoubtRequest(session_id=session_id, tool_call_id=tool_call_id,
                                                action=_IN_DOUBT[action], message=message, is_error=is_error)
        if content is not None:
            req.content.extend(to_content(content))
        if details is not None:
            req.details.CopyFrom(json_format.ParseDict(details, struct_pb2.Value()))
        return await self.rpc.ResolveInDoubt(req, metadata=self._metadata)

    async def transcript(self, session_id: str) -> list:
        """Every entry on the session's current path, root first (all pages)."""
        entries: list = []
        token = ""
        while True:
            res = await self.rpc.GetTranscript(
                service_pb2.GetTranscriptRequest(session_id=session_id, page_size=1000, page_token=token),
                metadata=self._metadata)
            entries.extend(res.entries)
            token = res.next_page_token
            if not token:
                return entries

    async def context(self, session_id: str) -> session_pb2.Context:
        """What the next model call would receive."""
        res = await self.rpc.GetContext(service_pb2.GetContextRequest(session_id=session_id), metadata=self._metadata)
        return res.context

    async def context_report(self, session_id: str) -> service_pb2.GetContextResponse:
        """What the next model call would receive, with token estimates, the window and whether it compacts first."""
        return await self.rpc.GetContext(service_pb2.GetContextRequest(session_id=session_id), metadata=self._metadata)

    async def update_session(self, session_id: str, paths: Sequence[str], *,
                             config: Optional[session_pb2.SessionConfig] = None, title: str = "",
                             labels: Optional[dict] = None) -> service_pb2.UpdateSessionResponse:
        """Changes an idle session: only the fields named in paths ("config.<field>", "title", "labels").

        Model and thinking changes are written to the transcript.
        """
        req = service_pb2.UpdateSessionRequest(session_id=session_id, config=config, title=title, labels=labels or {})
        req.update_mask.paths.extend(paths)
        return await self.rpc.UpdateSession(req, metadata=self._metadata)

    async def compact(self, session_id: str, *, instructions: str = "", summary: str = "", dry_run: bool = False,
                      keep_recent_tokens: int = 0) -> events_pb2.CompactionEnd:
        """Compacts an idle session and returns compaction_end.

        Pass summary to bring your own (no model is called), dry_run to see the cut point and token counts only.
        """
        end = None
        call = self.rpc.Compact(service_pb2.CompactRequest(
            session_id=session_id, instructions=instructions, summary=summary, dry_run=dry_run,
            keep_recent_tokens=keep_recent_tokens), metadata=self._metadata)
        async for event in self._stream(call):
            if event.WhichOneof("event") == "compaction_end":
                end = event.compaction_end
        if end is None:
            raise RuntimeError("agentd: Compact ended without compaction_end")
        return end

    async def tree(self, session_id: str) -> tuple:
        """The session's whole tree: (nodes in append order, with labels; the leaf entry id)."""
        nodes: list = []
        token = ""
        while True:
            res = await self.rpc.GetTree(service_pb2.GetTreeRequest(session_id=session_id, page_size=1000, page_token=token),
                                         metadata=self._metadata)
            nodes.extend(res.nodes)
            token = res.next_page_token
            if not token:
                return nodes, res.leaf_entry_id

    async def branch(self, session_id: str, leaf_entry_id: str) -> list:
        """The entries on the path to leaf_entry_id (any branch), without moving the leaf."""
        entries: list = []
        token = ""
        while True:
            res = await self.rpc.GetTranscript(service_pb2.GetTranscriptRequest(
                session_id=session_id, leaf_entry_id=leaf_entry_id, page_size=1000, page_token=token), metadata=self._metadata)
            entries.extend(res.entries)
            token = res.next_page_token
            if not token:
                return entries

    def edit_and_resend(self, session_id: str, parent_entry_id: str, content: Content, *, detach: bool = False,
                        request_id: str = "") -> AsyncIterator[events_pb2.AgentEvent]:
        """Prompts with content as a new branch below parent_entry_id ("" starts a new root); the old branch stays."""
        req = service_pb2.PromptRequest(session_id=session_id, content=to_content(content), detach=detach,
                                        request_id=request_id, parent_entry_id=parent_entry_id,
                                        from_root=parent_entry_id == "")
        return self._stream(self.rpc.Prompt(req, metadata=self._metadata))

    async def navigate(self, session_id: str, entry_id: str, *, summary: str = "", summarize: bool = False,
                       instructions: str = "") -> service_pb2.NavigateResponse:
        """Moves the leaf to entry_id, with an optional summary of the branch left (yours, or the model's)."""
        return await self.rpc.Navigate(service_pb2.NavigateRequest(
            session_id=session_id, entry_id=entry_id, summary=summary, summarize=summarize, instructions=instructions),
            metadata=self._metadata)

    async def fork(self, session_id: str, entry_id: str = "", *, config: Optional[session_pb2.SessionConfig] = None,
                   title: str = "") -> session_pb2.Session:
        """Forks the session at entry_id (default its leaf) into a new session."""
        res = await self.rpc.ForkSession(service_pb2.ForkSessionRequest(
            session_id=session_id, entry_id=entry_id, config=config, title=title), metadata=self._metadata)
        return res.session

    async def set_label(self, session_id: str, entry_id: str, label: str) -> None:
        """Names an entry; an empty label clears it."""
        await self.rpc.SetLabel(service_pb2.SetLabelRequest(session_id=session_id, entry_id=entry_id, label=label),
                                metadata=self._metadata)

    async def submit_context(self, session_id: str, request_id: str, items: Sequence[Any]) -> None:
        """Answers a context_requested event: entry ids (str) to keep, in order, and AgentMessages to inject."""
        req = service_pb2.SubmitContextRequest(session_id=session_id, request_id=request_id)
        for it in items:
            if isinstance(it, str):
                req.items.add(entry_id=it)
            else:
                req.items.add(message=it)
        await self.rpc.SubmitContext(req, metadata=self._metadata)

    @staticmethod
    async def _stream(call: Any) -> AsyncIterator[events_pb2.AgentEvent]:
        try:
            async for event in call:
                yield event
        finally:
            call.cancel()


def _set_output(req: Any, schema: Optional[Mapping[str, Any]], retries: Optional[int]) -> None:
    """Sets the output schema fields of a Prompt or Continue request."""
    if schema is not None:
        req.output_schema.update(schema)
    if retries is not None:
        req.max_output_retries = retries


def structured_output(events: Sequence[events_pb2.AgentEvent]) -> Optional[dict]:
    """The typed answer of a run's events (agent_end's structured_output) as a
    dict, or None when the run had no output schema or did not complete."""
    for e in reversed(events):
        if e.WhichOneof("event") == "agent_end":
            end = e.agent_end
            return json_format.MessageToDict(end.structured_output) if end.HasField("structured_output") else None
    return None


def _call_id(call: Any) -> str:
    return call if isinstance(call, str) else call.tool_call_id


def _request_of(calls: Sequence[Any]) -> Optional[events_pb2.ApprovalRequested]:
    return next((c for c in calls if not isinstance(c, str)), None)


def _rule_of(rule: Any, request: Optional[events_pb2.ApprovalRequested]) -> Optional[agent_messages_pb2.ApprovalRule]:
    """The request's rule: the suggested one, or the caller's with the call's tool when it names none."""
    if rule is None:
        return None
    if isinstance(rule, str):
        if rule != SUGGESTED:
            raise ValueError(f"rule {rule!r}: pass an ApprovalRule, a dict of its fields or SUGGESTED")
        if request is None or not request.HasField("suggested_rule"):
            raise ValueError("rule=SUGGESTED needs an ApprovalRequested that carries suggested_rule")
        return request.suggested_rule
    out = agent_messages_pb2.ApprovalRule()
    if isinstance(rule, dict):
        out = agent_messages_pb2.ApprovalRule(**rule)
    else:
        out.CopyFrom(rule)  # a copy: the caller's message stays as it was
    if not out.tool_name and request is not None:
        out.tool_name = request.tool_name
    return out


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def arguments_dict(args: struct_pb2.Struct) -> dict:
    """A tool call's arguments as a plain dict."""
    return json_format.MessageToDict(args)


__all__: Iterable[str] = ("AgentdClient", "Approval", "Content", "SUGGESTED", "arguments_dict", "is_resumable",
                          "to_content")
