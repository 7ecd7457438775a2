from agentd.v1 import agent_messages_pb2 as _agent_messages_pb2
from agentd.v1 import messages_pb2 as _messages_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

APPROVAL_POLICY_ALLOW: ApprovalPolicy
APPROVAL_POLICY_ASK: ApprovalPolicy
APPROVAL_POLICY_DENY: ApprovalPolicy
APPROVAL_POLICY_UNSPECIFIED: ApprovalPolicy
DESCRIPTOR: _descriptor.FileDescriptor
HOOK_TIMEOUT_ACTION_DENY: HookTimeoutAction
HOOK_TIMEOUT_ACTION_PROCEED: HookTimeoutAction
HOOK_TIMEOUT_ACTION_UNSPECIFIED: HookTimeoutAction
MESSAGE_KIND_APPROVAL_NOTICE: MessageKind
MESSAGE_KIND_ASSISTANT: MessageKind
MESSAGE_KIND_BASH_EXECUTION: MessageKind
MESSAGE_KIND_BRANCH_SUMMARY: MessageKind
MESSAGE_KIND_COMPACTION_SUMMARY: MessageKind
MESSAGE_KIND_CUSTOM: MessageKind
MESSAGE_KIND_EXTENSION: MessageKind
MESSAGE_KIND_HOOK_NOTICE: MessageKind
MESSAGE_KIND_TOOL_RESULT: MessageKind
MESSAGE_KIND_UNSPECIFIED: MessageKind
MESSAGE_KIND_USER: MessageKind
MODALITY_IMAGE: Modality
MODALITY_TEXT: Modality
MODALITY_UNSPECIFIED: Modality
QUEUE_MODE_ALL: QueueMode
QUEUE_MODE_ONE_AT_A_TIME: QueueMode
QUEUE_MODE_UNSPECIFIED: QueueMode
SANDBOX_NETWORK_ALLOWED: SandboxNetwork
SANDBOX_NETWORK_NONE: SandboxNetwork
SANDBOX_NETWORK_UNSPECIFIED: SandboxNetwork
SESSION_STATE_IDLE: SessionState
SESSION_STATE_RUNNING: SessionState
SESSION_STATE_UNSPECIFIED: SessionState
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
TOOL_CHOICE_MODE_TOOL: ToolChoiceMode
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_EXECUTION_MODE_PARALLEL: ToolExecutionMode
TOOL_EXECUTION_MODE_SEQUENTIAL: ToolExecutionMode
TOOL_EXECUTION_MODE_UNSPECIFIED: ToolExecutionMode
TOOL_EXECUTOR_CLIENT: ToolExecutor
TOOL_EXECUTOR_SERVER: ToolExecutor
TOOL_EXECUTOR_UNSPECIFIED: ToolExecutor

class Budget(_message.Message):
    __slots__ = ["max_cost_usd", "max_run_time", "max_tokens", "max_turns_per_run"]
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    MAX_RUN_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_PER_RUN_FIELD_NUMBER: _ClassVar[int]
    max_cost_usd: float
    max_run_time: _duration_pb2.Duration
    max_tokens: int
    max_turns_per_run: int
    def __init__(self, max_cost_usd: _Optional[float] = ..., max_tokens: _Optional[int] = ..., max_turns_per_run: _Optional[int] = ..., max_run_time: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CapImagesRule(_message.Message):
    __slots__ = ["max_images"]
    MAX_IMAGES_FIELD_NUMBER: _ClassVar[int]
    max_images: int
    def __init__(self, max_images: _Optional[int] = ...) -> None: ...

class CompactionSettings(_message.Message):
    __slots__ = ["disable_auto", "disable_overflow_recovery", "keep_recent_tokens", "model", "reserve_tokens"]
    DISABLE_AUTO_FIELD_NUMBER: _ClassVar[int]
    DISABLE_OVERFLOW_RECOVERY_FIELD_NUMBER: _ClassVar[int]
    KEEP_RECENT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESERVE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    disable_auto: bool
    disable_overflow_recovery: bool
    keep_recent_tokens: int
    model: ModelRef
    reserve_tokens: int
    def __init__(self, disable_auto: bool = ..., reserve_tokens: _Optional[int] = ..., keep_recent_tokens: _Optional[int] = ..., model: _Optional[_Union[ModelRef, _Mapping]] = ..., disable_overflow_recovery: bool = ...) -> None: ...

class Context(_message.Message):
    __slots__ = ["messages", "system_prompt", "tools"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    system_prompt: str
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    def __init__(self, system_prompt: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ...) -> None: ...

class ContextBlock(_message.Message):
    __slots__ = ["name", "text"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    name: str
    text: str
    def __init__(self, name: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class ContextHook(_message.Message):
    __slots__ = ["include_messages", "timeout"]
    INCLUDE_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    include_messages: bool
    timeout: _duration_pb2.Duration
    def __init__(self, timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., include_messages: bool = ...) -> None: ...

class ContextPolicy(_message.Message):
    __slots__ = ["rules"]
    RULES_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[ContextRule]
    def __init__(self, rules: _Optional[_Iterable[_Union[ContextRule, _Mapping]]] = ...) -> None: ...

class ContextRule(_message.Message):
    __slots__ = ["cap_images", "drop_kinds", "elide_tool_results", "token_budget"]
    CAP_IMAGES_FIELD_NUMBER: _ClassVar[int]
    DROP_KINDS_FIELD_NUMBER: _ClassVar[int]
    ELIDE_TOOL_RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    cap_images: CapImagesRule
    drop_kinds: DropKindsRule
    elide_tool_results: ElideToolResultsRule
    token_budget: TokenBudgetRule
    def __init__(self, token_budget: _Optional[_Union[TokenBudgetRule, _Mapping]] = ..., elide_tool_results: _Optional[_Union[ElideToolResultsRule, _Mapping]] = ..., drop_kinds: _Optional[_Union[DropKindsRule, _Mapping]] = ..., cap_images: _Optional[_Union[CapImagesRule, _Mapping]] = ...) -> None: ...

class DropKindsRule(_message.Message):
    __slots__ = ["kinds"]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    kinds: _containers.RepeatedScalarFieldContainer[MessageKind]
    def __init__(self, kinds: _Optional[_Iterable[_Union[MessageKind, str]]] = ...) -> None: ...

class ElideToolResultsRule(_message.Message):
    __slots__ = ["keep_turns"]
    KEEP_TURNS_FIELD_NUMBER: _ClassVar[int]
    keep_turns: int
    def __init__(self, keep_turns: _Optional[int] = ...) -> None: ...

class FauxScript(_message.Message):
    __slots__ = ["context_window", "echo", "responses", "structured_output_tool", "summaries", "tokens_per_second"]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    ECHO_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_TOOL_FIELD_NUMBER: _ClassVar[int]
    SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    context_window: int
    echo: bool
    responses: _containers.RepeatedCompositeFieldContainer[_messages_pb2.AssistantMessage]
    structured_output_tool: bool
    summaries: _containers.RepeatedScalarFieldContainer[str]
    tokens_per_second: int
    def __init__(self, responses: _Optional[_Iterable[_Union[_messages_pb2.AssistantMessage, _Mapping]]] = ..., echo: bool = ..., tokens_per_second: _Optional[int] = ..., context_window: _Optional[int] = ..., summaries: _Optional[_Iterable[str]] = ..., structured_output_tool: bool = ...) -> None: ...

class Hook(_message.Message):
    __slots__ = ["event", "max_continuations", "name", "on_timeout", "timeout", "tool_pattern"]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTINUATIONS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ON_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TOOL_PATTERN_FIELD_NUMBER: _ClassVar[int]
    event: _agent_messages_pb2.HookEvent
    max_continuations: int
    name: str
    on_timeout: HookTimeoutAction
    timeout: _duration_pb2.Duration
    tool_pattern: str
    def __init__(self, event: _Optional[_Union[_agent_messages_pb2.HookEvent, str]] = ..., tool_pattern: _Optional[str] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., on_timeout: _Optional[_Union[HookTimeoutAction, str]] = ..., name: _Optional[str] = ..., max_continuations: _Optional[int] = ...) -> None: ...

class McpServer(_message.Message):
    __slots__ = ["approval", "name", "tool_approval", "tools"]
    class ToolApprovalEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ApprovalPolicy
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ApprovalPolicy, str]] = ...) -> None: ...
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    approval: ApprovalPolicy
    name: str
    tool_approval: _containers.ScalarMap[str, ApprovalPolicy]
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., approval: _Optional[_Union[ApprovalPolicy, str]] = ..., tool_approval: _Optional[_Mapping[str, ApprovalPolicy]] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ["api", "configured", "context_window", "input_modalities", "max_output_tokens", "metadata", "name", "price", "reasoning", "ref"]
    API_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    INPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRICE_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    api: str
    configured: bool
    context_window: int
    input_modalities: _containers.RepeatedScalarFieldContainer[Modality]
    max_output_tokens: int
    metadata: _struct_pb2.Struct
    name: str
    price: ModelPrice
    reasoning: bool
    ref: ModelRef
    def __init__(self, ref: _Optional[_Union[ModelRef, _Mapping]] = ..., name: _Optional[str] = ..., api: _Optional[str] = ..., context_window: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., input_modalities: _Optional[_Iterable[_Union[Modality, str]]] = ..., reasoning: bool = ..., price: _Optional[_Union[ModelPrice, _Mapping]] = ..., configured: bool = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ModelPrice(_message.Message):
    __slots__ = ["cache_read", "cache_write", "input", "output"]
    CACHE_READ_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    cache_read: float
    cache_write: float
    input: float
    output: float
    def __init__(self, input: _Optional[float] = ..., output: _Optional[float] = ..., cache_read: _Optional[float] = ..., cache_write: _Optional[float] = ...) -> None: ...

class ModelRef(_message.Message):
    __slots__ = ["id", "provider"]
    ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    id: str
    provider: str
    def __init__(self, provider: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class ModelSettings(_message.Message):
    __slots__ = ["max_output_tokens", "provider_options", "stop_sequences", "temperature", "tool_choice", "top_p"]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    max_output_tokens: int
    provider_options: _struct_pb2.Struct
    stop_sequences: _containers.RepeatedScalarFieldContainer[str]
    temperature: float
    tool_choice: ToolChoice
    top_p: float
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., stop_sequences: _Optional[_Iterable[str]] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SandboxSettings(_message.Message):
    __slots__ = ["network", "writable_paths"]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_PATHS_FIELD_NUMBER: _ClassVar[int]
    network: SandboxNetwork
    writable_paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, network: _Optional[_Union[SandboxNetwork, str]] = ..., writable_paths: _Optional[_Iterable[str]] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ["active_run_id", "config", "create_time", "id", "labels", "leaf_entry_id", "origin", "spent", "state", "title", "tool_sandbox", "update_time"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTIVE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LEAF_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    SPENT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TOOL_SANDBOX_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    active_run_id: str
    config: SessionConfig
    create_time: _timestamp_pb2.Timestamp
    id: str
    labels: _containers.ScalarMap[str, str]
    leaf_entry_id: str
    origin: SessionOrigin
    spent: Spend
    state: SessionState
    title: str
    tool_sandbox: ToolSandbox
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., config: _Optional[_Union[SessionConfig, _Mapping]] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., leaf_entry_id: _Optional[str] = ..., state: _Optional[_Union[SessionState, str]] = ..., active_run_id: _Optional[str] = ..., origin: _Optional[_Union[SessionOrigin, _Mapping]] = ..., spent: _Optional[_Union[Spend, _Mapping]] = ..., tool_sandbox: _Optional[_Union[ToolSandbox, _Mapping]] = ...) -> None: ...

class SessionConfig(_message.Message):
    __slots__ = ["approval_timeout", "budget", "client_tool_timeout", "compaction", "context_blocks", "context_hook", "context_policy", "faux", "follow_up_mode", "hooks", "include_approvals_in_model_context", "max_output_retries", "max_turns", "mcp_servers", "model", "model_settings", "output_schema", "sandbox", "steering_mode", "subagents", "system_prompt", "thinking_level", "tool_execution", "tools", "workspace_root"]
    APPROVAL_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TOOL_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HOOK_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_POLICY_FIELD_NUMBER: _ClassVar[int]
    FAUX_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_UP_MODE_FIELD_NUMBER: _ClassVar[int]
    HOOKS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_APPROVALS_IN_MODEL_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_RETRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    STEERING_MODE_FIELD_NUMBER: _ClassVar[int]
    SUBAGENTS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    THINKING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ROOT_FIELD_NUMBER: _ClassVar[int]
    approval_timeout: _duration_pb2.Duration
    budget: Budget
    client_tool_timeout: _duration_pb2.Duration
    compaction: CompactionSettings
    context_blocks: _containers.RepeatedCompositeFieldContainer[ContextBlock]
    context_hook: ContextHook
    context_policy: ContextPolicy
    faux: FauxScript
    follow_up_mode: QueueMode
    hooks: _containers.RepeatedCompositeFieldContainer[Hook]
    include_approvals_in_model_context: bool
    max_output_retries: int
    max_turns: int
    mcp_servers: _containers.RepeatedCompositeFieldContainer[McpServer]
    model: ModelRef
    model_settings: ModelSettings
    output_schema: _struct_pb2.Struct
    sandbox: SandboxSettings
    steering_mode: QueueMode
    subagents: _containers.RepeatedCompositeFieldContainer[SubagentProfile]
    system_prompt: str
    thinking_level: _agent_messages_pb2.ThinkingLevel
    tool_execution: ToolExecutionMode
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    workspace_root: str
    def __init__(self, model: _Optional[_Union[ModelRef, _Mapping]] = ..., system_prompt: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tool_execution: _Optional[_Union[ToolExecutionMode, str]] = ..., steering_mode: _Optional[_Union[QueueMode, str]] = ..., follow_up_mode: _Optional[_Union[QueueMode, str]] = ..., thinking_level: _Optional[_Union[_agent_messages_pb2.ThinkingLevel, str]] = ..., workspace_root: _Optional[str] = ..., max_turns: _Optional[int] = ..., client_tool_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., approval_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., include_approvals_in_model_context: bool = ..., faux: _Optional[_Union[FauxScript, _Mapping]] = ..., context_policy: _Optional[_Union[ContextPolicy, _Mapping]] = ..., context_hook: _Optional[_Union[ContextHook, _Mapping]] = ..., compaction: _Optional[_Union[CompactionSettings, _Mapping]] = ..., context_blocks: _Optional[_Iterable[_Union[ContextBlock, _Mapping]]] = ..., mcp_servers: _Optional[_Iterable[_Union[McpServer, _Mapping]]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., sandbox: _Optional[_Union[SandboxSettings, _Mapping]] = ..., hooks: _Optional[_Iterable[_Union[Hook, _Mapping]]] = ..., model_settings: _Optional[_Union[ModelSettings, _Mapping]] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., max_output_retries: _Optional[int] = ..., subagents: _Optional[_Iterable[_Union[SubagentProfile, _Mapping]]] = ...) -> None: ...

class SessionOrigin(_message.Message):
    __slots__ = ["entry_id", "run_id", "session_id", "subagent_profile", "tool_call_id"]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SUBAGENT_PROFILE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    run_id: str
    session_id: str
    subagent_profile: str
    tool_call_id: str
    def __init__(self, session_id: _Optional[str] = ..., entry_id: _Optional[str] = ..., run_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., subagent_profile: _Optional[str] = ...) -> None: ...

class Spend(_message.Message):
    __slots__ = ["cost_usd", "tokens"]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    cost_usd: float
    tokens: int
    def __init__(self, tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ...) -> None: ...

class SubagentProfile(_message.Message):
    __slots__ = ["config", "description", "max_concurrent", "max_depth", "name"]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    config: SessionConfig
    description: str
    max_concurrent: int
    max_depth: int
    name: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., config: _Optional[_Union[SessionConfig, _Mapping]] = ..., max_depth: _Optional[int] = ..., max_concurrent: _Optional[int] = ...) -> None: ...

class TokenBudgetRule(_message.Message):
    __slots__ = ["max_tokens", "pinned_messages"]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PINNED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    pinned_messages: int
    def __init__(self, max_tokens: _Optional[int] = ..., pinned_messages: _Optional[int] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ["approval", "description", "executor", "name", "parameters", "sequential"]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_FIELD_NUMBER: _ClassVar[int]
    approval: ApprovalPolicy
    description: str
    executor: ToolExecutor
    name: str
    parameters: _struct_pb2.Struct
    sequential: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., executor: _Optional[_Union[ToolExecutor, str]] = ..., approval: _Optional[_Union[ApprovalPolicy, str]] = ..., sequential: bool = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ["mode", "tool_name"]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    tool_name: str
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., tool_name: _Optional[str] = ...) -> None: ...

class ToolSandbox(_message.Message):
    __slots__ = ["confined", "mechanism", "network", "writable_paths"]
    CONFINED_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_PATHS_FIELD_NUMBER: _ClassVar[int]
    confined: bool
    mechanism: str
    network: SandboxNetwork
    writable_paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, confined: bool = ..., mechanism: _Optional[str] = ..., network: _Optional[_Union[SandboxNetwork, str]] = ..., writable_paths: _Optional[_Iterable[str]] = ...) -> None: ...

class ToolExecutor(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ApprovalPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ToolExecutionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class QueueMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class HookTimeoutAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class SandboxNetwork(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class MessageKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class SessionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Modality(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
