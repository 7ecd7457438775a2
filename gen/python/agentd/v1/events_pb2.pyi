from agentd.v1 import agent_messages_pb2 as _agent_messages_pb2
from agentd.v1 import content_pb2 as _content_pb2
from agentd.v1 import messages_pb2 as _messages_pb2
from agentd.v1 import session_pb2 as _session_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
RUN_OUTCOME_ABORTED: RunOutcome
RUN_OUTCOME_BUDGET_EXCEEDED: RunOutcome
RUN_OUTCOME_COMPLETED: RunOutcome
RUN_OUTCOME_ERROR: RunOutcome
RUN_OUTCOME_INTERRUPTED: RunOutcome
RUN_OUTCOME_OUTPUT_INVALID: RunOutcome
RUN_OUTCOME_UNSPECIFIED: RunOutcome

class AgentEnd(_message.Message):
    __slots__ = ["error_message", "metadata", "outcome", "structured_output", "usage"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    error_message: str
    metadata: _containers.ScalarMap[str, str]
    outcome: RunOutcome
    structured_output: _struct_pb2.Struct
    usage: _content_pb2.Usage
    def __init__(self, outcome: _Optional[_Union[RunOutcome, str]] = ..., error_message: _Optional[str] = ..., usage: _Optional[_Union[_content_pb2.Usage, _Mapping]] = ..., structured_output: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AgentError(_message.Message):
    __slots__ = ["fatal", "message", "stage"]
    FATAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    fatal: bool
    message: str
    stage: str
    def __init__(self, message: _Optional[str] = ..., stage: _Optional[str] = ..., fatal: bool = ...) -> None: ...

class AgentEvent(_message.Message):
    __slots__ = ["agent_end", "agent_start", "approval_requested", "compaction_end", "compaction_start", "context_requested", "error", "hook_requested", "message_end", "message_start", "message_update", "queue_update", "run_id", "seq", "session_id", "subagent", "time", "tool_call_requested", "tool_execution_end", "tool_execution_start", "tool_execution_update", "tool_in_doubt", "trace_id", "turn_end", "turn_start"]
    AGENT_END_FIELD_NUMBER: _ClassVar[int]
    AGENT_START_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_END_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_START_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HOOK_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_END_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_START_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_UPDATE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_UPDATE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SUBAGENT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_EXECUTION_END_FIELD_NUMBER: _ClassVar[int]
    TOOL_EXECUTION_START_FIELD_NUMBER: _ClassVar[int]
    TOOL_EXECUTION_UPDATE_FIELD_NUMBER: _ClassVar[int]
    TOOL_IN_DOUBT_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_END_FIELD_NUMBER: _ClassVar[int]
    TURN_START_FIELD_NUMBER: _ClassVar[int]
    agent_end: AgentEnd
    agent_start: AgentStart
    approval_requested: ApprovalRequested
    compaction_end: CompactionEnd
    compaction_start: CompactionStart
    context_requested: ContextRequested
    error: AgentError
    hook_requested: HookRequested
    message_end: MessageEnd
    message_start: MessageStart
    message_update: MessageUpdate
    queue_update: QueueUpdate
    run_id: str
    seq: int
    session_id: str
    subagent: SubagentEvent
    time: _timestamp_pb2.Timestamp
    tool_call_requested: ToolCallRequested
    tool_execution_end: ToolExecutionEnd
    tool_execution_start: ToolExecutionStart
    tool_execution_update: ToolExecutionUpdate
    tool_in_doubt: _agent_messages_pb2.ToolInDoubt
    trace_id: bytes
    turn_end: TurnEnd
    turn_start: TurnStart
    def __init__(self, session_id: _Optional[str] = ..., run_id: _Optional[str] = ..., seq: _Optional[int] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., trace_id: _Optional[bytes] = ..., agent_start: _Optional[_Union[AgentStart, _Mapping]] = ..., turn_start: _Optional[_Union[TurnStart, _Mapping]] = ..., message_start: _Optional[_Union[MessageStart, _Mapping]] = ..., message_update: _Optional[_Union[MessageUpdate, _Mapping]] = ..., message_end: _Optional[_Union[MessageEnd, _Mapping]] = ..., tool_execution_start: _Optional[_Union[ToolExecutionStart, _Mapping]] = ..., tool_execution_update: _Optional[_Union[ToolExecutionUpdate, _Mapping]] = ..., tool_execution_end: _Optional[_Union[ToolExecutionEnd, _Mapping]] = ..., turn_end: _Optional[_Union[TurnEnd, _Mapping]] = ..., agent_end: _Optional[_Union[AgentEnd, _Mapping]] = ..., approval_requested: _Optional[_Union[ApprovalRequested, _Mapping]] = ..., tool_call_requested: _Optional[_Union[ToolCallRequested, _Mapping]] = ..., queue_update: _Optional[_Union[QueueUpdate, _Mapping]] = ..., error: _Optional[_Union[AgentError, _Mapping]] = ..., compaction_start: _Optional[_Union[CompactionStart, _Mapping]] = ..., compaction_end: _Optional[_Union[CompactionEnd, _Mapping]] = ..., context_requested: _Optional[_Union[ContextRequested, _Mapping]] = ..., hook_requested: _Optional[_Union[HookRequested, _Mapping]] = ..., tool_in_doubt: _Optional[_Union[_agent_messages_pb2.ToolInDoubt, _Mapping]] = ..., subagent: _Optional[_Union[SubagentEvent, _Mapping]] = ...) -> None: ...

class AgentStart(_message.Message):
    __slots__ = ["metadata", "origin"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    metadata: _containers.ScalarMap[str, str]
    origin: _session_pb2.SessionOrigin
    def __init__(self, metadata: _Optional[_Mapping[str, str]] = ..., origin: _Optional[_Union[_session_pb2.SessionOrigin, _Mapping]] = ...) -> None: ...

class ApprovalRequested(_message.Message):
    __slots__ = ["arguments", "deadline", "decisions", "idempotency_key", "scopes", "suggested_rule", "tool_call_id", "tool_name"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    SUGGESTED_RULE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    deadline: _timestamp_pb2.Timestamp
    decisions: _containers.RepeatedScalarFieldContainer[_agent_messages_pb2.ApprovalDecision]
    idempotency_key: str
    scopes: _containers.RepeatedScalarFieldContainer[_agent_messages_pb2.ApprovalScope]
    suggested_rule: _agent_messages_pb2.ApprovalRule
    tool_call_id: str
    tool_name: str
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., decisions: _Optional[_Iterable[_Union[_agent_messages_pb2.ApprovalDecision, str]]] = ..., scopes: _Optional[_Iterable[_Union[_agent_messages_pb2.ApprovalScope, str]]] = ..., suggested_rule: _Optional[_Union[_agent_messages_pb2.ApprovalRule, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class CompactionEnd(_message.Message):
    __slots__ = ["dry_run", "entry_id", "error_message", "first_kept_entry_id", "reason", "summarized_messages", "summary", "tokens_after", "tokens_before"]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIRST_KEPT_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    entry_id: str
    error_message: str
    first_kept_entry_id: str
    reason: _agent_messages_pb2.CompactionReason
    summarized_messages: int
    summary: _agent_messages_pb2.CompactionSummary
    tokens_after: int
    tokens_before: int
    def __init__(self, reason: _Optional[_Union[_agent_messages_pb2.CompactionReason, str]] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., entry_id: _Optional[str] = ..., first_kept_entry_id: _Optional[str] = ..., summarized_messages: _Optional[int] = ..., summary: _Optional[_Union[_agent_messages_pb2.CompactionSummary, _Mapping]] = ..., error_message: _Optional[str] = ..., dry_run: bool = ...) -> None: ...

class CompactionStart(_message.Message):
    __slots__ = ["reason", "tokens_before"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    reason: _agent_messages_pb2.CompactionReason
    tokens_before: int
    def __init__(self, reason: _Optional[_Union[_agent_messages_pb2.CompactionReason, str]] = ..., tokens_before: _Optional[int] = ...) -> None: ...

class ContextItem(_message.Message):
    __slots__ = ["entry_id", "kind", "message", "tokens"]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    kind: _session_pb2.MessageKind
    message: _agent_messages_pb2.AgentMessage
    tokens: int
    def __init__(self, entry_id: _Optional[str] = ..., kind: _Optional[_Union[_session_pb2.MessageKind, str]] = ..., tokens: _Optional[int] = ..., message: _Optional[_Union[_agent_messages_pb2.AgentMessage, _Mapping]] = ...) -> None: ...

class ContextRequested(_message.Message):
    __slots__ = ["deadline", "items", "request_id", "total_tokens"]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    deadline: _timestamp_pb2.Timestamp
    items: _containers.RepeatedCompositeFieldContainer[ContextItem]
    request_id: str
    total_tokens: int
    def __init__(self, request_id: _Optional[str] = ..., items: _Optional[_Iterable[_Union[ContextItem, _Mapping]]] = ..., total_tokens: _Optional[int] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class HookRequested(_message.Message):
    __slots__ = ["compaction_reason", "continuations", "deadline", "event", "hook", "hook_index", "instructions", "message", "request_id", "source", "tokens_before", "tool_call", "tool_result"]
    COMPACTION_REASON_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    HOOK_FIELD_NUMBER: _ClassVar[int]
    HOOK_INDEX_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    compaction_reason: _agent_messages_pb2.CompactionReason
    continuations: int
    deadline: _timestamp_pb2.Timestamp
    event: _agent_messages_pb2.HookEvent
    hook: str
    hook_index: int
    instructions: str
    message: _agent_messages_pb2.AgentMessage
    request_id: str
    source: str
    tokens_before: int
    tool_call: _content_pb2.ToolCall
    tool_result: _messages_pb2.ToolResultMessage
    def __init__(self, request_id: _Optional[str] = ..., event: _Optional[_Union[_agent_messages_pb2.HookEvent, str]] = ..., hook: _Optional[str] = ..., hook_index: _Optional[int] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., tool_call: _Optional[_Union[_content_pb2.ToolCall, _Mapping]] = ..., tool_result: _Optional[_Union[_messages_pb2.ToolResultMessage, _Mapping]] = ..., message: _Optional[_Union[_agent_messages_pb2.AgentMessage, _Mapping]] = ..., source: _Optional[str] = ..., continuations: _Optional[int] = ..., compaction_reason: _Optional[_Union[_agent_messages_pb2.CompactionReason, str]] = ..., tokens_before: _Optional[int] = ..., instructions: _Optional[str] = ...) -> None: ...

class MessageEnd(_message.Message):
    __slots__ = ["entry_id", "message"]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    message: _agent_messages_pb2.AgentMessage
    def __init__(self, message: _Optional[_Union[_agent_messages_pb2.AgentMessage, _Mapping]] = ..., entry_id: _Optional[str] = ...) -> None: ...

class MessageStart(_message.Message):
    __slots__ = ["message"]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: _agent_messages_pb2.AgentMessage
    def __init__(self, message: _Optional[_Union[_agent_messages_pb2.AgentMessage, _Mapping]] = ...) -> None: ...

class MessageUpdate(_message.Message):
    __slots__ = ["text_delta", "text_end", "text_start", "thinking_delta", "thinking_end", "thinking_start", "tool_call_delta", "tool_call_end", "tool_call_start"]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    TEXT_END_FIELD_NUMBER: _ClassVar[int]
    TEXT_START_FIELD_NUMBER: _ClassVar[int]
    THINKING_DELTA_FIELD_NUMBER: _ClassVar[int]
    THINKING_END_FIELD_NUMBER: _ClassVar[int]
    THINKING_START_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_END_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_START_FIELD_NUMBER: _ClassVar[int]
    text_delta: TextDelta
    text_end: TextEnd
    text_start: TextStart
    thinking_delta: ThinkingDelta
    thinking_end: ThinkingEnd
    thinking_start: ThinkingStart
    tool_call_delta: ToolCallDelta
    tool_call_end: ToolCallEnd
    tool_call_start: ToolCallStart
    def __init__(self, text_start: _Optional[_Union[TextStart, _Mapping]] = ..., text_delta: _Optional[_Union[TextDelta, _Mapping]] = ..., text_end: _Optional[_Union[TextEnd, _Mapping]] = ..., thinking_start: _Optional[_Union[ThinkingStart, _Mapping]] = ..., thinking_delta: _Optional[_Union[ThinkingDelta, _Mapping]] = ..., thinking_end: _Optional[_Union[ThinkingEnd, _Mapping]] = ..., tool_call_start: _Optional[_Union[ToolCallStart, _Mapping]] = ..., tool_call_delta: _Optional[_Union[ToolCallDelta, _Mapping]] = ..., tool_call_end: _Optional[_Union[ToolCallEnd, _Mapping]] = ...) -> None: ...

class QueueUpdate(_message.Message):
    __slots__ = ["follow_up", "steering"]
    FOLLOW_UP_FIELD_NUMBER: _ClassVar[int]
    STEERING_FIELD_NUMBER: _ClassVar[int]
    follow_up: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.AgentMessage]
    steering: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.AgentMessage]
    def __init__(self, steering: _Optional[_Iterable[_Union[_agent_messages_pb2.AgentMessage, _Mapping]]] = ..., follow_up: _Optional[_Iterable[_Union[_agent_messages_pb2.AgentMessage, _Mapping]]] = ...) -> None: ...

class SubagentEvent(_message.Message):
    __slots__ = ["event", "profile", "run_id", "session_id", "tool_call_id"]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    event: AgentEvent
    profile: str
    run_id: str
    session_id: str
    tool_call_id: str
    def __init__(self, session_id: _Optional[str] = ..., run_id: _Optional[str] = ..., profile: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., event: _Optional[_Union[AgentEvent, _Mapping]] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ["content_index", "delta"]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    content_index: int
    delta: str
    def __init__(self, content_index: _Optional[int] = ..., delta: _Optional[str] = ...) -> None: ...

class TextEnd(_message.Message):
    __slots__ = ["content_index", "text_signature"]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    content_index: int
    text_signature: str
    def __init__(self, content_index: _Optional[int] = ..., text_signature: _Optional[str] = ...) -> None: ...

class TextStart(_message.Message):
    __slots__ = ["content_index"]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    content_index: int
    def __init__(self, content_index: _Optional[int] = ...) -> None: ...

class ThinkingDelta(_message.Message):
    __slots__ = ["content_index", "delta"]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    content_index: int
    delta: str
    def __init__(self, content_index: _Optional[int] = ..., delta: _Optional[str] = ...) -> None: ...

class ThinkingEnd(_message.Message):
    __slots__ = ["content_index", "thinking_signature"]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    THINKING_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    content_index: int
    thinking_signature: str
    def __init__(self, content_index: _Optional[int] = ..., thinking_signature: _Optional[str] = ...) -> None: ...

class ThinkingStart(_message.Message):
    __slots__ = ["content_index", "redacted"]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    content_index: int
    redacted: bool
    def __init__(self, content_index: _Optional[int] = ..., redacted: bool = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ["content_index", "delta"]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    content_index: int
    delta: str
    def __init__(self, content_index: _Optional[int] = ..., delta: _Optional[str] = ...) -> None: ...

class ToolCallEnd(_message.Message):
    __slots__ = ["content_index", "tool_call"]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    content_index: int
    tool_call: _content_pb2.ToolCall
    def __init__(self, content_index: _Optional[int] = ..., tool_call: _Optional[_Union[_content_pb2.ToolCall, _Mapping]] = ...) -> None: ...

class ToolCallRequested(_message.Message):
    __slots__ = ["arguments", "deadline", "idempotency_key", "tool_call_id", "tool_name"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    deadline: _timestamp_pb2.Timestamp
    idempotency_key: str
    tool_call_id: str
    tool_name: str
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class ToolCallStart(_message.Message):
    __slots__ = ["content_index", "id", "name"]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    content_index: int
    id: str
    name: str
    def __init__(self, content_index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ToolExecutionEnd(_message.Message):
    __slots__ = ["result"]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _messages_pb2.ToolResultMessage
    def __init__(self, result: _Optional[_Union[_messages_pb2.ToolResultMessage, _Mapping]] = ...) -> None: ...

class ToolExecutionStart(_message.Message):
    __slots__ = ["arguments", "tool_call_id", "tool_name"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    tool_call_id: str
    tool_name: str
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolExecutionUpdate(_message.Message):
    __slots__ = ["content", "details", "tool_call_id", "tool_name"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    details: _struct_pb2.Value
    tool_call_id: str
    tool_name: str
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., details: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class TurnEnd(_message.Message):
    __slots__ = ["message", "tool_results", "turn"]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULTS_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    message: _messages_pb2.AssistantMessage
    tool_results: _containers.RepeatedCompositeFieldContainer[_messages_pb2.ToolResultMessage]
    turn: int
    def __init__(self, turn: _Optional[int] = ..., message: _Optional[_Union[_messages_pb2.AssistantMessage, _Mapping]] = ..., tool_results: _Optional[_Iterable[_Union[_messages_pb2.ToolResultMessage, _Mapping]]] = ...) -> None: ...

class TurnStart(_message.Message):
    __slots__ = ["turn"]
    TURN_FIELD_NUMBER: _ClassVar[int]
    turn: int
    def __init__(self, turn: _Optional[int] = ...) -> None: ...

class RunOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
