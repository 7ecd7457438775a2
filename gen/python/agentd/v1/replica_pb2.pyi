from agentd.v1 import agent_messages_pb2 as _agent_messages_pb2
from agentd.v1 import content_pb2 as _content_pb2
from agentd.v1 import service_pb2 as _service_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicaApproval(_message.Message):
    __slots__ = ["allowed", "arguments", "decided_by", "reason", "rule", "scope", "tool_call_id", "tool_call_ids"]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    allowed: bool
    arguments: _struct_pb2.Struct
    decided_by: str
    reason: str
    rule: _agent_messages_pb2.ApprovalRule
    scope: _agent_messages_pb2.ApprovalScope
    tool_call_id: str
    tool_call_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tool_call_id: _Optional[str] = ..., allowed: bool = ..., reason: _Optional[str] = ..., decided_by: _Optional[str] = ..., scope: _Optional[_Union[_agent_messages_pb2.ApprovalScope, str]] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., rule: _Optional[_Union[_agent_messages_pb2.ApprovalRule, _Mapping]] = ..., tool_call_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ReplicaContextAnswer(_message.Message):
    __slots__ = ["refused", "request_id", "selections"]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SELECTIONS_FIELD_NUMBER: _ClassVar[int]
    refused: str
    request_id: str
    selections: _containers.RepeatedCompositeFieldContainer[_service_pb2.ContextSelection]
    def __init__(self, request_id: _Optional[str] = ..., selections: _Optional[_Iterable[_Union[_service_pb2.ContextSelection, _Mapping]]] = ..., refused: _Optional[str] = ...) -> None: ...

class ReplicaControl(_message.Message):
    __slots__ = ["abort", "approval", "clear_queue", "context", "follow_up", "hook", "run_id", "session_id", "steer", "tool_result"]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    CLEAR_QUEUE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_UP_FIELD_NUMBER: _ClassVar[int]
    HOOK_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STEER_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    abort: str
    approval: ReplicaApproval
    clear_queue: _service_pb2.ClearQueueRequest
    context: ReplicaContextAnswer
    follow_up: _agent_messages_pb2.AgentMessage
    hook: _service_pb2.SubmitHookResultRequest
    run_id: str
    session_id: str
    steer: _agent_messages_pb2.AgentMessage
    tool_result: ReplicaToolResult
    def __init__(self, session_id: _Optional[str] = ..., run_id: _Optional[str] = ..., steer: _Optional[_Union[_agent_messages_pb2.AgentMessage, _Mapping]] = ..., follow_up: _Optional[_Union[_agent_messages_pb2.AgentMessage, _Mapping]] = ..., abort: _Optional[str] = ..., tool_result: _Optional[_Union[ReplicaToolResult, _Mapping]] = ..., approval: _Optional[_Union[ReplicaApproval, _Mapping]] = ..., context: _Optional[_Union[ReplicaContextAnswer, _Mapping]] = ..., hook: _Optional[_Union[_service_pb2.SubmitHookResultRequest, _Mapping]] = ..., clear_queue: _Optional[_Union[_service_pb2.ClearQueueRequest, _Mapping]] = ...) -> None: ...

class ReplicaControlAnswer(_message.Message):
    __slots__ = ["cleared", "error_field", "error_message", "error_metadata", "error_reason", "queued", "rule", "run_id"]
    class ErrorMetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_METADATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    cleared: _service_pb2.ClearQueueResponse
    error_field: str
    error_message: str
    error_metadata: _containers.ScalarMap[str, str]
    error_reason: _service_pb2.ErrorReason
    queued: int
    rule: _agent_messages_pb2.ApprovalRule
    run_id: str
    def __init__(self, error_message: _Optional[str] = ..., error_field: _Optional[str] = ..., queued: _Optional[int] = ..., run_id: _Optional[str] = ..., error_reason: _Optional[_Union[_service_pb2.ErrorReason, str]] = ..., error_metadata: _Optional[_Mapping[str, str]] = ..., rule: _Optional[_Union[_agent_messages_pb2.ApprovalRule, _Mapping]] = ..., cleared: _Optional[_Union[_service_pb2.ClearQueueResponse, _Mapping]] = ...) -> None: ...

class ReplicaToolResult(_message.Message):
    __slots__ = ["content", "details", "is_error", "tool_call_id"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    details: _struct_pb2.Value
    is_error: bool
    tool_call_id: str
    def __init__(self, tool_call_id: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., details: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., is_error: bool = ...) -> None: ...
