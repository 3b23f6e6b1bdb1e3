"""AnthropicProvider against a loopback server speaking the real Messages SSE format."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from appserver.providers.anthropic_provider import AnthropicProvider
from appserver.providers.base import (
    ImagePart,
    Message,
    ModelInfo,
    ModelRequest,
    ProviderError,
    ProviderUnavailable,
    ReasoningDelta,
    Stop,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    ToolSpec,
    Usage,
)
from tests.support.fake_models import (
    FakeModelServer,
    Reply,
    Text,
    Thinking,
    ToolUse,
    anthropic_error,
    anthropic_models,
    anthropic_stream,
    closed_port,
    collect,
    fake_model_server,
)

MESSAGES = "POST /v1/messages"
SHELL = ToolSpec(
    "shell",
    "Run a command",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)


def hello(**kwargs: object) -> ModelRequest:
    return ModelRequest(model="claude-test", messages=[Message("user", "hello")], **kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with fake_model_server() as server:
        yield server


@pytest.fixture
async def provider(fake: FakeModelServer) -> AsyncIterator[AnthropicProvider]:
    p = AnthropicProvider(api_key="sk-ant-test", base_url=fake.base_url, max_retries=0, timeout=5)
    yield p
    await p.aclose()


async def test_text_streams_in_deltas_then_usage_and_stop(
    fake: FakeModelServer, provider: AnthropicProvider
) -> None:
    fake.script(
        MESSAGES,
        anthropic_stream(
            [Text(["Hel", "lo ", "world"])],
            input_tokens=20,
            cache_read_input_tokens=100,
            output_tokens=6,
        ),
    )
    events = await collect(provider.stream(hello(system="Be brief.")))
    assert events == [
        TextDelta("Hel"),
        TextDelta("lo "),
        TextDelta("world"),
        Usage(120, 6),  # input counts cache reads; output is message_delta's cumulative count
        Stop("end_turn"),
    ]
    [request] = fake.requests
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
        "stream": True,
    }


async def test_thinking_becomes_reasoning(
    fake: FakeModelServer, provider: AnthropicProvider
) -> None:
    fake.script(MESSAGES, anthropic_stream([Thinking(["Let me ", "think."]), Text(["Answer"])]))
    events = await collect(provider.stream(hello()))
    assert events == [
        ReasoningDelta("Let me "),
        ReasoningDelta("think."),
        TextDelta("Answer"),
        Usage(21, 9),
        Stop("end_turn"),
    ]


async def test_tool_use_blocks_are_assembled(
    fake: FakeModelServer, provider: AnthropicProvider
) -> None:
    fake.script(
        MESSAGES,
        anthropic_stream(
            [
                Text(["Let me look."]),
                ToolUse("toolu_01", "shell", ['{"comm', 'and": "ls -la"}']),
                ToolUse("toolu_02", "read_file", ["", '{"path": "a.txt"}']),
            ],
            stop_reason="tool_use",
        ),
    )
    events = await collect(provider.stream(hello(tools=[SHELL])))
    # Tool calls are numbered 0, 1 although the API's block indexes are 1 and 2.
    assert events == [
        TextDelta("Let me look."),
        ToolCallDelta(0, "", call_id="toolu_01", name="shell"),
        ToolCallDelta(0, '{"comm'),
        ToolCallDelta(0, 'and": "ls -la"}'),
        ToolCallDone(0, ToolCall("toolu_01", "shell", {"command": "ls -la"})),
        ToolCallDelta(1, "", call_id="toolu_02", name="read_file"),
        ToolCallDelta(1, '{"path": "a.txt"}'),
        ToolCallDone(1, ToolCall("toolu_02", "read_file", {"path": "a.txt"})),
        Usage(21, 9),
        Stop("tool_calls"),
    ]
    assert fake.bodies(MESSAGES)[0]["tools"] == [
        {"name": "shell", "description": "Run a command", "input_schema": SHELL.input_schema}
    ]


async def test_tool_without_input_and_unparsable_input(
    fake: FakeModelServer, provider: AnthropicProvider
) -> None:
    fake.script(
        MESSAGES,
        anthropic_stream(
            [ToolUse("toolu_a", "list", []), ToolUse("toolu_b", "shell", ['{"command": '])],
            stop_reason="tool_use",
        ),
    )
    events = await collect(provider.stream(hello()))
    done = [e for e in events if isinstance(e, ToolCallDone)]
    assert done[0] == ToolCallDone(0, ToolCall("toolu_a", "list", {}))
    assert (done[1].call.call_id, done[1].call.name, done[1].call.arguments) == (
        "toolu_b",
        "shell",
        {},
    )
    assert done[1].arguments_error is not None


@pytest.mark.parametrize(
    ("stop_reason", "reason"),
    [
        ("end_turn", "end_turn"),
        ("stop_sequence", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("tool_use", "tool_calls"),
        ("refusal", "refusal"),
    ],
)
async def test_stop_reasons(
    fake: FakeModelServer, provider: AnthropicProvider, stop_reason: str, reason: str
) -> None:
    fake.script(MESSAGES, anthropic_stream([Text(["x"])], stop_reason=stop_reason))
    events = await collect(provider.stream(hello()))
    assert events[-1] == Stop(reason)


@pytest.mark.parametrize(
    ("status", "type_", "kind"),
    [
        (401, "authentication_error", "auth"),
        (403, "permission_error", "auth"),
        (429, "rate_limit_error", "rate_limit"),
        (500, "api_error", "unavailable"),
        (529, "overloaded_error", "unavailable"),
        (408, "timeout_error", "timeout"),
        (400, "invalid_request_error", "other"),
        (404, "not_found_error", "other"),
    ],
)
async def test_http_errors_map_to_error_kinds(
    fake: FakeModelServer, provider: AnthropicProvider, status: int, type_: str, kind: str
) -> None:
    fake.script(MESSAGES, anthropic_error(status, "Something specific", type_=type_))
    events = await collect(provider.stream(hello()))
    tried = f"POST {fake.base_url}/v1/messages"
    assert events == [ProviderError(kind, f"HTTP {status} from {tried}: Something specific")]  # type: ignore[arg-type]
    assert len(fake.requests) == 1  # max_retries=0: no retry


@pytest.mark.parametrize(
    ("type_", "kind"),
    [("overloaded_error", "unavailable"), ("rate_limit_error", "rate_limit"), ("weird", "other")],
)
async def test_error_event_inside_the_stream(
    fake: FakeModelServer, provider: AnthropicProvider, type_: str, kind: str
) -> None:
    reply = anthropic_stream([Text(["par", "tial"])])
    # Cut the stream after the first text delta and send an SSE error event instead.
    assert reply.sse is not None
    error = {"type": "error", "error": {"type": type_, "message": "Overloaded"}}
    reply.sse = [*reply.sse[:4], ("error", error)]
    fake.script(MESSAGES, reply)
    events = await collect(provider.stream(hello()))
    assert events == [TextDelta("par"), ProviderError(kind, f"{type_}: Overloaded")]  # type: ignore[arg-type]


async def test_request_timeout_is_a_timeout(fake: FakeModelServer) -> None:
    p = AnthropicProvider(api_key="k", base_url=fake.base_url, max_retries=0, timeout=0.2)
    fake.script(MESSAGES, Reply(hang=True))
    events = await collect(p.stream(hello()))
    await p.aclose()
    assert [(type(e), getattr(e, "kind", None)) for e in events] == [(ProviderError, "timeout")]


async def test_stall_mid_stream_is_a_timeout_after_the_deltas(fake: FakeModelServer) -> None:
    # The SDK lets the raw httpx2 ReadTimeout escape here; it must still be mapped.
    # 1 s, not less: on a loaded 2-core machine the first deltas can take longer
    # than a tighter read timeout, which then fires before them.
    p = AnthropicProvider(api_key="k", base_url=fake.base_url, max_retries=0, timeout=1.0)
    reply = anthropic_stream([Text(["a", "b"])])
    reply.stall_after = 4  # message_start, ping, content_block_start, "a"
    fake.script(MESSAGES, reply)
    events = await collect(p.stream(hello()))
    await p.aclose()
    assert events[0] == TextDelta("a")
    assert isinstance(events[1], ProviderError) and events[1].kind == "timeout"
    assert len(events) == 2


async def test_connection_dropped_mid_stream_is_unavailable(
    fake: FakeModelServer, provider: AnthropicProvider
) -> None:
    reply = anthropic_stream([Text(["a", "b"])])
    reply.drop_after = 4
    fake.script(MESSAGES, reply)
    events = await collect(provider.stream(hello()))
    assert events[0] == TextDelta("a")
    assert isinstance(events[1], ProviderError) and events[1].kind == "unavailable"


async def test_connection_refused_is_unavailable() -> None:
    p = AnthropicProvider(
        api_key="k", base_url=f"http://127.0.0.1:{closed_port()}", max_retries=0, timeout=2
    )
    events = await collect(p.stream(hello()))
    await p.aclose()
    assert [(type(e), getattr(e, "kind", None)) for e in events] == [(ProviderError, "unavailable")]


async def test_missing_api_key_fails_without_a_request() -> None:
    """Anthropic's own API without a key: nothing is sent (another endpoint
    is asked without one, as for the OpenAI-compatible provider)."""
    p = AnthropicProvider(api_key=None)
    events = await collect(p.stream(hello()))
    assert len(events) == 1 and isinstance(events[0], ProviderError)
    assert events[0].kind == "auth" and events[0].message.startswith("MissingApiKey")
    assert "ANTHROPIC_API_KEY" in events[0].message
    with pytest.raises(ProviderUnavailable) as info:
        await p.list_models()
    assert info.value.code == "MissingApiKey"


async def test_cancellation_propagates(fake: FakeModelServer, provider: AnthropicProvider) -> None:
    reply = anthropic_stream([Text(["a", "b"])])
    reply.stall_after = 4
    fake.script(MESSAGES, reply)
    seen = []
    with anyio.CancelScope() as scope:
        async for event in provider.stream(hello()):
            seen.append(event)
            scope.cancel()
    assert scope.cancelled_caught
    assert seen == [TextDelta("a")]


async def test_message_conversion(fake: FakeModelServer, provider: AnthropicProvider) -> None:
    fake.script(MESSAGES, anthropic_stream([Text(["ok"])]))
    request = ModelRequest(
        model="claude-test",
        system="You are a coding agent.",
        messages=[
            Message("user", "What is this?", images=[ImagePart("image/png", "iVBOR")]),
            Message(
                "assistant",
                "Let me check.",
                tool_calls=[
                    ToolCall("call_1", "shell", {"command": "ls"}),
                    # An id minted by another provider, with characters Anthropic rejects.
                    ToolCall("call.2:x", "read_file", {"path": "a.txt"}),
                ],
            ),
            Message("tool", "exit code: 0\na.txt", tool_call_id="call_1", tool_name="shell"),
            Message("tool", "hello", tool_call_id="call.2:x", tool_name="read_file"),
            Message("user", "Also, hurry."),  # steering right after tool results
            Message("system", "The user is in a hurry."),
            Message("assistant", "It is a cat."),
            Message("user", ""),
        ],
        max_tokens=256,
    )
    await collect(provider.stream(request))
    body = fake.bodies(MESSAGES)[0]
    assert body["max_tokens"] == 256
    assert body["system"] == "You are a coding agent.\n\nThe user is in a hurry."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"},
                },
                {"type": "text", "text": "What is this?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "call_1", "name": "shell", "input": {"command": "ls"}},
                {
                    "type": "tool_use",
                    "id": "call_2_x",
                    "name": "read_file",
                    "input": {"path": "a.txt"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "exit code: 0\na.txt"},
                {"type": "tool_result", "tool_use_id": "call_2_x", "content": "hello"},
                {"type": "text", "text": "Also, hurry."},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "It is a cat."}]},
        {"role": "user", "content": [{"type": "text", "text": "(empty message)"}]},
    ]


async def test_list_models(fake: FakeModelServer, provider: AnthropicProvider) -> None:
    fake.script("GET /v1/models", anthropic_models("claude-a", "claude-b"))
    models = await provider.list_models()
    assert models == [
        ModelInfo("claude-a", owned_by="anthropic", created_at="2025-02-19T00:00:00Z"),
        ModelInfo("claude-b", owned_by="anthropic", created_at="2025-02-19T00:00:00Z"),
    ]


@pytest.mark.parametrize(
    ("status", "type_", "code"),
    [
        (401, "authentication_error", "Unauthorized"),
        (429, "rate_limit_error", "RateLimited"),
        (529, "overloaded_error", "Unavailable"),
        (400, "invalid_request_error", "ProviderError"),
    ],
)
async def test_list_models_failure(
    fake: FakeModelServer, provider: AnthropicProvider, status: int, type_: str, code: str
) -> None:
    fake.script("GET /v1/models", anthropic_error(status, "nope", type_=type_))
    with pytest.raises(ProviderUnavailable) as info:
        await provider.list_models()
    assert info.value.code == code
    assert "nope" in info.value.message


async def test_an_overloaded_request_is_retried(fake: FakeModelServer) -> None:
    p = AnthropicProvider(api_key="k", base_url=fake.base_url, max_retries=1, timeout=5)
    busy = anthropic_error(529, "Overloaded", type_="overloaded_error")
    busy.headers["retry-after-ms"] = "1"
    fake.script(MESSAGES, busy, anthropic_stream([Text(["after ", "retry"])]))
    events = await collect(p.stream(hello()))
    await p.aclose()
    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta("after "),
        TextDelta("retry"),
    ]
    assert len(fake.requests) == 2


async def test_an_error_event_that_is_not_json_keeps_its_text(
    fake: FakeModelServer, provider: AnthropicProvider
) -> None:
    reply = anthropic_stream([Text(["par"])])
    assert reply.sse is not None
    reply.sse = [*reply.sse[:4], ("error", "upstream went away")]
    fake.script(MESSAGES, reply)
    events = await collect(provider.stream(hello()))
    assert events == [TextDelta("par"), ProviderError("other", "error: upstream went away")]
