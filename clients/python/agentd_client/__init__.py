"""Python client for agentd.

A thin asyncio layer over the generated gRPC stubs (gen/python): connect with
an address and a token, stream a prompt's events, answer client-executed tools,
approvals (scopes and rules) and lifecycle hooks (on_pre_tool_use and its
siblings), resume a dropped stream with Attach; plus the ChatItem UI reducer
of the seed. Runs on Debian's python3-grpcio and python3-protobuf.
"""

import os
import sys

try:  # The generated stubs, installed or in the repository's gen/python.
    import agentd.v1.service_pb2  # noqa: F401
except ImportError:  # pragma: no cover - depends on the layout
    _gen = os.path.join(os.path.dirname(__file__), "..", "..", "..", "gen", "python")
    sys.path.insert(0, os.path.abspath(_gen))

from agentd_client.client import (  # noqa: E402
    SUGGESTED,
    AgentdClient,
    Approval,
    Refusal,
    is_resumable,
    refusal_of,
    structured_output,
    to_content,
)
from agentd_client.hooks import (  # noqa: E402
    KEEP,
    HookAnswer,
    HookHandler,
    allow,
    deny,
    modify,
    on_post_tool_use,
    on_pre_compact,
    on_pre_tool_use,
    on_stop,
    on_user_prompt,
    redact,
)
from agentd_client.reducer import (  # noqa: E402
    ApprovalItem,
    AssistantItem,
    ChatState,
    CompactionItem,
    Conversation,
    HookItem,
    ToolItem,
    UiState,
    UserItem,
    apply_event,
    items_from_transcript,
    reduce_chat,
    set_draft,
    text_of,
    toggle_collapsed,
)

__all__ = [
    "AgentdClient",
    "Approval",
    "HookAnswer",
    "HookHandler",
    "HookItem",
    "KEEP",
    "Refusal",
    "SUGGESTED",
    "ApprovalItem",
    "AssistantItem",
    "ChatState",
    "CompactionItem",
    "Conversation",
    "ToolItem",
    "UiState",
    "UserItem",
    "allow",
    "apply_event",
    "deny",
    "is_resumable",
    "items_from_transcript",
    "modify",
    "on_post_tool_use",
    "on_pre_compact",
    "on_pre_tool_use",
    "on_stop",
    "on_user_prompt",
    "redact",
    "reduce_chat",
    "refusal_of",
    "set_draft",
    "structured_output",
    "text_of",
    "to_content",
    "toggle_collapsed",
]
