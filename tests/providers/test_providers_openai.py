"""OpenAIProvider against a loopback server speaking the real Chat Completions SSE format."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from appserver.providers import make_provider, resolve_settings
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
from appserver.providers.openai_compat import OpenAIProvider, _is_official_openai
from tests.support.fake_models import (
    FakeModelServer,
    Reply,
    closed_port,
    collect,
    fake_model_server,
    openai_chunk,
    openai_error,
    openai_models,
    openai_stream,
    openai_text_reply,
)

CHAT = "POST /v1/chat/completions"
SHELL = ToolSpec(
    "shell",
    "Run a command",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)


def hello(**kwargs: object) -> ModelRequest:
    return ModelRequest(model="fake-model", messages=[Message("user", "hello")], **kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with fake_model_server() as server:
        yield server


@pytest.fixture
async def provider(fake: FakeModelServer) -> AsyncIterator[OpenAIProvider]:
    p = OpenAIProvider(api_key="sk-test", base_url=fake.openai_base_url, max_retries=0, timeout=5)
    yield p
    await p.aclose()


async def test_text_streams_in_deltas_then_usage_and_stop(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    fake.script(CHAT, openai_text_reply(["Hel", "lo ", "world"], usage=(12, 3)))
    events = await collect(provider.stream(hello(system="Be brief.")))
    assert events == [
        TextDelta("Hel"),
        TextDelta("lo "),
        TextDelta("world"),
        Usage(12, 3),
        Stop("end_turn"),
    ]
    [request] = fake.requests
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body == {
        "model": "fake-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello"},
        ],
        "max_tokens": 4096,  # a compatible server gets the classic parameter
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_empty_model_uses_the_default_model(fake: FakeModelServer) -> None:
    p = OpenAIProvider(api_key="k", base_url=fake.openai_base_url, model="my-model", max_retries=0)
    fake.script(CHAT, openai_text_reply(["ok"]))
    await collect(p.stream(ModelRequest(model="", messages=[Message("user", "hi")])))
    await p.aclose()
    assert p.default_model == "my-model"
    assert fake.bodies(CHAT)[0]["model"] == "my-model"


async def test_tool_calls_are_assembled_across_chunks(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    def call(index: int, **fields: object) -> dict[str, object]:
        return {"tool_calls": [{"index": index, **fields}]}

    fake.script(
        CHAT,
        openai_stream(
            [
                openai_chunk({"role": "assistant", "content": None}),
                openai_chunk(
                    call(
                        0, id="call_a", type="function", function={"name": "shell", "arguments": ""}
                    )
                ),
                openai_chunk(call(0, function={"arguments": '{"comm'})),
                openai_chunk(call(0, function={"arguments": 'and": "ls -la"}'})),
                openai_chunk(call(1, id="call_b", type="function", function={"name": "read_file"})),
                openai_chunk(call(1, function={"arguments": '{"path": '})),
                openai_chunk(call(1, function={"arguments": '"a.txt"}'})),
                openai_chunk({}, finish_reason="tool_calls"),
                openai_chunk(no_choices=True, usage=(40, 25)),
            ]
        ),
    )
    events = await collect(provider.stream(hello(tools=[SHELL])))
    assert events == [
        ToolCallDelta(0, "", call_id="call_a", name="shell"),
        ToolCallDelta(0, '{"comm'),
        ToolCallDelta(0, 'and": "ls -la"}'),
        ToolCallDelta(1, "", call_id="call_b", name="read_file"),
        ToolCallDelta(1, '{"path": '),
        ToolCallDelta(1, '"a.txt"}'),
        ToolCallDone(0, ToolCall("call_a", "shell", {"command": "ls -la"})),
        ToolCallDone(1, ToolCall("call_b", "read_file", {"path": "a.txt"})),
        Usage(40, 25),
        Stop("tool_calls"),
    ]
    assert fake.bodies(CHAT)[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "shell",
                "description": "Run a command",
                "parameters": SHELL.input_schema,
            },
        }
    ]


async def test_unparsable_arguments_become_an_arguments_error(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    fake.script(
        CHAT,
        openai_stream(
            [
                openai_chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_x",
                                "type": "function",
                                "function": {"name": "shell", "arguments": '{"command": "ls'},
                            }
                        ]
                    }
                ),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        ),
    )
    events = await collect(provider.stream(hello()))
    [done] = [e for e in events if isinstance(e, ToolCallDone)]
    assert (done.call.call_id, done.call.name, done.call.arguments) == ("call_x", "shell", {})
    assert done.arguments_error is not None and "not valid JSON" in done.arguments_error
    assert events[-1] == Stop("tool_calls")


async def test_compatible_server_quirks_missing_ids_and_stop_after_tool_calls(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    # Some compatible servers send no call id and finish with "stop" after a tool call.
    fake.script(
        CHAT,
        openai_stream(
            [
                openai_chunk(
                    {"tool_calls": [{"index": 0, "function": {"name": "shell", "arguments": "{}"}}]}
                ),
                openai_chunk({}, finish_reason="stop"),
            ]
        ),
    )
    events = await collect(provider.stream(hello()))
    assert events == [
        ToolCallDelta(0, "{}", call_id="call_0", name="shell"),
        ToolCallDone(0, ToolCall("call_0", "shell", {})),
        Stop("tool_calls"),
    ]


async def test_reasoning_content_becomes_reasoning_deltas(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    fake.script(
        CHAT,
        openai_stream(
            [
                openai_chunk({"role": "assistant", "reasoning_content": "Think"}),
                openai_chunk({"reasoning_content": "ing..."}),
                openai_chunk({"reasoning": "more"}),
                openai_chunk({"content": "Answer"}),
                openai_chunk({}, finish_reason="stop", usage=(5, 4)),
            ]
        ),
    )
    events = await collect(provider.stream(hello()))
    assert events == [
        ReasoningDelta("Think"),
        ReasoningDelta("ing..."),
        ReasoningDelta("more"),
        TextDelta("Answer"),
        Usage(5, 4),
        Stop("end_turn"),
    ]


@pytest.mark.parametrize(
    ("finish_reason", "reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "content_filter"),
        (None, "end_turn"),
    ],
)
async def test_finish_reasons_map_to_stop_reasons(
    fake: FakeModelServer, provider: OpenAIProvider, finish_reason: str | None, reason: str
) -> None:
    chunks = [openai_chunk({"content": "x"})]
    if finish_reason:
        chunks.append(openai_chunk({}, finish_reason=finish_reason))
    fake.script(CHAT, openai_stream(chunks))
    events = await collect(provider.stream(hello()))
    assert events == [TextDelta("x"), Stop(reason)]


@pytest.mark.parametrize(
    ("status", "type_", "kind"),
    [
        (401, "invalid_request_error", "auth"),
        (403, "permission_error", "auth"),
        (429, "rate_limit_exceeded", "rate_limit"),
        (500, "server_error", "unavailable"),
        (503, "server_error", "unavailable"),
        (408, "timeout", "timeout"),
        (400, "invalid_request_error", "other"),
        (404, "invalid_request_error", "other"),
    ],
)
async def test_http_errors_map_to_error_kinds(
    fake: FakeModelServer, provider: OpenAIProvider, status: int, type_: str, kind: str
) -> None:
    fake.script(CHAT, openai_error(status, "Something specific went wrong", type_=type_))
    events = await collect(provider.stream(hello()))
    assert events == [
        ProviderError(
            kind,  # type: ignore[arg-type]
            f"HTTP {status} from POST {fake.openai_base_url}/chat/completions: "
            "Something specific went wrong",
        )
    ]
    assert len(fake.requests) == 1  # max_retries=0: no retry


async def test_error_object_inside_the_stream(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    error = {"error": {"message": "Overloaded", "type": "server_error", "code": "server_error"}}
    fake.script(CHAT, openai_stream([openai_chunk({"content": "par"}), error]))
    events = await collect(provider.stream(hello()))
    assert events == [TextDelta("par"), ProviderError("unavailable", "Overloaded")]


async def test_request_timeout_is_a_timeout(fake: FakeModelServer) -> None:
    p = OpenAIProvider(api_key="k", base_url=fake.openai_base_url, max_retries=0, timeout=0.2)
    fake.script(CHAT, Reply(hang=True))
    events = await collect(p.stream(hello()))
    await p.aclose()
    assert [type(e) for e in events] == [ProviderError]
    assert events[0].kind == "timeout"


async def test_stall_mid_stream_is_a_timeout_after_the_deltas(fake: FakeModelServer) -> None:
    # 1 s, not less: on a loaded machine the first deltas can take longer than a
    # tighter read timeout, which then fires before them.
    p = OpenAIProvider(api_key="k", base_url=fake.openai_base_url, max_retries=0, timeout=1.0)
    reply = openai_text_reply(["a", "b", "c"])
    reply.stall_after = 3  # role chunk, "a", "b"
    fake.script(CHAT, reply)
    events = await collect(p.stream(hello()))
    await p.aclose()
    assert events[:2] == [TextDelta("a"), TextDelta("b")]
    assert isinstance(events[2], ProviderError) and events[2].kind == "timeout"
    assert len(events) == 3


async def test_connection_dropped_mid_stream_is_unavailable(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    reply = openai_text_reply(["a", "b", "c"])
    reply.drop_after = 2
    fake.script(CHAT, reply)
    events = await collect(provider.stream(hello()))
    assert events[0] == TextDelta("a")
    assert isinstance(events[-1], ProviderError) and events[-1].kind == "unavailable"


async def test_connection_refused_is_unavailable() -> None:
    p = OpenAIProvider(
        api_key="k", base_url=f"http://127.0.0.1:{closed_port()}/v1", max_retries=0, timeout=2
    )
    events = await collect(p.stream(hello()))
    await p.aclose()
    assert [(type(e), getattr(e, "kind", None)) for e in events] == [(ProviderError, "unavailable")]


async def test_missing_api_key_fails_without_a_request() -> None:
    """OpenAI's own API without a key: nothing is sent."""
    p = OpenAIProvider(api_key=None)
    events = await collect(p.stream(hello()))
    assert len(events) == 1 and isinstance(events[0], ProviderError)
    assert events[0].kind == "auth" and events[0].message.startswith("MissingApiKey")
    assert "OPENAI_API_KEY" in events[0].message and ".craft" not in events[0].message
    with pytest.raises(ProviderUnavailable) as info:
        await p.list_models()
    assert info.value.code == "MissingApiKey"


async def test_another_endpoint_is_asked_without_a_key(fake: FakeModelServer) -> None:
    """A local server (Ollama, vLLM) needs none; one that wants a key says which."""
    p = OpenAIProvider(api_key=None, base_url=fake.openai_base_url)
    fake.script(CHAT, openai_text_reply(["hi"]))
    fake.script(CHAT, openai_error(401, "no key", type_="invalid_request_error"))
    try:
        assert TextDelta("hi") in await collect(p.stream(hello()))
        (refused,) = await collect(p.stream(hello()))
    finally:
        await p.aclose()
    assert "authorization" not in fake.requests[0].headers
    assert isinstance(refused, ProviderError) and refused.kind == "auth"
    assert refused.message.endswith(
        "(no API key for the OpenAI-compatible provider (set "
        "APPSERVER_API_KEY or OPENAI_API_KEY, or apiKey with workspace/config/update))"
    )


async def test_cancellation_propagates_and_closes_the_stream(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    reply = openai_text_reply(["a", "b"])
    reply.stall_after = 2  # the server stops after "a" and would never finish
    fake.script(CHAT, reply)
    seen = []
    with anyio.CancelScope() as scope:
        async for event in provider.stream(hello()):
            seen.append(event)
            scope.cancel()
    assert scope.cancelled_caught
    assert seen == [TextDelta("a")]


async def test_early_exit_closes_the_stream(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    reply = openai_text_reply(["a", "b"])
    reply.stall_after = 2
    fake.script(CHAT, reply, openai_text_reply(["again"]))
    stream = provider.stream(hello())
    assert await anext(stream) == TextDelta("a")
    await stream.aclose()  # type: ignore[attr-defined]
    # The provider still works afterwards (a fresh connection is used).
    assert (await collect(provider.stream(hello())))[0] == TextDelta("again")


async def test_message_conversion(fake: FakeModelServer, provider: OpenAIProvider) -> None:
    fake.script(CHAT, openai_text_reply(["done"]))
    request = ModelRequest(
        model="fake-model",
        system="You are a coding agent.",
        messages=[
            Message("user", "What is in this picture?", images=[ImagePart("image/png", "iVBOR")]),
            Message(
                "assistant",
                "",
                tool_calls=[
                    ToolCall("call_1", "shell", {"command": "ls"}),
                    ToolCall("call_2", "read_file", {"path": "a.txt"}),
                ],
            ),
            Message("tool", "exit code: 0\na.txt", tool_call_id="call_1", tool_name="shell"),
            Message("tool", "hello", tool_call_id="call_2", tool_name="read_file"),
            Message("assistant", "It is a cat."),
            Message("system", "Note: the user is in a hurry."),
            Message("user", "Thanks"),
        ],
        max_tokens=256,
    )
    await collect(provider.stream(request))
    body = fake.bodies(CHAT)[0]
    assert body["max_tokens"] == 256
    assert body["messages"] == [
        {"role": "system", "content": "You are a coding agent."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"command": "ls"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "exit code: 0\na.txt"},
        {"role": "tool", "tool_call_id": "call_2", "content": "hello"},
        {"role": "assistant", "content": "It is a cat."},
        {"role": "system", "content": "Note: the user is in a hurry."},
        {"role": "user", "content": "Thanks"},
    ]


def test_official_endpoint_detection() -> None:
    # OpenAI itself wants max_completion_tokens; compatible servers get max_tokens.
    assert _is_official_openai(None)
    assert _is_official_openai("https://api.openai.com/v1")
    assert not _is_official_openai("https://dashscope.aliyuncs.com/compatible-mode/v1")
    assert OpenAIProvider(
        api_key="k", base_url="https://dashscope.aliyuncs.com/compatible-mode/v1"
    ).default_model == ("qwen-plus")


async def test_list_models(fake: FakeModelServer, provider: OpenAIProvider) -> None:
    fake.script("GET /v1/models", openai_models("gpt-a", "gpt-b"))
    models = await provider.list_models()
    assert models == [
        ModelInfo("gpt-a", owned_by="fake", created_at="2023-11-14T22:13:20Z"),
        ModelInfo("gpt-b", owned_by="fake", created_at="2023-11-14T22:13:20Z"),
    ]


@pytest.mark.parametrize(
    ("status", "code"),
    [(401, "Unauthorized"), (429, "RateLimited"), (500, "Unavailable"), (404, "ProviderError")],
)
async def test_list_models_failure(
    fake: FakeModelServer, provider: OpenAIProvider, status: int, code: str
) -> None:
    fake.script("GET /v1/models", openai_error(status, "nope", type_="error"))
    with pytest.raises(ProviderUnavailable) as info:
        await provider.list_models()
    assert info.value.code == code
    assert "nope" in info.value.message


async def test_tool_calls_without_index_are_told_apart_by_id(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    # Some compatible servers omit ``index``: each new id is a new call.
    def call(**fields: object) -> dict[str, object]:
        return {"tool_calls": [fields]}

    fake.script(
        CHAT,
        openai_stream(
            [
                openai_chunk(call(id="c1", function={"name": "shell", "arguments": '{"command"'})),
                openai_chunk(call(function={"arguments": ': "ls"}'})),
                openai_chunk(call(id="c2", function={"name": "read_file", "arguments": "{}"})),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        ),
    )
    events = await collect(provider.stream(hello()))
    assert [e for e in events if isinstance(e, ToolCallDone)] == [
        ToolCallDone(0, ToolCall("c1", "shell", {"command": "ls"})),
        ToolCallDone(1, ToolCall("c2", "read_file", {})),
    ]


# --- what the official SDK does, done the same way --------------------------------------


async def test_a_rate_limited_request_is_retried(fake: FakeModelServer) -> None:
    p = OpenAIProvider(api_key="sk-test", base_url=fake.openai_base_url, max_retries=1, timeout=5)
    busy = openai_error(429, "slow down", type_="rate_limit_exceeded")
    busy.headers["retry-after-ms"] = "1"
    fake.script(CHAT, busy, openai_text_reply(["after ", "retry"]))
    events = await collect(p.stream(hello()))
    await p.aclose()
    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta("after "),
        TextDelta("retry"),
    ]
    assert len(fake.requests) == 2


async def test_organisation_and_project_settings_reach_the_request(
    fake: FakeModelServer,
) -> None:
    env = {"OPENAI_ORG_ID": "org-team", "OPENAI_PROJECT_ID": "proj-one", "OPENAI_API_KEY": "sk-t"}
    settings = resolve_settings(
        {"provider": "openai", "base_url": fake.openai_base_url, "max_retries": 0}, env, {}
    )
    p = make_provider(settings)
    fake.script(CHAT, openai_text_reply(["ok"]))
    await collect(p.stream(hello()))
    await p.aclose()
    headers = fake.requests[0].headers
    assert headers["authorization"] == "Bearer sk-t"
    assert headers["openai-organization"] == "org-team"
    assert headers["openai-project"] == "proj-one"


async def test_event_stream_framing_variants_are_read(
    fake: FakeModelServer, provider: OpenAIProvider
) -> None:
    # A named event, and one JSON object split over two data lines (joined
    # with a newline, still valid JSON); comments and other framing are in
    # test_server_sent_events_parser.
    split = '{"choices": [{"index": 0,\ndata: "delta": {"content": "two"}}]}'
    reply = openai_stream([openai_chunk({"content": "one"}), openai_chunk({"content": "-"})])
    assert reply.sse is not None
    reply.sse.insert(2, ("chunk", split))
    fake.script(CHAT, reply)
    events = await collect(provider.stream(hello()))
    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta("one"),
        TextDelta("-"),
        TextDelta("two"),
    ]


async def test_server_sent_events_parser() -> None:
    from appserver.providers._common import server_sent_events

    body = (
        b": comment\n"
        b"event: message_start\r\n"
        b'data: {"a": 1}\r\n'
        b"\r\n"
        b"\n"
        b"data:x\rdata: y\n"
        b"id: 7\n"
        b"retry: 10\n"
        b"\n"
        b"event: ping\n"
        b"\n"
        b"data: caf\xc3\xa9 without a blank line"
    )

    async def chunks(size: int) -> AsyncIterator[bytes]:
        for start in range(0, len(body), size):
            yield body[start : start + size]

    expected = [
        ("message_start", '{"a": 1}'),
        ("", "x\ny"),
        ("", "café without a blank line"),
    ]
    # Any split of the body, including between a CR and its LF, reads the same.
    for size in (1, 2, 3, 7, len(body)):
        assert [event async for event in server_sent_events(chunks(size))] == expected
