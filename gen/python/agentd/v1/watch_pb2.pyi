from agentd.v1 import agent_messages_pb2 as _agent_messages_pb2
from agentd.v1 import events_pb2 as _events_pb2
from agentd.v1 import session_pb2 as _session_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
PENDING_INTERACTION_KIND_APPROVAL: PendingInteractionKind
PENDING_INTERACTION_KIND_CLIENT_TOOL: PendingInteractionKind
PENDING_INTERACTION_KIND_CONTEXT: PendingInteractionKind
PENDING_INTERACTION_KIND_HOOK: PendingInteractionKind
PENDING_INTERACTION_KIND_UNSPECIFIED: PendingInteractionKind

class EntriesAppended(_message.Message):
    __slots__ = ["entries"]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[_agent_messages_pb2.Entry]
    def __init__(self, entries: _Optional[_Iterable[_Union[_agent_messages_pb2.Entry, _Mapping]]] = ...) -> None: ...

class LabelChanged(_message.Message):
    __slots__ = ["entry_id", "label"]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    label: str
    def __init__(self, entry_id: _Optional[str] = ..., label: _Optional[str] = ...) -> None: ...

class ListPendingInteractionsRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListPendingInteractionsResponse(_message.Message):
    __slots__ = ["cursor", "interactions"]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    INTERACTIONS_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    interactions: _containers.RepeatedCompositeFieldContainer[PendingInteraction]
    def __init__(self, interactions: _Optional[_Iterable[_Union[PendingInteraction, _Mapping]]] = ..., cursor: _Optional[str] = ...) -> None: ...

class PendingInteraction(_message.Message):
    __slots__ = ["deadline", "id", "kind", "request", "run_id", "session_id"]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    deadline: _timestamp_pb2.Timestamp
    id: str
    kind: PendingInteractionKind
    request: _events_pb2.AgentEvent
    run_id: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., run_id: _Optional[str] = ..., kind: _Optional[_Union[PendingInteractionKind, str]] = ..., id: _Optional[str] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., request: _Optional[_Union[_events_pb2.AgentEvent, _Mapping]] = ...) -> None: ...

class PendingInteractionsEvent(_message.Message):
    __slots__ = ["added", "cursor", "removed", "resync", "started"]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    RESYNC_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    added: PendingInteraction
    cursor: str
    removed: PendingInteraction
    resync: WatchResync
    started: WatchStarted
    def __init__(self, cursor: _Optional[str] = ..., started: _Optional[_Union[WatchStarted, _Mapping]] = ..., added: _Optional[_Union[PendingInteraction, _Mapping]] = ..., removed: _Optional[_Union[PendingInteraction, _Mapping]] = ..., resync: _Optional[_Union[WatchResync, _Mapping]] = ...) -> None: ...

class RunEnded(_message.Message):
    __slots__ = ["outcome", "run_id"]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    outcome: _events_pb2.RunOutcome
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., outcome: _Optional[_Union[_events_pb2.RunOutcome, str]] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ["run_id"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class RunStateChanged(_message.Message):
    __slots__ = ["outcome", "run_id", "state"]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    outcome: _events_pb2.RunOutcome
    run_id: str
    state: _session_pb2.SessionState
    def __init__(self, state: _Optional[_Union[_session_pb2.SessionState, str]] = ..., run_id: _Optional[str] = ..., outcome: _Optional[_Union[_events_pb2.RunOutcome, str]] = ...) -> None: ...

class SessionDeleted(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SessionWatchEvent(_message.Message):
    __slots__ = ["cursor", "deleted", "entries_appended", "event", "label_changed", "resync", "run_ended", "run_started", "session_id", "session_updated", "started", "time"]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_APPENDED_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    LABEL_CHANGED_FIELD_NUMBER: _ClassVar[int]
    RESYNC_FIELD_NUMBER: _ClassVar[int]
    RUN_ENDED_FIELD_NUMBER: _ClassVar[int]
    RUN_STARTED_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_UPDATED_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    deleted: SessionDeleted
    entries_appended: EntriesAppended
    event: _events_pb2.AgentEvent
    label_changed: LabelChanged
    resync: WatchResync
    run_ended: RunEnded
    run_started: RunStarted
    session_id: str
    session_updated: _session_pb2.Session
    started: WatchStarted
    time: _timestamp_pb2.Timestamp
    def __init__(self, cursor: _Optional[str] = ..., session_id: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., started: _Optional[_Union[WatchStarted, _Mapping]] = ..., run_started: _Optional[_Union[RunStarted, _Mapping]] = ..., event: _Optional[_Union[_events_pb2.AgentEvent, _Mapping]] = ..., run_ended: _Optional[_Union[RunEnded, _Mapping]] = ..., session_updated: _Optional[_Union[_session_pb2.Session, _Mapping]] = ..., entries_appended: _Optional[_Union[EntriesAppended, _Mapping]] = ..., label_changed: _Optional[_Union[LabelChanged, _Mapping]] = ..., deleted: _Optional[_Union[SessionDeleted, _Mapping]] = ..., resync: _Optional[_Union[WatchResync, _Mapping]] = ...) -> None: ...

class SessionsWatchEvent(_message.Message):
    __slots__ = ["created", "cursor", "deleted", "resync", "run_state", "session_id", "started", "time", "updated"]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    RESYNC_FIELD_NUMBER: _ClassVar[int]
    RUN_STATE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    created: _session_pb2.Session
    cursor: str
    deleted: SessionDeleted
    resync: WatchResync
    run_state: RunStateChanged
    session_id: str
    started: WatchStarted
    time: _timestamp_pb2.Timestamp
    updated: _session_pb2.Session
    def __init__(self, cursor: _Optional[str] = ..., session_id: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., started: _Optional[_Union[WatchStarted, _Mapping]] = ..., created: _Optional[_Union[_session_pb2.Session, _Mapping]] = ..., updated: _Optional[_Union[_session_pb2.Session, _Mapping]] = ..., run_state: _Optional[_Union[RunStateChanged, _Mapping]] = ..., deleted: _Optional[_Union[SessionDeleted, _Mapping]] = ..., resync: _Optional[_Union[WatchResync, _Mapping]] = ...) -> None: ...

class WatchPendingInteractionsRequest(_message.Message):
    __slots__ = ["cursor", "session_id"]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., cursor: _Optional[str] = ...) -> None: ...

class WatchResync(_message.Message):
    __slots__ = ["cursor", "reason"]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    reason: str
    def __init__(self, cursor: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WatchSessionRequest(_message.Message):
    __slots__ = ["cursor", "session_id"]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., cursor: _Optional[str] = ...) -> None: ...

class WatchSessionsRequest(_message.Message):
    __slots__ = ["cursor", "label_filter"]
    class LabelFilterEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LABEL_FILTER_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    label_filter: _containers.ScalarMap[str, str]
    def __init__(self, label_filter: _Optional[_Mapping[str, str]] = ..., cursor: _Optional[str] = ...) -> None: ...

class WatchStarted(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class PendingInteractionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
