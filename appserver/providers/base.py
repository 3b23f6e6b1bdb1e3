"""The one interface every model provider implements.

A provider turns a :class:`ModelRequest` into a stream of normalised
:data:`ModelEvent` values. Nothing above ``appserver/providers`` imports an
SDK type: the turn engine only sees these dataclasses.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# --- conversation ----------------------------------------------------------

log = logging.getLogger("appserver.providers")


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model made (arguments already parsed). Unparsable
    arguments arrive as ``{}`` with ``arguments_error`` set: the call is not
    run, the model is told why."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    arguments_error: str | None = None


@dataclass(frozen=True)
class ImagePart:
    """An image attached to a user message or to a tool result (``view_image``)."""

    media_type: str  # e.g. "image/png"
    data_base64: str


@dataclass
class Message:
    """One conversation message, provider-neutral.

    ``role="tool"`` carries one tool result (``tool_call_id`` + ``content``),
    and the images the tool returned in ``images``: a provider whose API
    cannot put an image in a tool result sends them in a user message right
    after the results. ``role="assistant"`` may carry ``tool_calls``.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None  # for role="tool": which tool produced it
    images: list[ImagePart] = field(default_factory=list)


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model (JSON Schema for its arguments)."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class ModelRequest:
    model: str
    messages: list[Message]
    system: str | None = None
    tools: list[ToolSpec] = field(default_factory=list)
    max_tokens: int = 4096
    # "turn" (the agent answering) or "compaction" (summarising the conversation
    # so far); providers may ignore it, the offline model answers accordingly.
    purpose: Literal["turn", "compaction"] = "turn"


# --- events ----------------------------------------------------------------


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A fragment of a tool call's JSON arguments as the model streams it.

    ``call_id``/``name`` are set on the first fragment of a call (when known).
    """

    index: int
    arguments_delta: str
    call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class ToolCallDone:
    """A complete tool call (unparsable arguments: see :class:`ToolCall`)."""

    index: int
    call: ToolCall

    @property
    def arguments_error(self) -> str | None:
        """Why the call's arguments could not be parsed (``None``: they were)."""
        return self.call.arguments_error


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Stop:
    """The model finished this response (``reason``: end_turn, tool_calls, max_tokens, ...)."""

    reason: str


ErrorKind = Literal["auth", "rate_limit", "unavailable", "timeout", "other"]


@dataclass(frozen=True)
class ProviderError:
    """The call failed. Always the last event of a stream."""

    kind: ErrorKind
    message: str


ModelEvent = (
    TextDelta | ReasoningDelta | ToolCallDelta | ToolCallDone | Usage | Stop | ProviderError
)


@dataclass(frozen=True)
class ModelInfo:
    id: str
    owned_by: str = ""
    created_at: str | None = None


class ProviderConfigError(ValueError):
    """The provider cannot work with these settings (a bad value, a missing API key)."""


class ProviderUnavailable(Exception):
    """``list_models`` could not answer; ``code`` is machine-readable (e.g. MissingApiKey)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def close_providers(providers: list[Any]) -> None:
    """Close each provider that has an ``aclose`` (its HTTP client); a failure
    is logged, and the others are still closed."""
    for provider in providers:
        close = getattr(provider, "aclose", None)
        if close is not None:
            try:
                await close()
            except Exception:
                log.warning("could not close provider %s", provider.name, exc_info=True)


class Provider(Protocol):
    """A model backend."""

    name: str
    default_model: str

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream one model response. Never raises for API failures: it ends
        with :class:`ProviderError` instead. Cancellation propagates."""
        ...

    async def list_models(self) -> list[ModelInfo]:
        """Models this provider offers; raises :class:`ProviderUnavailable`."""
        ...
