"""Anthropic Messages API provider.

Sends ``POST {base_url}/v1/messages`` with ``stream: true`` (the wire the
``anthropic`` SDK documents, API version ``2023-06-01``) through
:class:`~appserver.providers.http.HttpApi` (the SDK's headers, retries and
error statuses without its ~900 ms import) and reads the answer's server-sent
events as JSON, without a typed object per event:

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

import json
import re
from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Any

from appserver.providers._common import ToolCallAssembler, server_sent_events
from appserver.providers.base import (
    ImagePart,
    Message,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    Stop,
    TextDelta,
    ToolSpec,
    Usage,
)
from appserver.providers.hosted import HostedProvider, count
from appserver.providers.http import ERROR_TYPES, ApiError, check_stream, finish_body

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"

_STOP_REASONS = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_calls",
    "max_tokens": "max_tokens",
}


class AnthropicProvider(HostedProvider):
    """A Claude model reached through the Messages API.

    ``base_url`` is the API root without ``/v1`` (``None``: Anthropic). Without
    ``api_key`` every call fails with ``MissingApiKey``; the SDK's own
    credential discovery (environment, profiles on disk) is deliberately not
    used, :func:`appserver.providers.resolve_settings` already decided.
    """

    name = "anthropic"
    missing_key = (
        "MissingApiKey: no API key for the Anthropic provider "
        "(set APPSERVER_API_KEY or ANTHROPIC_API_KEY, or apiKey with workspace/config/update)"
    )

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        model: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
    ) -> None:
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            default_model=model or DEFAULT_MODEL,
            root=DEFAULT_BASE_URL,
            headers=headers,
            timeout=timeout,
            max_retries=max_retries,
        )

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream one response; API failures end the stream with :class:`ProviderError`."""
        if self.keyless:
            yield ProviderError("auth", self.missing_key)
            return
        # One generator, not a wrapper around another: each streamed delta
        # passes through every generator layer it is yielded from. If our
        # consumer stops early, closing this generator closes the response.
        reader = _EventReader()
        try:
            async with self.api.stream("/v1/messages", self.request_body(request)) as response:
                await check_stream(response)
                events = server_sent_events(response.aiter_bytes())
                async for name, data in events:
                    if name == "error":
                        yield _stream_error(data)
                        return
                    if name not in _EVENTS:
                        continue  # as the SDK does: ping, unnamed and unknown events
                    if name == "message_stop":
                        # The answer is whole: a body left open after it is not waited for.
                        reader.stopped = True
                        await finish_body(response, events)
                        break
                    event = json.loads(data)
                    if isinstance(event, dict):
                        for item in reader.read(event):
                            yield item
            if not reader.stopped:
                raise ApiError("unavailable", "the model's stream ended before its answer did")
            for done in reader.assembler.finish_all():
                yield done
            if reader.input_tokens is not None and reader.output_tokens is not None:
                yield Usage(reader.input_tokens, reader.output_tokens)
            yield Stop(_stop_reason(reader.stop_reason, tool_calls=reader.assembler.started))
        except Exception as exc:
            yield self.failure(exc)

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages request for ``request``."""
        body: dict[str, Any] = {
            "model": request.model or self.default_model,
            "max_tokens": request.max_tokens,
            "messages": to_anthropic_messages(request.messages),
            "stream": True,
        }
        system = _system_prompt(request)
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [_tool_param(t) for t in request.tools]
        return body

    async def list_models(self) -> list[ModelInfo]:
        """``GET /v1/models``; raises :class:`ProviderUnavailable` on any failure."""
        return [
            ModelInfo(
                id=model["id"], owned_by="anthropic", created_at=_iso(model.get("created_at"))
            )
            for model in await self.listed_models("/v1/models")
        ]


def _iso(value: Any) -> str | None:
    """An RFC 3339 time as the SDK's datetime would print it, ``Z`` for UTC."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return moment.isoformat().replace("+00:00", "Z")


class _EventReader:
    """Maps Messages stream events (parsed JSON) to our events, keeping what
    the end of the stream needs: token counts, the stop reason, open tool calls."""

    def __init__(self) -> None:
        self.assembler = ToolCallAssembler("toolu_")
        self.tool_inputs: dict[int, dict[str, Any]] = {}  # open tool_use blocks by index
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.stopped = False  # message_stop came
        self.stop_reason: str | None = None

    def read(self, event: dict[str, Any]) -> list[ModelEvent]:
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._delta(event)
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "content_block_stop":
            index = event.get("index")
            if isinstance(index, int) and index in self.tool_inputs:
                return [self.assembler.finish(index, self.tool_inputs.pop(index))]
        elif kind == "message_start":
            message = event.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                self.input_tokens = _input_tokens(usage)
                self.output_tokens = count(usage.get("output_tokens"))
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            usage = event.get("usage")
            if isinstance(usage, dict):
                self.output_tokens = count(usage.get("output_tokens"))
                if isinstance(usage.get("input_tokens"), int):
                    # Cumulative counts, when the API repeats them here, win.
                    self.input_tokens = _input_tokens(usage)
        return []

    def _delta(self, event: dict[str, Any]) -> list[ModelEvent]:
        delta = event.get("delta")
        if not isinstance(delta, dict):
            return []
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if kind == "thinking_delta":
            thinking = delta.get("thinking")
            return [ReasoningDelta(thinking)] if isinstance(thinking, str) and thinking else []
        index = event.get("index")
        if kind == "input_json_delta" and isinstance(index, int) and index in self.tool_inputs:
            partial = delta.get("partial_json")
            fragment = self.assembler.fragment(index, partial if isinstance(partial, str) else "")
            return [fragment] if fragment is not None else []
        return []

    def _block_start(self, event: dict[str, Any]) -> list[ModelEvent]:
        block = event.get("content_block")
        index = event.get("index")
        if not isinstance(block, dict) or not isinstance(index, int):
            return []
        kind = block.get("type")
        if kind == "tool_use":
            given = block.get("input")
            self.tool_inputs[index] = dict(given) if isinstance(given, dict) else {}
            call_id, name = block.get("id"), block.get("name")
            first = self.assembler.fragment(
                index,
                "",
                call_id=call_id if isinstance(call_id, str) else None,
                name=name if isinstance(name, str) else None,
            )
            return [first] if first is not None else []
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            return [TextDelta(block["text"])]
        if kind == "thinking" and isinstance(block.get("thinking"), str) and block["thinking"]:
            return [ReasoningDelta(block["thinking"])]
        return []


# The events of a Messages stream this reads (others are skipped, as the SDK does).
_EVENTS = frozenset(
    [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
)


def _input_tokens(usage: dict[str, Any]) -> int | None:
    # Input including cache reads and writes: what the context really held.
    given = count(usage.get("input_tokens"))
    if given is None:
        return None
    cache = (
        count(usage.get(name))
        for name in ("cache_creation_input_tokens", "cache_read_input_tokens")
    )
    return given + sum(tokens or 0 for tokens in cache)


def _stream_error(data: str) -> ProviderError:
    """An SSE ``error`` event inside an HTTP 200 answer: only the error type
    in its body says what happened."""
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    fields = error if isinstance(error, dict) else {}
    given_type, given_message = fields.get("type"), fields.get("message")
    type_ = given_type if isinstance(given_type, str) else "error"
    message = given_message if isinstance(given_message, str) else data
    return ProviderError(ERROR_TYPES.get(type_, "other"), f"{type_}: {message or 'error'}")


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


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
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
    return turns


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        content: str | list[dict[str, Any]] = message.content
        if message.images:
            # A tool result may hold images: the text, then each image.
            content = [{"type": "text", "text": message.content or "(no output)"}]
            content += [_image_block(image) for image in message.images]
        return [
            {
                "type": "tool_result",
                "tool_use_id": _tool_id(message.tool_call_id or ""),
                "content": content,
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
    images = [_image_block(image) for image in message.images]
    if message.content.strip() or not images:
        # Images go first (Anthropic's recommendation); an empty user message still
        # needs a non-empty text block to be accepted.
        images.append({"type": "text", "text": message.content or "(empty message)"})
    return images


def _image_block(image: ImagePart) -> dict[str, Any]:
    source = {"type": "base64", "media_type": image.media_type, "data": image.data_base64}
    return {"type": "image", "source": source}


def _tool_param(tool: ToolSpec) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.input_schema,
    }


# --- errors -------------------------------------------------------------------------
