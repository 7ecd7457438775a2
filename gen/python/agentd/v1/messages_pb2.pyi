from agentd.v1 import content_pb2 as _content_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AssistantMessage(_message.Message):
    __slots__ = ["api", "content", "error_message", "model", "provider", "response_id", "stop_reason", "structured_output", "timestamp", "usage"]
    API_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    api: str
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    error_message: str
    model: str
    provider: str
    response_id: str
    stop_reason: _content_pb2.StopReason
    structured_output: _struct_pb2.Struct
    timestamp: _timestamp_pb2.Timestamp
    usage: _content_pb2.Usage
    def __init__(self, content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., api: _Optional[str] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., usage: _Optional[_Union[_content_pb2.Usage, _Mapping]] = ..., stop_reason: _Optional[_Union[_content_pb2.StopReason, str]] = ..., error_message: _Optional[str] = ..., response_id: _Optional[str] = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., structured_output: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ["assistant", "tool_result", "user"]
    ASSISTANT_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    assistant: AssistantMessage
    tool_result: ToolResultMessage
    user: UserMessage
    def __init__(self, user: _Optional[_Union[UserMessage, _Mapping]] = ..., assistant: _Optional[_Union[AssistantMessage, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResultMessage, _Mapping]] = ...) -> None: ...

class ToolResultMessage(_message.Message):
    __slots__ = ["content", "details", "is_error", "timestamp", "tool_call_id", "tool_name"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    details: _struct_pb2.Value
    is_error: bool
    timestamp: _timestamp_pb2.Timestamp
    tool_call_id: str
    tool_name: str
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., details: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., is_error: bool = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UserMessage(_message.Message):
    __slots__ = ["content", "timestamp"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[_content_pb2.ContentBlock]
    timestamp: _timestamp_pb2.Timestamp
    def __init__(self, content: _Optional[_Iterable[_Union[_content_pb2.ContentBlock, _Mapping]]] = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
