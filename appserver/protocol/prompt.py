"""``prompt/read``: what the agent is told besides the conversation.

Ours, not DotCraft's: the system text of the next model request of a thread
(or of a new thread), in sections, so a client can show the user what the
agent was told: the server's own prompt, the environment block, each
``AGENTS.md`` with its path, the thread's ``agentInstructions``.
"""

from typing import Literal

from pydantic import ConfigDict

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Flag, WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

PromptSectionKind = Literal["base", "environment", "projectInstructions", "agentInstructions"]


class PromptReadParams(WireModel):
    """``prompt/read``: the system text for a thread, or for a new thread."""

    model_config = ConfigDict(json_schema_extra={"examples": [{}, {"threadId": "thr_1"}]})

    thread_id: str | None = None
    """The thread whose configuration (approval policy, `agentInstructions`) applies; absent:
    a new thread with the defaults."""


class PromptSection(WireModel):
    """One part of the system text, in the order the model reads them."""

    kind: PromptSectionKind
    """`base` (the server's prompt, or a face's replacement), `environment` (working directory,
    OS, shell, date, approval policy, workspace boundary), `projectInstructions` (one
    `AGENTS.md`) or `agentInstructions` (the thread's own)."""
    text: str
    """The section as the model reads it."""
    source: str | None = None
    """For `projectInstructions`: the file it came from."""


class PromptReadResult(WireModel):
    """The system text and its sections."""

    text: str
    """The whole system text, the sections joined by blank lines."""
    sections: list[PromptSection]
    """Its parts."""
    truncated: Flag
    """Project instructions were cut to fit their 32 KiB cap (the text says where)."""


METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "prompt/read",
        PromptReadParams,
        PromptReadResult,
        "promptRead",
        "The system text of the thread's next model request (without a turn's own instructions): "
        "the server's prompt, the environment block and every `AGENTS.md` from the user's "
        "directory and the workspace root down, each headed by its path. Ours, not DotCraft's.",
        (rpc_errors.THREAD_NOT_FOUND, rpc_errors.INVALID_PARAMS),
        access="read",
    ),
]
NOTIFICATION_SPECS: list[NotificationSpec] = []
SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
