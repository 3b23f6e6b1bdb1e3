"""OpenAI Chat Completions provider (OpenAI and OpenAI-compatible servers).

Sends streaming Chat Completions requests (``POST {base_url}/chat/completions``
with ``stream_options={"include_usage": True}``), the wire the ``openai`` SDK
documents and OpenAI-compatible servers (DashScope/Qwen, DeepSeek, vLLM,
Ollama, LM Studio, ...) share, through :class:`~appserver.providers.http.HttpApi`
(the SDK's headers, retries and error statuses without its import cost), and
reads the answer's event stream as JSON, without a typed object per chunk.

Mapping of the stream:

* ``delta.content`` (and ``delta.refusal``) -> :class:`TextDelta`
* ``delta.reasoning_content`` / ``delta.reasoning`` (vendor extensions)
  -> :class:`ReasoningDelta`
* ``delta.tool_calls[i]`` -> :class:`ToolCallDelta` (id and name on the first
  fragment of each call), then :class:`ToolCallDone` per call when the choice
  finishes
* the usage chunk -> :class:`Usage`; ``finish_reason`` -> :class:`Stop`
  (``stop`` -> ``end_turn``, ``tool_calls`` -> ``tool_calls``, ``length`` ->
  ``max_tokens``).

Every failure ends the stream with a :class:`ProviderError` (see
:func:`appserver.providers.http.classify_error`); cancellation propagates and
closes the HTTP response.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

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
from appserver.providers.http import (
    ERROR_TYPES,
    ApiError,
    ApiStatusError,
    check_stream,
    finish_body,
)

DEFAULT_MODEL = "gpt-5.4-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DASHSCOPE_DEFAULT_MODEL = "qwen-plus"

_FINISH_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "max_tokens",
}

# Vendor fields carrying reasoning text: DeepSeek and DashScope use
# ``reasoning_content``; OpenRouter and some vLLM builds use ``reasoning``.
_REASONING_FIELDS = ("reasoning_content", "reasoning")


class OpenAIProvider(HostedProvider):
    """A model reached through the Chat Completions API.

    ``base_url`` is the API root including its version (``.../v1``, or e.g.
    ``https://dashscope.aliyuncs.com/compatible-mode/v1``); ``None`` means
    OpenAI itself. Without ``api_key`` every call fails with
    ``MissingApiKey`` (the SDK's own environment fallback is deliberately not
    used: :func:`appserver.providers.resolve_settings` already decided).
    """

    name = "openai"
    missing_key = (
        "MissingApiKey: no API key for the OpenAI-compatible provider "
        "(set APPSERVER_API_KEY or OPENAI_API_KEY, or apiKey with workspace/config/update)"
    )

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        model: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        organization: str | None = None,
        project: str | None = None,
    ) -> None:
        headers: dict[str, str] = {}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        # The SDK's OPENAI_ORG_ID / OPENAI_PROJECT_ID settings, as the same headers.
        if organization:
            headers["openai-organization"] = organization
        if project:
            headers["openai-project"] = project
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            default_model=model or _default_model_for(base_url),
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
        reader = _ChunkReader()
        try:
            async with self.api.stream("/chat/completions", self.request_body(request)) as response:
                events = server_sent_events(response.aiter_bytes())
                await check_stream(response)
                async for _event, data in events:
                    if data.startswith("[DONE]"):
                        reader.done = True
                        await finish_body(response, events)  # so the connection is kept
                        break
                    chunk = json.loads(data)
                    if not isinstance(chunk, dict):
                        continue
                    if chunk.get("error"):
                        yield _stream_error(chunk["error"])
                        return
                    for event in reader.read(chunk):
                        yield event
            if not reader.done and reader.finish is None:
                # A body that ends without [DONE] or a finish reason was cut off
                # (a proxy, a crashed server): not an answer to take as complete.
                raise ApiError("unavailable", "the model's stream ended before its answer did")
            for done in reader.assembler.finish_all():
                yield done
            if reader.usage is not None:
                yield reader.usage
            yield Stop(_stop_reason(reader.finish, tool_calls=reader.assembler.started))
        except Exception as exc:
            yield self.failure(exc, _missing_v1_hint(exc, self.api.base_url))

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The Chat Completions request for ``request``."""
        body: dict[str, Any] = {
            "model": request.model or self.default_model,
            "messages": to_chat_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [_tool_param(t) for t in request.tools]
        # OpenAI's own API rejects ``max_tokens`` for reasoning models and wants
        # ``max_completion_tokens``; most compatible servers only know ``max_tokens``.
        official = _is_official_openai(self.base_url)
        body["max_completion_tokens" if official else "max_tokens"] = request.max_tokens
        return body

    async def list_models(self) -> list[ModelInfo]:
        """``GET /models``; raises :class:`ProviderUnavailable` on any failure."""
        return [
            ModelInfo(
                id=model["id"],
                owned_by=str(model.get("owned_by") or ""),
                created_at=_iso_timestamp(model.get("created")),
            )
            for model in await self.listed_models("/models")
        ]


class _ChunkReader:
    """Maps Chat Completions chunks (parsed JSON) to our events, keeping what
    the end of the stream needs: usage, the finish reason, open tool calls."""

    def __init__(self) -> None:
        self.assembler = ToolCallAssembler("call_")
        self.finish: str | None = None
        self.usage: Usage | None = None
        self.done = False  # [DONE] came

    def read(self, chunk: dict[str, Any]) -> list[ModelEvent]:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            prompt, completion = (
                count(usage.get("prompt_tokens")),
                count(usage.get("completion_tokens")),
            )
            if prompt is not None and completion is not None:
                self.usage = Usage(prompt, completion)
        events: list[ModelEvent] = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # we never ask for n > 1
            delta = choice.get("delta")
            if isinstance(delta, dict):
                content = delta.get("content")
                if len(delta) == 1 and isinstance(content, str):
                    # The stream's usual chunk: text only (the hot path of a turn).
                    if content:
                        events.append(TextDelta(content))
                else:
                    self._delta(delta, events)
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                self.finish = finish
        return events

    def _delta(self, delta: dict[str, Any], events: list[ModelEvent]) -> None:
        for name in _REASONING_FIELDS:
            reasoning = delta.get(name)
            if isinstance(reasoning, str) and reasoning:
                events.append(ReasoningDelta(reasoning))
                break
        content = delta.get("content")
        if isinstance(content, str) and content:
            events.append(TextDelta(content))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            events.append(TextDelta(refusal))
        for call in delta.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            function = call.get("function")
            function = function if isinstance(function, dict) else {}
            call_id = _text_or_none(call.get("id"))
            arguments = function.get("arguments")
            # Not every compatible server numbers its tool calls.
            index = call.get("index")
            fragment = self.assembler.fragment(
                self.assembler.key_for(index if isinstance(index, int) else None, call_id),
                arguments if isinstance(arguments, str) else "",
                call_id=call_id,
                name=_text_or_none(function.get("name")),
            )
            if fragment is not None:
                events.append(fragment)


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _stream_error(error: Any) -> ProviderError:
    """An error object inside an HTTP 200 stream (``data: {"error": ...}``),
    classified the way the SDK's ``APIError`` for it was."""
    fields = error if isinstance(error, dict) else {}
    message = fields.get("message")
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"
    code, type_ = _text_or_none(fields.get("code")), _text_or_none(fields.get("type"))
    kind = ERROR_TYPES.get(code or "") or ERROR_TYPES.get(type_ or "") or "other"
    return ProviderError(kind, message)


def _stop_reason(finish: str | None, *, tool_calls: bool) -> str:
    if tool_calls and finish in (None, "stop"):
        # Some compatible servers report "stop" (or nothing) after tool calls; the
        # calls are what matters to the turn.
        return "tool_calls"
    if finish is None:
        # The stream ended cleanly ([DONE]) without a finish reason: treat as done.
        return "end_turn"
    return _FINISH_REASONS.get(finish, finish)


# --- request conversion -------------------------------------------------------------


def to_chat_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Convert our provider-neutral conversation to Chat Completions messages."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    images: list[ImagePart] = []  # of the tool results just sent
    for message in request.messages:
        if message.role != "tool" and images:
            out.append(_tool_images_message(images))
            images = []
        out.append(_chat_message(message))
        if message.role == "tool":
            images.extend(message.images)
    if images:
        out.append(_tool_images_message(images))
    return out


def _tool_images_message(images: list[ImagePart]) -> dict[str, Any]:
    """A tool message holds only text: the images the tool results returned
    follow them in one user message (after all of them, since every result
    must directly follow the assistant message that made the calls)."""
    return _chat_message(
        Message("user", "The images the tool results above returned:", images=images)
    )


def _chat_message(message: Message) -> dict[str, Any]:
    if message.role == "system":
        return {"role": "system", "content": message.content}
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": message.content,
        }
    if message.role == "assistant":
        result: dict[str, Any] = {"role": "assistant"}
        # Assistant messages that only call tools carry ``content: null``; some
        # compatible servers reject an empty string there.
        result["content"] = message.content if message.content or not message.tool_calls else None
        if message.tool_calls:
            result["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in message.tool_calls
            ]
        return result
    if not message.images:
        return {"role": "user", "content": message.content}
    parts: list[dict[str, Any]] = []
    if message.content:
        parts.append({"type": "text", "text": message.content})
    parts.extend(
        {
            "type": "image_url",
            "image_url": {"url": f"data:{image.media_type};base64,{image.data_base64}"},
        }
        for image in message.images
    )
    return {"role": "user", "content": parts}


def _tool_param(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        },
    }


# --- helpers ------------------------------------------------------------------------


def _missing_v1_hint(exc: BaseException, base_url: str) -> str:
    """A hint for a 404 from a base URL without ``/v1``: OpenAI-compatible
    servers (vLLM, llama.cpp, Ollama, LM Studio) serve the API under it."""
    if not isinstance(exc, ApiStatusError) or exc.status != 404:
        return ""
    if urlsplit(base_url).path.rstrip("/").endswith("/v1"):
        return ""
    return f" (OpenAI-compatible servers usually serve under /v1: try --base-url {base_url}/v1)"


def _host(base_url: str | None) -> str:
    return (urlsplit(base_url).hostname or "") if base_url else ""


def _is_official_openai(base_url: str | None) -> bool:
    return base_url is None or _host(base_url) == "api.openai.com"


def _default_model_for(base_url: str | None) -> str:
    return DASHSCOPE_DEFAULT_MODEL if "dashscope" in _host(base_url) else DEFAULT_MODEL


def _iso_timestamp(created: int | None) -> str | None:
    if not created:
        return None
    return datetime.fromtimestamp(created, UTC).isoformat().replace("+00:00", "Z")
