from agentd.v1 import agent_messages_pb2 as _agent_messages_pb2
from agentd.v1 import content_pb2 as _content_pb2
from agentd.v1 import events_pb2 as _events_pb2
from agentd.v1 import session_pb2 as _session_pb2
from agentd.v1 import watch_pb2 as _watch_pb2
from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

BUSY_POLICY_ENQUEUE: BusyPolicy
BUSY_POLICY_INTERRUPT: BusyPolicy
BUSY_POLICY_REJECT: BusyPolicy
BUSY_POLICY_STEER: BusyPolicy
BUSY_POLICY_UNSPECIFIED: BusyPolicy
DESCRIPTOR: _descriptor.FileDescriptor
ERROR_REASON_ANSWER_TOO_LATE: ErrorReason
ERROR_REASON_BUDGET_EXCEEDED: ErrorReason
ERROR_REASON_CANNOT_CONTINUE: ErrorReason
ERROR_REASON_CEILING_FORBIDS_RULE: ErrorReason
ERROR_REASON_CONCURRENCY_LIMIT: ErrorReason
ERROR_REASON_CONCURRENT_CHANGE: ErrorReason
ERROR_REASON_DATA_CORRUPT: ErrorReason
ERROR_REASON_ENTRY_NOT_FOUND: ErrorReason
ERROR_REASON_EVENTS_EXPIRED: ErrorReason
ERROR_REASON_FAILED_PRECONDITION: ErrorReason
ERROR_REASON_INTERNAL: ErrorReason
ERROR_REASON_INVALID_ARGUMENT: ErrorReason
ERROR_REASON_MODEL_UNAVAILABLE: ErrorReason
ERROR_REASON_NOTHING_TO_COMPACT: ErrorReason
ERROR_REASON_NOT_IN_DOUBT: ErrorReason
ERROR_REASON_NOT_WAITING: ErrorReason
ERROR_REASON_PROMPT_REFUSED: ErrorReason
ERROR_REASON_REPLICA_UNREACHABLE: ErrorReason
ERROR_REASON_REPLICA_VERSION_MISMATCH: ErrorReason
ERROR_REASON_REQUEST_ID_REUSED: ErrorReason
ERROR_REASON_RULE_NOT_FOUND: ErrorReason
ERROR_REASON_RUN_NOT_ACTIVE: ErrorReason
ERROR_REASON_RUN_NOT_FOUND: ErrorReason
ERROR_REASON_SANDBOX_UNAVAILABLE: ErrorReason
ERROR_REASON_SEQ_OUT_OF_RANGE: ErrorReason
ERROR_REASON_SESSION_BUSY: ErrorReason
ERROR_REASON_SESSION_EXISTS: ErrorReason
ERROR_REASON_SESSION_NOT_FOUND: ErrorReason
ERROR_REASON_SETTING_UNSUPPORTED: ErrorReason
ERROR_REASON_SHUTTING_DOWN: ErrorReason
ERROR_REASON_SUMMARY_FAILED: ErrorReason
ERROR_REASON_TENANT_CEILING: ErrorReason
ERROR_REASON_TENANT_FORBIDDEN: ErrorReason
ERROR_REASON_TENANT_LIMIT: ErrorReason
ERROR_REASON_TOOLS_UNAVAILABLE: ErrorReason
ERROR_REASON_TOOL_CALLS_IN_DOUBT: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_WORKSPACE_FORBIDDEN: ErrorReason
HOOK_VERDICT_ALLOW: HookVerdict
HOOK_VERDICT_DENY: HookVerdict
HOOK_VERDICT_MODIFY: HookVerdict
HOOK_VERDICT_REDACT: HookVerdict
HOOK_VERDICT_UNSPECIFIED: HookVerdict
IN_DOUBT_ACTION_RETRY: InDoubtAction
IN_DOUBT_ACTION_SKIP: InDoubtAction
IN_DOUBT_ACTION_SUPPLY: InDoubtAction
IN_DOUBT_ACTION_UNSPECIFIED: InDoubtAction
TOOL_SOURCE_STATE_FAILED: ToolSourceState
TOOL_SOURCE_STATE_READY: ToolSourceState
TOOL_SOURCE_STATE_STOPPED: ToolSourceState
TOOL_SOURCE_STATE_UNSPECIFIED: ToolSourceState

class AbortRequest(_message.Message):
    __slots__ = ["run_id", "session_id"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ["run_id"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class AppendMessagesRequest(_message.Message):
    __slots__ = ["messages", "session_id"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.AgentMessage]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_agent_messages_pb2.AgentMessage, _Mapping]]] = ...) -> None: ...

class AppendMessagesResponse(_message.Message):
    __slots__ = ["entries"]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.Entry]
    def __init__(self, entries: _Optional[_Iterable[_Union[_agent_messages_pb2.Entry, _Mapping]]] = ...) -> None: ...

class AttachRequest(_message.Message):
    __slots__ = ["after_seq", "run_id", "session_id"]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    run_id: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., run_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class ClearQueueRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ClearQueueResponse(_message.Message):
    __slots__ = ["follow_up", "steering"]
    FOLLOW_UP_FIELD_NUMBER: _ClassVar[int]
    STEERING_FIELD_NUMBER: _ClassVar[int]
    follow_up: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.AgentMessage]
    steering: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.AgentMessage]
    def __init__(self, steering: _Optional[_Iterable[_Union[_agent_messages_pb2.AgentMessage, _Mapping]]] = ..., follow_up: _Optional[_Iterable[_Union[_agent_messages_pb2.AgentMessage, _Mapping]]] = ...) -> None: ...

class CompactRequest(_message.Message):
    __slots__ = ["dry_run", "instructions", "keep_recent_tokens", "session_id", "summary"]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    KEEP_RECENT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    instructions: str
    keep_recent_tokens: int
    session_id: str
    summary: str
    def __init__(self, session_id: _Optional[str] = ..., instructions: _Optional[str] = ..., summary: _Optional[str] = ..., dry_run: bool = ..., keep_recent_tokens: _Optional[int] = ...) -> None: ...

class ContextSelection(_message.Message):
    __slots__ = ["entry_id", "message"]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    message: _agent_messages_pb2.AgentMessage
    def __init__(self, entry_id: _Optional[str] = ..., message: _Optional[_Union[_agent_messages_pb2.AgentMessage, _Mapping]] = ...) -> None: ...

class ContinueRequest(_message.Message):
    __slots__ = ["detach", "max_output_retries", "metadata", "model", "model_settings", "output_schema", "parent_entry_id", "request_id", "session_id", "system_prompt_append", "thinking_level", "tools"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DETACH_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_RETRIES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PARENT_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_APPEND_FIELD_NUMBER: _ClassVar[int]
    THINKING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    detach: bool
    max_output_retries: int
    metadata: _containers.ScalarMap[str, str]
    model: _session_pb2.ModelRef
    model_settings: _session_pb2.ModelSettings
    output_schema: _struct_pb2.Struct
    parent_entry_id: str
    request_id: str
    session_id: str
    system_prompt_append: str
    thinking_level: _agent_messages_pb2.ThinkingLevel
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., detach: bool = ..., parent_entry_id: _Optional[str] = ..., model: _Optional[_Union[_session_pb2.ModelRef, _Mapping]] = ..., thinking_level: _Optional[_Union[_agent_messages_pb2.ThinkingLevel, str]] = ..., system_prompt_append: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., model_settings: _Optional[_Union[_session_pb2.ModelSettings, _Mapping]] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., max_output_retries: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ["config", "labels", "session_id", "title"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    config: _session_pb2.SessionConfig
    labels: _containers.ScalarMap[str, str]
    session_id: str
    title: str
    def __init__(self, config: _Optional[_Union[_session_pb2.SessionConfig, _Mapping]] = ..., title: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., session_id: _Optional[str] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ["session"]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class DeleteApprovalRuleRequest(_message.Message):
    __slots__ = ["rule_id", "session_id"]
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    rule_id: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., rule_id: _Optional[str] = ...) -> None: ...

class DeleteApprovalRuleResponse(_message.Message):
    __slots__ = ["entry"]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: _agent_messages_pb2.Entry
    def __init__(self, entry: _Optional[_Union[_agent_messages_pb2.Entry, _Mapping]] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ["force", "session_id"]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    force: bool
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., force: bool = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ExportSessionRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class FollowUpRequest(_message.Message):
    __slots__ = ["content", "session_id"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ...) -> None: ...

class FollowUpResponse(_message.Message):
    __slots__ = ["queued"]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    queued: int
    def __init__(self, queued: _Optional[int] = ...) -> None: ...

class ForkSessionRequest(_message.Message):
    __slots__ = ["config", "entry_id", "labels", "session_id", "title"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    config: _session_pb2.SessionConfig
    entry_id: str
    labels: _containers.ScalarMap[str, str]
    session_id: str
    title: str
    def __init__(self, session_id: _Optional[str] = ..., entry_id: _Optional[str] = ..., config: _Optional[_Union[_session_pb2.SessionConfig, _Mapping]] = ..., title: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ForkSessionResponse(_message.Message):
    __slots__ = ["session"]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class GetContextRequest(_message.Message):
    __slots__ = ["leaf_entry_id", "session_id"]
    LEAF_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    leaf_entry_id: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., leaf_entry_id: _Optional[str] = ...) -> None: ...

class GetContextResponse(_message.Message):
    __slots__ = ["compaction_threshold", "context", "context_window", "message_tokens", "total_tokens", "would_compact"]
    COMPACTION_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    WOULD_COMPACT_FIELD_NUMBER: _ClassVar[int]
    compaction_threshold: int
    context: _session_pb2.Context
    context_window: int
    message_tokens: _containers.RepeatedScalarFieldContainer[int]
    total_tokens: int
    would_compact: bool
    def __init__(self, context: _Optional[_Union[_session_pb2.Context, _Mapping]] = ..., message_tokens: _Optional[_Iterable[int]] = ..., total_tokens: _Optional[int] = ..., context_window: _Optional[int] = ..., compaction_threshold: _Optional[int] = ..., would_compact: bool = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ["run_id", "session_id"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ["session"]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class GetTenantUsageRequest(_message.Message):
    __slots__ = ["tenant"]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class GetTenantUsageResponse(_message.Message):
    __slots__ = ["active_runs", "day_start", "max_concurrent_runs", "max_cost_per_day_usd", "spent_today", "tenant"]
    ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    DAY_START_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_RUNS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_PER_DAY_USD_FIELD_NUMBER: _ClassVar[int]
    SPENT_TODAY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    active_runs: int
    day_start: _timestamp_pb2.Timestamp
    max_concurrent_runs: int
    max_cost_per_day_usd: float
    spent_today: _session_pb2.Spend
    tenant: str
    def __init__(self, tenant: _Optional[str] = ..., spent_today: _Optional[_Union[_session_pb2.Spend, _Mapping]] = ..., day_start: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., max_cost_per_day_usd: _Optional[float] = ..., active_runs: _Optional[int] = ..., max_concurrent_runs: _Optional[int] = ...) -> None: ...

class GetTranscriptRequest(_message.Message):
    __slots__ = ["leaf_entry_id", "page_size", "page_token", "session_id"]
    LEAF_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    leaf_entry_id: str
    page_size: int
    page_token: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., leaf_entry_id: _Optional[str] = ...) -> None: ...

class GetTranscriptResponse(_message.Message):
    __slots__ = ["entries", "labels", "next_page_token"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.Entry]
    labels: _containers.ScalarMap[str, str]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[_agent_messages_pb2.Entry, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetTreeRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "session_id"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetTreeResponse(_message.Message):
    __slots__ = ["leaf_entry_id", "next_page_token", "nodes"]
    LEAF_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    leaf_entry_id: str
    next_page_token: str
    nodes: _containers.RepeatedCompositeFieldContainer[TreeNode]
    def __init__(self, nodes: _Optional[_Iterable[_Union[TreeNode, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., leaf_entry_id: _Optional[str] = ...) -> None: ...

class ImportSessionRequest(_message.Message):
    __slots__ = ["record"]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: SessionRecord
    def __init__(self, record: _Optional[_Union[SessionRecord, _Mapping]] = ...) -> None: ...

class ImportSessionResponse(_message.Message):
    __slots__ = ["session"]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class ListApprovalRulesRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListApprovalRulesResponse(_message.Message):
    __slots__ = ["rules"]
    RULES_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.ApprovalRule]
    def __init__(self, rules: _Optional[_Iterable[_Union[_agent_messages_pb2.ApprovalRule, _Mapping]]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ["models"]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[_session_pb2.Model]
    def __init__(self, models: _Optional[_Iterable[_Union[_session_pb2.Model, _Mapping]]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ["metadata_filter", "outcomes", "page_size", "page_token", "session_id", "start_time_after", "start_time_before"]
    class MetadataFilterEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FILTER_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_AFTER_FIELD_NUMBER: _ClassVar[int]
    START_TIME_BEFORE_FIELD_NUMBER: _ClassVar[int]
    metadata_filter: _containers.ScalarMap[str, str]
    outcomes: _containers.RepeatedScalarFieldContainer[_events_pb2.RunOutcome]
    page_size: int
    page_token: str
    session_id: str
    start_time_after: _timestamp_pb2.Timestamp
    start_time_before: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., outcomes: _Optional[_Iterable[_Union[_events_pb2.RunOutcome, str]]] = ..., start_time_after: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., start_time_before: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., metadata_filter: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ["next_page_token", "runs"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ["label_filter", "origin_session_id", "page_size", "page_token"]
    class LabelFilterEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABEL_FILTER_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    label_filter: _containers.ScalarMap[str, str]
    origin_session_id: str
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., label_filter: _Optional[_Mapping[str, str]] = ..., origin_session_id: _Optional[str] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ["next_page_token", "sessions"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    sessions: _containers.RepeatedCompositeFieldContainer[_session_pb2.Session]
    def __init__(self, sessions: _Optional[_Iterable[_Union[_session_pb2.Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListToolSourcesRequest(_message.Message):
    __slots__ = ["refresh"]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    refresh: bool
    def __init__(self, refresh: bool = ...) -> None: ...

class ListToolSourcesResponse(_message.Message):
    __slots__ = ["sources"]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedCompositeFieldContainer[ToolSource]
    def __init__(self, sources: _Optional[_Iterable[_Union[ToolSource, _Mapping]]] = ...) -> None: ...

class NavigateRequest(_message.Message):
    __slots__ = ["entry_id", "instructions", "session_id", "summarize", "summary"]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    instructions: str
    session_id: str
    summarize: bool
    summary: str
    def __init__(self, session_id: _Optional[str] = ..., entry_id: _Optional[str] = ..., summary: _Optional[str] = ..., summarize: bool = ..., instructions: _Optional[str] = ...) -> None: ...

class NavigateResponse(_message.Message):
    __slots__ = ["branch_summary", "session"]
    BRANCH_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    branch_summary: _agent_messages_pb2.Entry
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ..., branch_summary: _Optional[_Union[_agent_messages_pb2.Entry, _Mapping]] = ...) -> None: ...

class PromptRequest(_message.Message):
    __slots__ = ["content", "detach", "from_root", "if_busy", "max_output_retries", "metadata", "model", "model_settings", "output_schema", "parent_entry_id", "request_id", "session_id", "system_prompt_append", "thinking_level", "tools"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DETACH_FIELD_NUMBER: _ClassVar[int]
    FROM_ROOT_FIELD_NUMBER: _ClassVar[int]
    IF_BUSY_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_RETRIES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PARENT_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_APPEND_FIELD_NUMBER: _ClassVar[int]
    THINKING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    detach: bool
    from_root: bool
    if_busy: BusyPolicy
    max_output_retries: int
    metadata: _containers.ScalarMap[str, str]
    model: _session_pb2.ModelRef
    model_settings: _session_pb2.ModelSettings
    output_schema: _struct_pb2.Struct
    parent_entry_id: str
    request_id: str
    session_id: str
    system_prompt_append: str
    thinking_level: _agent_messages_pb2.ThinkingLevel
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., request_id: _Optional[str] = ..., detach: bool = ..., parent_entry_id: _Optional[str] = ..., from_root: bool = ..., model: _Optional[_Union[_session_pb2.ModelRef, _Mapping]] = ..., thinking_level: _Optional[_Union[_agent_messages_pb2.ThinkingLevel, str]] = ..., system_prompt_append: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., model_settings: _Optional[_Union[_session_pb2.ModelSettings, _Mapping]] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., max_output_retries: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., if_busy: _Optional[_Union[BusyPolicy, str]] = ...) -> None: ...

class RedactEntriesRequest(_message.Message):
    __slots__ = ["entry_ids", "reason", "redacted_by", "session_id"]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REDACTED_BY_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    entry_ids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    redacted_by: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., entry_ids: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., redacted_by: _Optional[str] = ...) -> None: ...

class RedactEntriesResponse(_message.Message):
    __slots__ = ["entries"]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.Entry]
    def __init__(self, entries: _Optional[_Iterable[_Union[_agent_messages_pb2.Entry, _Mapping]]] = ...) -> None: ...

class ResolveApprovalRequest(_message.Message):
    __slots__ = ["arguments", "decided_by", "decision", "reason", "rule", "scope", "session_id", "tool_call_id", "tool_call_ids"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    decided_by: str
    decision: _agent_messages_pb2.ApprovalDecision
    reason: str
    rule: _agent_messages_pb2.ApprovalRule
    scope: _agent_messages_pb2.ApprovalScope
    session_id: str
    tool_call_id: str
    tool_call_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., decision: _Optional[_Union[_agent_messages_pb2.ApprovalDecision, str]] = ..., reason: _Optional[str] = ..., decided_by: _Optional[str] = ..., scope: _Optional[_Union[_agent_messages_pb2.ApprovalScope, str]] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., rule: _Optional[_Union[_agent_messages_pb2.ApprovalRule, _Mapping]] = ..., tool_call_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ResolveApprovalResponse(_message.Message):
    __slots__ = ["rule"]
    RULE_FIELD_NUMBER: _ClassVar[int]
    rule: _agent_messages_pb2.ApprovalRule
    def __init__(self, rule: _Optional[_Union[_agent_messages_pb2.ApprovalRule, _Mapping]] = ...) -> None: ...

class ResolveInDoubtRequest(_message.Message):
    __slots__ = ["action", "content", "details", "is_error", "message", "session_id", "tool_call_id"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    action: InDoubtAction
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    details: _struct_pb2.Value
    is_error: bool
    message: str
    session_id: str
    tool_call_id: str
    def __init__(self, session_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., action: _Optional[_Union[InDoubtAction, str]] = ..., message: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., details: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., is_error: bool = ...) -> None: ...

class ResolveInDoubtResponse(_message.Message):
    __slots__ = ["entry", "remaining"]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    entry: _agent_messages_pb2.Entry
    remaining: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.ToolInDoubt]
    def __init__(self, entry: _Optional[_Union[_agent_messages_pb2.Entry, _Mapping]] = ..., remaining: _Optional[_Iterable[_Union[_agent_messages_pb2.ToolInDoubt, _Mapping]]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ["end_time", "error_message", "events_pruned", "id", "last_seq", "outcome", "request", "session_id", "start_time", "structured_output", "usage"]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EVENTS_PRUNED_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    end_time: _timestamp_pb2.Timestamp
    error_message: str
    events_pruned: bool
    id: str
    last_seq: int
    outcome: _events_pb2.RunOutcome
    request: RunRequest
    session_id: str
    start_time: _timestamp_pb2.Timestamp
    structured_output: _struct_pb2.Struct
    usage: _content_pb2.Usage
    def __init__(self, id: _Optional[str] = ..., session_id: _Optional[str] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[_events_pb2.RunOutcome, str]] = ..., error_message: _Optional[str] = ..., request: _Optional[_Union[RunRequest, _Mapping]] = ..., usage: _Optional[_Union[_content_pb2.Usage, _Mapping]] = ..., structured_output: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., last_seq: _Optional[int] = ..., events_pruned: bool = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ["from_root", "if_busy", "max_output_retries", "metadata", "method", "model", "model_settings", "output_schema", "parent_entry_id", "prompt_entry_id", "request_id", "system_prompt_append", "thinking_level", "tools"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FROM_ROOT_FIELD_NUMBER: _ClassVar[int]
    IF_BUSY_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_RETRIES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PARENT_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_APPEND_FIELD_NUMBER: _ClassVar[int]
    THINKING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    from_root: bool
    if_busy: BusyPolicy
    max_output_retries: int
    metadata: _containers.ScalarMap[str, str]
    method: str
    model: _session_pb2.ModelRef
    model_settings: _session_pb2.ModelSettings
    output_schema: _struct_pb2.Struct
    parent_entry_id: str
    prompt_entry_id: str
    request_id: str
    system_prompt_append: str
    thinking_level: _agent_messages_pb2.ThinkingLevel
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, method: _Optional[str] = ..., prompt_entry_id: _Optional[str] = ..., request_id: _Optional[str] = ..., parent_entry_id: _Optional[str] = ..., from_root: bool = ..., model: _Optional[_Union[_session_pb2.ModelRef, _Mapping]] = ..., thinking_level: _Optional[_Union[_agent_messages_pb2.ThinkingLevel, str]] = ..., system_prompt_append: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., model_settings: _Optional[_Union[_session_pb2.ModelSettings, _Mapping]] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., max_output_retries: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., if_busy: _Optional[_Union[BusyPolicy, str]] = ...) -> None: ...

class SessionHeader(_message.Message):
    __slots__ = ["config", "entry_count", "labels", "leaf_entry_id", "schema_version", "title"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LEAF_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    config: _session_pb2.SessionConfig
    entry_count: int
    labels: _containers.ScalarMap[str, str]
    leaf_entry_id: str
    schema_version: int
    title: str
    def __init__(self, config: _Optional[_Union[_session_pb2.SessionConfig, _Mapping]] = ..., title: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., leaf_entry_id: _Optional[str] = ..., schema_version: _Optional[int] = ..., entry_count: _Optional[int] = ...) -> None: ...

class SessionRecord(_message.Message):
    __slots__ = ["entry", "header"]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    entry: _agent_messages_pb2.Entry
    header: SessionHeader
    def __init__(self, header: _Optional[_Union[SessionHeader, _Mapping]] = ..., entry: _Optional[_Union[_agent_messages_pb2.Entry, _Mapping]] = ...) -> None: ...

class SetLabelRequest(_message.Message):
    __slots__ = ["entry_id", "label", "session_id"]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    label: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., entry_id: _Optional[str] = ..., label: _Optional[str] = ...) -> None: ...

class SetLabelResponse(_message.Message):
    __slots__ = ["entry"]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: _agent_messages_pb2.Entry
    def __init__(self, entry: _Optional[_Union[_agent_messages_pb2.Entry, _Mapping]] = ...) -> None: ...

class SteerRequest(_message.Message):
    __slots__ = ["content", "session_id"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ...) -> None: ...

class SteerResponse(_message.Message):
    __slots__ = ["queued"]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    queued: int
    def __init__(self, queued: _Optional[int] = ...) -> None: ...

class SubmitContextRequest(_message.Message):
    __slots__ = ["items", "request_id", "session_id"]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ContextSelection]
    request_id: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., items: _Optional[_Iterable[_Union[ContextSelection, _Mapping]]] = ...) -> None: ...

class SubmitContextResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SubmitHookResultRequest(_message.Message):
    __slots__ = ["arguments", "content", "decided_by", "details", "include_in_model_context", "instructions", "reason", "replace_details", "request_id", "session_id", "verdict"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_IN_MODEL_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REPLACE_DETAILS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    decided_by: str
    details: _struct_pb2.Value
    include_in_model_context: bool
    instructions: str
    reason: str
    replace_details: bool
    request_id: str
    session_id: str
    verdict: HookVerdict
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., verdict: _Optional[_Union[HookVerdict, str]] = ..., reason: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., details: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., replace_details: bool = ..., instructions: _Optional[str] = ..., include_in_model_context: bool = ..., decided_by: _Optional[str] = ...) -> None: ...

class SubmitHookResultResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SubmitToolResultRequest(_message.Message):
    __slots__ = ["content", "details", "is_error", "session_id", "tool_call_id"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    details: _struct_pb2.Value
    is_error: bool
    session_id: str
    tool_call_id: str
    def __init__(self, session_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., details: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., is_error: bool = ...) -> None: ...

class SubmitToolResultResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ToolSource(_message.Message):
    __slots__ = ["last_error", "name", "pid", "read_only", "restarts", "state", "tools", "transport"]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    last_error: str
    name: str
    pid: int
    read_only: bool
    restarts: int
    state: ToolSourceState
    tools: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.McpTool]
    transport: str
    def __init__(self, name: _Optional[str] = ..., transport: _Optional[str] = ..., state: _Optional[_Union[ToolSourceState, str]] = ..., last_error: _Optional[str] = ..., read_only: bool = ..., tools: _Optional[_Iterable[_Union[_agent_messages_pb2.McpTool, _Mapping]]] = ..., pid: _Optional[int] = ..., restarts: _Optional[int] = ...) -> None: ...

class TreeNode(_message.Message):
    __slots__ = ["id", "is_leaf", "kind", "label", "parent_id", "preview", "time"]
    ID_FIELD_NUMBER: _ClassVar[int]
    IS_LEAF_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    is_leaf: bool
    kind: str
    label: str
    parent_id: str
    preview: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., parent_id: _Optional[str] = ..., kind: _Optional[str] = ..., preview: _Optional[str] = ..., label: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., is_leaf: bool = ...) -> None: ...

class UpdateSessionRequest(_message.Message):
    __slots__ = ["config", "labels", "session_id", "title", "update_mask"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    config: _session_pb2.SessionConfig
    labels: _containers.ScalarMap[str, str]
    session_id: str
    title: str
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, session_id: _Optional[str] = ..., config: _Optional[_Union[_session_pb2.SessionConfig, _Mapping]] = ..., title: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class UpdateSessionResponse(_message.Message):
    __slots__ = ["entries", "session"]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.Entry]
    session: _session_pb2.Session
    def __init__(self, session: _Optional[_Union[_session_pb2.Session, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[_agent_messages_pb2.Entry, _Mapping]]] = ...) -> None: ...

class BusyPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class HookVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class InDoubtAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ToolSourceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
