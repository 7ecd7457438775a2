from agentd.v1 import content_pb2 as _content_pb2
from agentd.v1 import messages_pb2 as _messages_pb2
from google.protobuf import any_pb2 as _any_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

APPROVAL_DECISION_ALLOWED: ApprovalDecision
APPROVAL_DECISION_DENIED: ApprovalDecision
APPROVAL_DECISION_TIMED_OUT: ApprovalDecision
APPROVAL_DECISION_UNSPECIFIED: ApprovalDecision
APPROVAL_SCOPE_CALL: ApprovalScope
APPROVAL_SCOPE_RUN: ApprovalScope
APPROVAL_SCOPE_SESSION: ApprovalScope
APPROVAL_SCOPE_UNSPECIFIED: ApprovalScope
COMPACTION_REASON_MANUAL: CompactionReason
COMPACTION_REASON_OVERFLOW: CompactionReason
COMPACTION_REASON_THRESHOLD: CompactionReason
COMPACTION_REASON_UNSPECIFIED: CompactionReason
DESCRIPTOR: _descriptor.FileDescriptor
HOOK_ACTION_ARGUMENTS_REPLACED: HookAction
HOOK_ACTION_CONTEXT_ADDED: HookAction
HOOK_ACTION_CONTINUED: HookAction
HOOK_ACTION_DENIED: HookAction
HOOK_ACTION_INSTRUCTIONS_SUPPLIED: HookAction
HOOK_ACTION_RESULT_REDACTED: HookAction
HOOK_ACTION_RESULT_REPLACED: HookAction
HOOK_ACTION_TIMED_OUT: HookAction
HOOK_ACTION_UNSPECIFIED: HookAction
HOOK_EVENT_POST_TOOL_USE: HookEvent
HOOK_EVENT_PRE_COMPACT: HookEvent
HOOK_EVENT_PRE_TOOL_USE: HookEvent
HOOK_EVENT_STOP: HookEvent
HOOK_EVENT_UNSPECIFIED: HookEvent
HOOK_EVENT_USER_PROMPT: HookEvent
THINKING_LEVEL_HIGH: ThinkingLevel
THINKING_LEVEL_LOW: ThinkingLevel
THINKING_LEVEL_MEDIUM: ThinkingLevel
THINKING_LEVEL_MINIMAL: ThinkingLevel
THINKING_LEVEL_OFF: ThinkingLevel
THINKING_LEVEL_UNSPECIFIED: ThinkingLevel
THINKING_LEVEL_XHIGH: ThinkingLevel

class AgentMessage(_message.Message):
    __slots__ = ["approval_notice", "assistant", "bash_execution", "branch_summary", "compaction_summary", "custom", "extension", "hook_notice", "tool_result", "user"]
    APPROVAL_NOTICE_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_FIELD_NUMBER: _ClassVar[int]
    BASH_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    BRANCH_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELD_NUMBER: _ClassVar[int]
    EXTENSION_FIELD_NUMBER: _ClassVar[int]
    HOOK_NOTICE_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    approval_notice: ApprovalNotice
    assistant: _messages_pb2.AssistantMessage
    bash_execution: BashExecution
    branch_summary: BranchSummary
    compaction_summary: CompactionSummary
    custom: CustomMessage
    extension: Extension
    hook_notice: HookNotice
    tool_result: _messages_pb2.ToolResultMessage
    user: _messages_pb2.UserMessage
    def __init__(self, user: _Optional[_Union[_messages_pb2.UserMessage, _Mapping]] = ..., assistant: _Optional[_Union[_messages_pb2.AssistantMessage, _Mapping]] = ..., tool_result: _Optional[_Union[_messages_pb2.ToolResultMessage, _Mapping]] = ..., approval_notice: _Optional[_Union[ApprovalNotice, _Mapping]] = ..., bash_execution: _Optional[_Union[BashExecution, _Mapping]] = ..., custom: _Optional[_Union[CustomMessage, _Mapping]] = ..., branch_summary: _Optional[_Union[BranchSummary, _Mapping]] = ..., compaction_summary: _Optional[_Union[CompactionSummary, _Mapping]] = ..., extension: _Optional[_Union[Extension, _Mapping]] = ..., hook_notice: _Optional[_Union[HookNotice, _Mapping]] = ...) -> None: ...

class ApprovalNotice(_message.Message):
    __slots__ = ["arguments_edited", "decided_by", "decision", "include_in_model_context", "reason", "rule", "scope", "timestamp", "tool_call_id", "tool_name", "visible_in_ui"]
    ARGUMENTS_EDITED_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_IN_MODEL_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_IN_UI_FIELD_NUMBER: _ClassVar[int]
    arguments_edited: bool
    decided_by: str
    decision: ApprovalDecision
    include_in_model_context: bool
    reason: str
    rule: ApprovalRule
    scope: ApprovalScope
    timestamp: _timestamp_pb2.Timestamp
    tool_call_id: str
    tool_name: str
    visible_in_ui: bool
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., decision: _Optional[_Union[ApprovalDecision, str]] = ..., reason: _Optional[str] = ..., decided_by: _Optional[str] = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., visible_in_ui: bool = ..., include_in_model_context: bool = ..., rule: _Optional[_Union[ApprovalRule, _Mapping]] = ..., scope: _Optional[_Union[ApprovalScope, str]] = ..., arguments_edited: bool = ...) -> None: ...

class ApprovalRule(_message.Message):
    __slots__ = ["command_prefix", "created", "created_by", "decision", "id", "path_glob", "reason", "tool_name"]
    COMMAND_PREFIX_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    PATH_GLOB_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    command_prefix: str
    created: _timestamp_pb2.Timestamp
    created_by: str
    decision: ApprovalDecision
    id: str
    path_glob: str
    reason: str
    tool_name: str
    def __init__(self, id: _Optional[str] = ..., tool_name: _Optional[str] = ..., command_prefix: _Optional[str] = ..., path_glob: _Optional[str] = ..., decision: _Optional[_Union[ApprovalDecision, str]] = ..., created_by: _Optional[str] = ..., created: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class ApprovalRuleRemoval(_message.Message):
    __slots__ = ["rule_id", "tenant"]
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    rule_id: str
    tenant: str
    def __init__(self, rule_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class BashExecution(_message.Message):
    __slots__ = ["cancelled", "command", "exit_code", "full_output_path", "include_in_model_context", "output", "timestamp", "truncated", "visible_in_ui"]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    FULL_OUTPUT_PATH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_IN_MODEL_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_IN_UI_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    command: str
    exit_code: int
    full_output_path: str
    include_in_model_context: bool
    output: str
    timestamp: _timestamp_pb2.Timestamp
    truncated: bool
    visible_in_ui: bool
    def __init__(self, command: _Optional[str] = ..., output: _Optional[str] = ..., exit_code: _Optional[int] = ..., cancelled: bool = ..., truncated: bool = ..., full_output_path: _Optional[str] = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., visible_in_ui: bool = ..., include_in_model_context: bool = ...) -> None: ...

class BranchSummary(_message.Message):
    __slots__ = ["from_entry_id", "summary", "timestamp"]
    FROM_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    from_entry_id: str
    summary: str
    timestamp: _timestamp_pb2.Timestamp
    def __init__(self, summary: _Optional[str] = ..., from_entry_id: _Optional[str] = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CompactionSummary(_message.Message):
    __slots__ = ["first_kept_entry_id", "modified_files", "read_files", "reason", "summary", "timestamp", "tokens_after", "tokens_before"]
    FIRST_KEPT_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_FILES_FIELD_NUMBER: _ClassVar[int]
    READ_FILES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    first_kept_entry_id: str
    modified_files: _containers.RepeatedScalarFieldContainer[str]
    read_files: _containers.RepeatedScalarFieldContainer[str]
    reason: CompactionReason
    summary: str
    timestamp: _timestamp_pb2.Timestamp
    tokens_after: int
    tokens_before: int
    def __init__(self, summary: _Optional[str] = ..., first_kept_entry_id: _Optional[str] = ..., tokens_before: _Optional[int] = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., tokens_after: _Optional[int] = ..., reason: _Optional[_Union[CompactionReason, str]] = ..., read_files: _Optional[_Iterable[str]] = ..., modified_files: _Optional[_Iterable[str]] = ...) -> None: ...

class CustomMessage(_message.Message):
    __slots__ = ["content", "custom_type", "details", "include_in_model_context", "timestamp", "visible_in_ui"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_TYPE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_IN_MODEL_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_IN_UI_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    custom_type: str
    details: _struct_pb2.Value
    include_in_model_context: bool
    timestamp: _timestamp_pb2.Timestamp
    visible_in_ui: bool
    def __init__(self, custom_type: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., details: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., visible_in_ui: bool = ..., include_in_model_context: bool = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ["approval_rule", "approval_rule_removal", "id", "label", "mcp_tools", "message", "model_change", "parent_id", "redaction", "redaction_notice", "run_id", "thinking_level_change", "time", "tool_call_started", "tool_in_doubt"]
    APPROVAL_RULE_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_RULE_REMOVAL_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    MCP_TOOLS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_CHANGE_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    REDACTION_FIELD_NUMBER: _ClassVar[int]
    REDACTION_NOTICE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THINKING_LEVEL_CHANGE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_IN_DOUBT_FIELD_NUMBER: _ClassVar[int]
    approval_rule: ApprovalRule
    approval_rule_removal: ApprovalRuleRemoval
    id: str
    label: Label
    mcp_tools: McpToolsSnapshot
    message: AgentMessage
    model_change: ModelChange
    parent_id: str
    redaction: Redaction
    redaction_notice: RedactionNotice
    run_id: str
    thinking_level_change: ThinkingLevelChange
    time: _timestamp_pb2.Timestamp
    tool_call_started: ToolCallStarted
    tool_in_doubt: ToolInDoubt
    def __init__(self, id: _Optional[str] = ..., parent_id: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., run_id: _Optional[str] = ..., redaction: _Optional[_Union[Redaction, _Mapping]] = ..., message: _Optional[_Union[AgentMessage, _Mapping]] = ..., model_change: _Optional[_Union[ModelChange, _Mapping]] = ..., thinking_level_change: _Optional[_Union[ThinkingLevelChange, _Mapping]] = ..., label: _Optional[_Union[Label, _Mapping]] = ..., mcp_tools: _Optional[_Union[McpToolsSnapshot, _Mapping]] = ..., redaction_notice: _Optional[_Union[RedactionNotice, _Mapping]] = ..., approval_rule: _Optional[_Union[ApprovalRule, _Mapping]] = ..., approval_rule_removal: _Optional[_Union[ApprovalRuleRemoval, _Mapping]] = ..., tool_call_started: _Optional[_Union[ToolCallStarted, _Mapping]] = ..., tool_in_doubt: _Optional[_Union[ToolInDoubt, _Mapping]] = ...) -> None: ...

class Extension(_message.Message):
    __slots__ = ["include_in_model_context", "model_content", "payload", "timestamp", "visible_in_ui"]
    INCLUDE_IN_MODEL_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MODEL_CONTENT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_IN_UI_FIELD_NUMBER: _ClassVar[int]
    include_in_model_context: bool
    model_content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    payload: _any_pb2.Any
    timestamp: _timestamp_pb2.Timestamp
    visible_in_ui: bool
    def __init__(self, payload: _Optional[_Union[_any_pb2.Any, _Mapping]] = ..., model_content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., visible_in_ui: bool = ..., include_in_model_context: bool = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class HookNotice(_message.Message):
    __slots__ = ["action", "content", "decided_by", "event", "hook", "include_in_model_context", "reason", "request_id", "timestamp", "tool_call_id", "tool_name", "visible_in_ui"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    HOOK_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_IN_MODEL_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_IN_UI_FIELD_NUMBER: _ClassVar[int]
    action: HookAction
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    decided_by: str
    event: HookEvent
    hook: str
    include_in_model_context: bool
    reason: str
    request_id: str
    timestamp: _timestamp_pb2.Timestamp
    tool_call_id: str
    tool_name: str
    visible_in_ui: bool
    def __init__(self, request_id: _Optional[str] = ..., event: _Optional[_Union[HookEvent, str]] = ..., hook: _Optional[str] = ..., action: _Optional[_Union[HookAction, str]] = ..., reason: _Optional[str] = ..., decided_by: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., visible_in_ui: bool = ..., include_in_model_context: bool = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ...) -> None: ...

class Label(_message.Message):
    __slots__ = ["label", "target_entry_id"]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    TARGET_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    label: str
    target_entry_id: str
    def __init__(self, target_entry_id: _Optional[str] = ..., label: _Optional[str] = ...) -> None: ...

class McpTool(_message.Message):
    __slots__ = ["description", "input_schema", "name", "read_only_hint", "title"]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_HINT_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    description: str
    input_schema: _struct_pb2.Struct
    name: str
    read_only_hint: bool
    title: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., title: _Optional[str] = ..., read_only_hint: bool = ...) -> None: ...

class McpToolsSnapshot(_message.Message):
    __slots__ = ["server", "tools"]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    server: str
    tools: _containers.RepeatedCompositeFieldContainer[McpTool]
    def __init__(self, server: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[McpTool, _Mapping]]] = ...) -> None: ...

class ModelChange(_message.Message):
    __slots__ = ["model_id", "provider"]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    provider: str
    def __init__(self, provider: _Optional[str] = ..., model_id: _Optional[str] = ...) -> None: ...

class Redaction(_message.Message):
    __slots__ = ["reason", "redacted_by", "time"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REDACTED_BY_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    reason: str
    redacted_by: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., redacted_by: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RedactionNotice(_message.Message):
    __slots__ = ["entry_ids", "reason", "redacted_by", "tenant"]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REDACTED_BY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    entry_ids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    redacted_by: str
    tenant: str
    def __init__(self, entry_ids: _Optional[_Iterable[str]] = ..., redacted_by: _Optional[str] = ..., reason: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class ThinkingLevelChange(_message.Message):
    __slots__ = ["thinking_level"]
    THINKING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    thinking_level: ThinkingLevel
    def __init__(self, thinking_level: _Optional[_Union[ThinkingLevel, str]] = ...) -> None: ...

class ToolCallStarted(_message.Message):
    __slots__ = ["arguments", "idempotency_key", "tool_call_id", "tool_name"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    idempotency_key: str
    tool_call_id: str
    tool_name: str
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolInDoubt(_message.Message):
    __slots__ = ["arguments", "idempotency_key", "run_id", "start_entry_id", "tool_call_id", "tool_name"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    START_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    idempotency_key: str
    run_id: str
    start_entry_id: str
    tool_call_id: str
    tool_name: str
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., run_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., start_entry_id: _Optional[str] = ...) -> None: ...

class ApprovalDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ApprovalScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class HookEvent(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class HookAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class CompactionReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ThinkingLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
