"""OpenAI Chat Completions provider (OpenAI and OpenAI-compatible servers).

Uses the official ``openai`` SDK (:class:`openai.AsyncOpenAI`) to send
streaming Chat Completions requests with ``stream_options={"include_usage":
True}``, which is the dialect OpenAI-compatible servers (DashScope/Qwen,
DeepSeek, vLLM, Ollama, LM Studio, ...) share. The SDK sends the request and
retries it; the event stream of the answer is read as JSON here (its raw
streaming response), without a typed SDK object per chunk.

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
:func:`classify_error`); cancellation propagates and closes the HTTP response.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncGenerator
from contextlib import aclosing
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import anyio

if TYPE_CHECKING:
    # The SDK costs ~350 ms to import: it is loaded on the first model call
    # (or by warm(), in the background), not when the server starts.
    import openai
    from openai import AsyncOpenAI
    from openai.types.chat import (
        ChatCompletionMessageParam,
        ChatCompletionToolUnionParam,
    )

from appserver.providers._common import (
    ToolCallAssembler,
    server_sent_events,
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


class OpenAIProvider:
    """A model reached through the Chat Completions API.

    ``base_url`` is the API root including its version (``.../v1``, or e.g.
    ``https://dashscope.aliyuncs.com/compatible-mode/v1``); ``None`` means
    OpenAI itself. Without ``api_key`` every call fails with
    ``MissingApiKey`` (the SDK's own environment fallback is deliberately not
    used: :func:`appserver.providers.resolve_settings` already decided).
    """

    name = "openai"

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
        self.default_model = model or _default_model_for(base_url)
        self.timeout = timeout
        self.max_retries = max_retries
        self._client: AsyncOpenAI | None = None
        self._client_lock = threading.Lock()

    async def warm(self) -> None:
        """Import the SDK and build the client ahead of the first turn (off the
        event loop), so a server answers ``initialize`` before paying for it."""
        await anyio.to_thread.run_sync(self._get_client)

    def _get_client(self) -> AsyncOpenAI:
        with self._client_lock:  # warm() builds it in a worker thread
            return self._build_client()

    def _build_client(self) -> AsyncOpenAI:
        if self._client is None:
            import httpx2
            from openai import AsyncOpenAI, DefaultAsyncHttpxClient

            self._client = AsyncOpenAI(
                api_key=self.api_key,
                # Explicit, so the SDK does not consult OPENAI_BASE_URL behind our back.
                base_url=self.base_url or DEFAULT_BASE_URL,
                timeout=self.timeout,
                max_retries=self.max_retries,
                # One TLS context (one CA bundle load) shared by every transport
                # the client mounts, proxies included, instead of one each.
                http_client=DefaultAsyncHttpxClient(
                    verify=httpx2.create_ssl_context(), timeout=self.timeout
                ),
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
            async with aclosing(self._stream(request)) as events:
                async for event in events:
                    yield event
        except Exception as exc:
            kind, message = classify_error(exc)
            if kind == "other":
                log.warning("model call failed: %s", message, exc_info=exc)
            yield ProviderError(kind, message)

    async def _stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        from openai import omit

        client = self._get_client()
        tools = [_tool_param(t) for t in request.tools]
        # OpenAI's own API rejects ``max_tokens`` for reasoning models and wants
        # ``max_completion_tokens``; most compatible servers only know ``max_tokens``.
        official = _is_official_openai(self.base_url)
        # The SDK sends the request (auth, organisation, retries with backoff on
        # 408/409/429/5xx and connection errors, HTTP errors raised as its
        # exception classes); we read the event stream ourselves, because
        # building a typed ChatCompletionChunk per delta costs more than the
        # rest of the server's work on that delta (docs/providers.md).
        call = client.chat.completions.with_streaming_response.create(
            model=request.model or self.default_model,
            messages=to_chat_messages(request),
            tools=tools if tools else omit,
            max_completion_tokens=request.max_tokens if official else omit,
            max_tokens=omit if official else request.max_tokens,
            stream=True,
            stream_options={"include_usage": True},
        )
        reader = _ChunkReader()
        async with call as response:
            async for _event, data in server_sent_events(response.iter_lines()):
                if data.startswith("[DONE]"):
                    break
                chunk = json.loads(data)
                if not isinstance(chunk, dict):
                    continue
                if chunk.get("error"):
                    yield _stream_error(chunk["error"])
                    return
                for event in reader.read(chunk):
                    yield event
        for done in reader.assembler.finish_all():
            yield done
        if reader.usage is not None:
            yield reader.usage
        yield Stop(_stop_reason(reader.finish, tool_calls=reader.assembler.started))

    async def list_models(self) -> list[ModelInfo]:
        """``GET /models``; raises :class:`ProviderUnavailable` on any failure."""
        if not self.api_key:
            raise ProviderUnavailable("MissingApiKey", _missing_key_message())
        try:
            return [
                ModelInfo(
                    id=model.id,
                    owned_by=model.owned_by or "",
                    created_at=_iso_timestamp(model.created),
                )
                async for model in self._get_client().models.list()
            ]
        except Exception as exc:
            kind, message = classify_error(exc)
            raise ProviderUnavailable(unavailable_code(kind), message) from exc


class _ChunkReader:
    """Maps Chat Completions chunks (parsed JSON) to our events, keeping what
    the end of the stream needs: usage, the finish reason, open tool calls."""

    def __init__(self) -> None:
        self.assembler = ToolCallAssembler("call_")
        self.finish: str | None = None
        self.usage: Usage | None = None

    def read(self, chunk: dict[str, Any]) -> list[ModelEvent]:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage(
                _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
            )
        events: list[ModelEvent] = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # we never ask for n > 1
            delta = choice.get("delta")
            if isinstance(delta, dict):
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


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _stream_error(error: Any) -> ProviderError:
    """An error object inside an HTTP 200 stream (``data: {"error": ...}``),
    classified the way the SDK's ``APIError`` for it was."""
    fields = error if isinstance(error, dict) else {}
    message = fields.get("message")
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"
    kind = _stream_error_kind(_text_or_none(fields.get("code")), _text_or_none(fields.get("type")))
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


def to_chat_messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    """Convert our provider-neutral conversation to Chat Completions messages."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    out.extend(_chat_message(m) for m in request.messages)
    return cast("list[ChatCompletionMessageParam]", out)


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


def _tool_param(tool: ToolSpec) -> ChatCompletionToolUnionParam:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        },
    }


# --- errors -------------------------------------------------------------------------


def classify_error(exc: BaseException) -> tuple[ErrorKind, str]:
    """Map an exception from the SDK (or the network below it) to an error kind."""
    import openai

    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return "auth", _status_text(exc)
    if isinstance(exc, openai.RateLimitError):
        return "rate_limit", _status_text(exc)
    if isinstance(exc, openai.InternalServerError):
        return "unavailable", _status_text(exc)
    if isinstance(exc, openai.APIStatusError):
        return ("timeout" if exc.status_code == 408 else "other"), _status_text(exc)
    # APITimeoutError is a subclass of APIConnectionError, so test it first.
    if isinstance(exc, openai.APITimeoutError):
        return "timeout", "the model API did not answer in time"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        detail = f" ({type(cause).__name__}: {cause})" if cause else ""
        return "unavailable", f"connection to the model API failed{detail}"
    network = transport_error(exc)
    if network is not None:
        return network
    return "other", f"{type(exc).__name__}: {exc}"


def _stream_error_kind(code: str | None, type_: str | None) -> ErrorKind:
    tags = {code or "", type_ or ""}
    if tags & {"rate_limit_exceeded", "rate_limit_error", "insufficient_quota"}:
        return "rate_limit"
    if tags & {"server_error", "overloaded_error", "api_error", "service_unavailable"}:
        return "unavailable"
    if tags & {"invalid_api_key", "authentication_error", "permission_error"}:
        return "auth"
    return "other"


def _status_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    api_message = body.get("message") if isinstance(body, dict) else None
    return status_message(
        exc.status_code,
        api_message if isinstance(api_message, str) else None,
        exc.message,
    )


# --- helpers ------------------------------------------------------------------------


def _missing_key_message() -> str:
    return (
        "MissingApiKey: no API key for the OpenAI-compatible provider "
        "(set APPSERVER_API_KEY, OPENAI_API_KEY or ApiKey in .craft/config.json)"
    )


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
