"""Anthropic Messages API provider.

Uses the official ``anthropic`` SDK (:class:`anthropic.AsyncAnthropic`) and
``messages.create(..., stream=True)``, consuming the raw SSE events:

* ``text_delta`` -> :class:`TextDelta`; ``thinking_delta`` -> :class:`ReasoningDelta`
* a ``tool_use`` content block -> a first :class:`ToolCallDelta` carrying its
  id and name, its ``input_json_delta`` parts -> further :class:`ToolCallDelta`,
  ``content_block_stop`` -> :class:`ToolCallDone`
* ``message_start`` usage (input, including cache reads/writes) and
  ``message_delta`` usage (cumulative output) -> one :class:`Usage` at the end
* ``stop_reason`` -> :class:`Stop` (``tool_use`` -> ``tool_calls``,
  ``end_turn``/``stop_sequence`` -> ``end_turn``, ``max_tokens`` -> ``max_tokens``).

Conversation conversion: the system prompt (plus any ``system`` messages) goes
into ``system``; tool results become ``tool_result`` blocks in a user message;
consecutive messages of the same role are merged, because the API requires
strict user/assistant alternation (parallel tool results, or a user message
right after tool results, would otherwise be rejected).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, cast

import anthropic
from anthropic import AsyncAnthropic, omit
from anthropic.types import InputJSONDelta as SdkInputJSONDelta
from anthropic.types import (
    MessageParam,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    ToolUnionParam,
    ToolUseBlock,
)
from anthropic.types import TextBlock as SdkTextBlock
from anthropic.types import TextDelta as SdkTextDelta
from anthropic.types import ThinkingBlock as SdkThinkingBlock
from anthropic.types import ThinkingDelta as SdkThinkingDelta

from appserver.providers._common import (
    ToolCallAssembler,
    status_message,
    transport_error,
    unavailable_code,
)
from appserver.providers.base import (
    ErrorKind,
    Message,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ProviderError,
    ProviderUnavailable,
    ReasoningDelta,
    Stop,
    TextDelta,
    ToolSpec,
    Usage,
)

log = logging.getLogger(__name__)

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_BASE_URL = "https://api.anthropic.com"

_STOP_REASONS = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_calls",
    "max_tokens": "max_tokens",
}

# ``error.type`` values the API sends, inside an HTTP error or an SSE ``error`` event.
_ERROR_TYPES: dict[str, ErrorKind] = {
    "authentication_error": "auth",
    "permission_error": "auth",
    "rate_limit_error": "rate_limit",
    "overloaded_error": "unavailable",
    "api_error": "unavailable",
    "timeout_error": "timeout",
}


class AnthropicProvider:
    """A Claude model reached through the Messages API.

    ``base_url`` is the API root without ``/v1`` (``None``: Anthropic). Without
    ``api_key`` every call fails with ``MissingApiKey``; the SDK's own
    credential discovery (environment, profiles on disk) is deliberately not
    used, :func:`appserver.providers.resolve_settings` already decided.
    """

    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        model: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
    ) -> None:
        self.api_key = api_key
        self.base_url = base_url
        self.default_model = model or DEFAULT_MODEL
        self.timeout = timeout
        self.max_retries = max_retries
        self._client: AsyncAnthropic | None = None

    def _get_client(self, api_key: str) -> AsyncAnthropic:
        if self._client is None:
            self._client = AsyncAnthropic(
                api_key=api_key,
                base_url=self.base_url or DEFAULT_BASE_URL,
                timeout=self.timeout,
                max_retries=self.max_retries,
            )
        return self._client

    async def aclose(self) -> None:
        """Close pooled HTTP connections (the provider can be used again afterwards)."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream one response; API failures end the stream with :class:`ProviderError`."""
        if not self.api_key:
            yield ProviderError("auth", _missing_key_message())
            return
        try:
            # aclosing: if our consumer stops early, the SDK stream (and its HTTP
            # response) is closed now rather than whenever the generator is collected.
            async with aclosing(self._stream(request, self.api_key)) as events:
                async for event in events:
                    yield event
        except Exception as exc:
            kind, message = classify_error(exc)
            if kind == "other":
                log.warning("model call failed: %s", message, exc_info=exc)
            yield ProviderError(kind, message)

    async def _stream(
        self, request: ModelRequest, api_key: str
    ) -> AsyncGenerator[ModelEvent, None]:
        client = self._get_client(api_key)
        system = _system_prompt(request)
        tools = [_tool_param(t) for t in request.tools]
        response = await client.messages.create(
            model=request.model or self.default_model,
            max_tokens=request.max_tokens,
            messages=to_anthropic_messages(request.messages),
            system=system if system else omit,
            tools=tools if tools else omit,
            stream=True,
        )
        assembler = ToolCallAssembler("toolu_")
        tool_inputs: dict[int, dict[str, Any]] = {}  # open tool_use blocks by content index
        input_tokens: int | None = None
        output_tokens: int | None = None
        stop_reason: str | None = None
        async with response:
            async for event in response:
                if isinstance(event, RawMessageStartEvent):
                    usage = event.message.usage
                    input_tokens = (
                        usage.input_tokens
                        + (usage.cache_creation_input_tokens or 0)
                        + (usage.cache_read_input_tokens or 0)
                    )
                    output_tokens = usage.output_tokens
                elif isinstance(event, RawContentBlockStartEvent):
                    block = event.content_block
                    if isinstance(block, ToolUseBlock):
                        tool_inputs[event.index] = dict(block.input)
                        first = assembler.fragment(
                            event.index, "", call_id=block.id, name=block.name
                        )
                        if first is not None:
                            yield first
                    elif isinstance(block, SdkTextBlock) and block.text:
                        yield TextDelta(block.text)
                    elif isinstance(block, SdkThinkingBlock) and block.thinking:
                        yield ReasoningDelta(block.thinking)
                elif isinstance(event, RawContentBlockDeltaEvent):
                    delta = event.delta
                    if isinstance(delta, SdkTextDelta):
                        if delta.text:
                            yield TextDelta(delta.text)
                    elif isinstance(delta, SdkThinkingDelta):
                        if delta.thinking:
                            yield ReasoningDelta(delta.thinking)
                    elif isinstance(delta, SdkInputJSONDelta) and event.index in tool_inputs:
                        fragment = assembler.fragment(event.index, delta.partial_json)
                        if fragment is not None:
                            yield fragment
                elif isinstance(event, RawContentBlockStopEvent):
                    if event.index in tool_inputs:
                        yield assembler.finish(event.index, tool_inputs.pop(event.index))
                elif isinstance(event, RawMessageDeltaEvent):
                    stop_reason = event.delta.stop_reason or stop_reason
                    delta_usage = event.usage
                    output_tokens = delta_usage.output_tokens
                    if delta_usage.input_tokens is not None:
                        # Cumulative counts, when the API repeats them here, win.
                        input_tokens = (
                            delta_usage.input_tokens
                            + (delta_usage.cache_creation_input_tokens or 0)
                            + (delta_usage.cache_read_input_tokens or 0)
                        )
        for done in assembler.finish_all():
            yield done
        if input_tokens is not None or output_tokens is not None:
            yield Usage(input_tokens or 0, output_tokens or 0)
        yield Stop(_stop_reason(stop_reason, tool_calls=assembler.started))

    async def list_models(self) -> list[ModelInfo]:
        """``GET /v1/models``; raises :class:`ProviderUnavailable` on any failure."""
        if not self.api_key:
            raise ProviderUnavailable("MissingApiKey", _missing_key_message())
        try:
            return [
                ModelInfo(
                    id=model.id,
                    owned_by="anthropic",
                    created_at=model.created_at.isoformat().replace("+00:00", "Z"),
                )
                async for model in self._get_client(self.api_key).models.list()
            ]
        except Exception as exc:
            kind, message = classify_error(exc)
            raise ProviderUnavailable(unavailable_code(kind), message) from exc


def _stop_reason(reason: str | None, *, tool_calls: bool) -> str:
    if reason is None:
        # The stream ended cleanly without a message_delta: infer from what we saw.
        return "tool_calls" if tool_calls else "end_turn"
    return _STOP_REASONS.get(reason, reason)


# --- request conversion -------------------------------------------------------------

_TOOL_ID_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def _tool_id(call_id: str) -> str:
    # The API only accepts [a-zA-Z0-9_-]+ ids; a thread may carry ids minted by
    # another provider. The same mapping on both sides keeps call and result paired.
    return _TOOL_ID_INVALID.sub("_", call_id) or "tool_call"


def _system_prompt(request: ModelRequest) -> str:
    parts = [request.system] if request.system else []
    parts += [m.content for m in request.messages if m.role == "system" and m.content]
    return "\n\n".join(parts)


def to_anthropic_messages(messages: list[Message]) -> list[MessageParam]:
    """Convert our conversation (minus ``system`` messages) to Messages API turns."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue  # carried by the ``system`` parameter
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return cast(list[MessageParam], turns)


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": _tool_id(message.tool_call_id or ""),
                "content": message.content,
            }
        ]
    if message.role == "assistant":
        # The API rejects whitespace-only text blocks.
        blocks: list[dict[str, Any]] = []
        if message.content.strip():
            blocks.append({"type": "text", "text": message.content})
        blocks += [
            {"type": "tool_use", "id": _tool_id(c.call_id), "name": c.name, "input": c.arguments}
            for c in message.tool_calls
        ]
        return blocks
    images: list[dict[str, Any]] = [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": i.media_type, "data": i.data_base64},
        }
        for i in message.images
    ]
    if message.content.strip() or not images:
        # Images go first (Anthropic's recommendation); an empty user message still
        # needs a non-empty text block to be accepted.
        images.append({"type": "text", "text": message.content or "(empty message)"})
    return images


def _tool_param(tool: ToolSpec) -> ToolUnionParam:
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": cast(Any, tool.input_schema),
    }


# --- errors -------------------------------------------------------------------------


def classify_error(exc: BaseException) -> tuple[ErrorKind, str]:
    """Map an exception from the SDK (or the network below it) to an error kind."""
    if isinstance(exc, anthropic.APIStatusError):
        return _status_kind(exc), _status_text(exc)
    # APITimeoutError is a subclass of APIConnectionError, so test it first.
    if isinstance(exc, anthropic.APITimeoutError):
        return "timeout", "the model API did not answer in time"
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        detail = f" ({type(cause).__name__}: {cause})" if cause else ""
        return "unavailable", f"connection to the model API failed{detail}"
    network = transport_error(exc)
    if network is not None:
        return network
    return "other", f"{type(exc).__name__}: {exc}"


def _status_kind(exc: anthropic.APIStatusError) -> ErrorKind:
    if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
        return "auth"
    if isinstance(exc, anthropic.RateLimitError):
        return "rate_limit"
    if isinstance(exc, anthropic.RequestTimeoutError):
        return "timeout"
    if isinstance(exc, anthropic.InternalServerError):
        return "unavailable"
    # An SSE ``error`` event arrives inside an HTTP 200 answer, so only the
    # error type in the body says what happened.
    return _ERROR_TYPES.get(str(exc.type or ""), "other")


def _status_text(exc: anthropic.APIStatusError) -> str:
    if exc.status_code < 400:
        return f"{exc.type or 'error'}: {exc.api_message or exc.message}"
    return status_message(exc.status_code, exc.api_message, exc.message)


def _missing_key_message() -> str:
    return (
        "MissingApiKey: no API key for the Anthropic provider "
        "(set APPSERVER_API_KEY, ANTHROPIC_API_KEY or ApiKey in .craft/config.json)"
    )
