from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
STOP_REASON_ABORTED: StopReason
STOP_REASON_ERROR: StopReason
STOP_REASON_LENGTH: StopReason
STOP_REASON_STOP: StopReason
STOP_REASON_TOOL_USE: StopReason
STOP_REASON_UNSPECIFIED: StopReason

class ContentBlock(_message.Message):
    __slots__ = ["image", "text", "thinking", "tool_call"]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    image: ImageContent
    text: TextContent
    thinking: ThinkingContent
    tool_call: ToolCall
    def __init__(self, text: _Optional[_Union[TextContent, _Mapping]] = ..., image: _Optional[_Union[ImageContent, _Mapping]] = ..., thinking: _Optional[_Union[ThinkingContent, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCall, _Mapping]] = ...) -> None: ...

class Cost(_message.Message):
    __slots__ = ["cache_read", "cache_write", "input", "output", "total"]
    CACHE_READ_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    cache_read: float
    cache_write: float
    input: float
    output: float
    total: float
    def __init__(self, input: _Optional[float] = ..., output: _Optional[float] = ..., cache_read: _Optional[float] = ..., cache_write: _Optional[float] = ..., total: _Optional[float] = ...) -> None: ...

class ImageContent(_message.Message):
    __slots__ = ["data", "mime_type"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class TextContent(_message.Message):
    __slots__ = ["text", "text_signature"]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    text: str
    text_signature: str
    def __init__(self, text: _Optional[str] = ..., text_signature: _Optional[str] = ...) -> None: ...

class ThinkingContent(_message.Message):
    __slots__ = ["redacted", "thinking", "thinking_signature"]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    THINKING_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    redacted: bool
    thinking: str
    thinking_signature: str
    def __init__(self, thinking: _Optional[str] = ..., thinking_signature: _Optional[str] = ..., redacted: bool = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ["arguments", "id", "name", "thought_signature"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    THOUGHT_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    id: str
    name: str
    thought_signature: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., thought_signature: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ["cache_read", "cache_write", "cost", "input", "output", "total_tokens"]
    CACHE_READ_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    cache_read: int
    cache_write: int
    cost: Cost
    input: int
    output: int
    total_tokens: int
    def __init__(self, input: _Optional[int] = ..., output: _Optional[int] = ..., cache_read: _Optional[int] = ..., cache_write: _Optional[int] = ..., total_tokens: _Optional[int] = ..., cost: _Optional[_Union[Cost, _Mapping]] = ...) -> None: ...

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
