"""Model APIs that misbehave, each found by a helper driving the providers with
fake servers: a stream cut off cleanly, a 200 that is no stream, megabytes of
error page, an event line of megabytes, a body left open after the answer,
repeated tool-call ids, usage that is no count, an unknown event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from appserver.providers._common import MAX_SSE_LINE
from appserver.providers.anthropic_provider import AnthropicProvider
from appserver.providers.base import (
    Message,
    ModelRequest,
    ProviderError,
    Stop,
    TextDelta,
    ToolCallDone,
    Usage,
)
from appserver.providers.http import ERROR_MESSAGE_CHARS
from appserver.providers.openai_compat import OpenAIProvider
from tests.support.fake_models import (
    FakeModelServer,
    Reply,
    Text,
    anthropic_stream,
    collect,
    fake_model_server,
    openai_chunk,
    openai_text_reply,
)

CHAT = "POST /v1/chat/completions"
MESSAGES = "POST /v1/messages"


def hello() -> ModelRequest:
    return ModelRequest(model="fake-model", messages=[Message("user", "hello")])


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with fake_model_server() as server:
        yield server


@pytest.fixture
async def openai(fake: FakeModelServer) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(api_key="k", base_url=fake.openai_base_url, max_retries=0, timeout=5)
    yield provider
    await provider.aclose()


@pytest.fixture
async def anthropic(fake: FakeModelServer) -> AsyncIterator[AnthropicProvider]:
    provider = AnthropicProvider(api_key="k", base_url=fake.base_url, max_retries=0, timeout=5)
    yield provider
    await provider.aclose()


def failure(events: list[Any]) -> ProviderError:
    last = events[-1]
    assert isinstance(last, ProviderError), events
    return last


async def test_a_stream_cut_off_cleanly_is_not_a_complete_answer(
    fake: FakeModelServer, openai: OpenAIProvider, anthropic: AnthropicProvider
) -> None:
    # No finish reason and no [DONE]; no message_delta and no message_stop.
    fake.script(CHAT, Reply(sse=[(None, openai_chunk({"content": "one two"}))]))
    events = await collect(openai.stream(hello()))
    assert events[0] == TextDelta("one two")
    assert failure(events).kind == "unavailable"
    assert "ended before its answer did" in failure(events).message
    whole = anthropic_stream([Text(["one two"])])
    assert whole.sse is not None
    fake.script(MESSAGES, Reply(sse=whole.sse[:4]))  # start, block start, one delta, block stop
    events = await collect(anthropic.stream(hello()))
    assert TextDelta("one two") in events and failure(events).kind == "unavailable"


async def test_a_finish_reason_without_done_is_still_complete(
    fake: FakeModelServer, openai: OpenAIProvider
) -> None:
    reply = openai_text_reply(["a"])
    assert reply.sse is not None
    fake.script(CHAT, Reply(sse=reply.sse[:-1]))  # no [DONE]: some servers end so
    events = await collect(openai.stream(hello()))
    assert isinstance(events[-1], Stop)


async def test_a_success_that_is_no_event_stream_is_an_error(
    fake: FakeModelServer, openai: OpenAIProvider, anthropic: AnthropicProvider
) -> None:
    fake.script(CHAT, Reply(body={"error": {"message": "quota used up"}}))
    events = await collect(openai.stream(hello()))
    assert failure(events).message == (
        "the model API answered application/json, not an event stream: quota used up"
    )
    fake.script(MESSAGES, Reply(body={"content": [{"type": "text", "text": "whole"}]}))
    events = await collect(anthropic.stream(hello()))
    assert "not an event stream" in failure(events).message


async def test_an_error_page_of_megabytes_is_cut(
    fake: FakeModelServer, openai: OpenAIProvider
) -> None:
    fake.script(CHAT, Reply(status=404, body="<html>" + "x" * 4_000_000 + "</html>"))
    message = failure(await collect(openai.stream(hello()))).message
    assert len(message) < ERROR_MESSAGE_CHARS + 200 and message.endswith("(cut)")


async def test_an_event_line_past_the_bound_fails_the_call(
    fake: FakeModelServer, openai: OpenAIProvider
) -> None:
    huge = openai_chunk({"content": "x" * (MAX_SSE_LINE + 10)})
    fake.script(CHAT, Reply(sse=[(None, huge), (None, "[DONE]")]))
    events = await collect(openai.stream(hello()))
    assert f"longer than {MAX_SSE_LINE} bytes" in failure(events).message


async def test_an_answer_whose_body_is_left_open_completes(
    fake: FakeModelServer, anthropic: AnthropicProvider
) -> None:
    reply = anthropic_stream([Text(["all of it"])])
    assert reply.sse is not None
    reply.stall_after = len(reply.sse)  # message_stop sent, the body never ends
    fake.script(MESSAGES, reply)
    events = await collect(anthropic.stream(hello()))
    assert TextDelta("all of it") in events and isinstance(events[-1], Stop)


async def test_an_unknown_event_is_skipped_whatever_its_data(
    fake: FakeModelServer, anthropic: AnthropicProvider
) -> None:
    reply = anthropic_stream([Text(["fine"])])
    assert reply.sse is not None
    reply.sse.insert(1, ("future_event", "not json at all"))
    fake.script(MESSAGES, reply)
    events = await collect(anthropic.stream(hello()))
    assert TextDelta("fine") in events and isinstance(events[-1], Stop)


async def test_a_repeated_tool_call_id_is_made_unique(
    fake: FakeModelServer, openai: OpenAIProvider
) -> None:
    def call(index: int) -> dict[str, Any]:
        return {
            "index": index,
            "id": "call_same",
            "type": "function",
            "function": {"name": "shell", "arguments": '{"command": "ls"}'},
        }

    chunks = [openai_chunk({"tool_calls": [call(0)]}), openai_chunk({"tool_calls": [call(1)]})]
    chunks.append(openai_chunk({}, finish_reason="tool_calls"))
    fake.script(CHAT, Reply(sse=[(None, chunk) for chunk in chunks] + [(None, "[DONE]")]))
    events = await collect(openai.stream(hello()))
    ids = [event.call.call_id for event in events if isinstance(event, ToolCallDone)]
    assert ids == ["call_same", "call_same_1"]


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -100, "completion_tokens": 5},
        {"prompt_tokens": "11", "completion_tokens": "7"},
        {"prompt_tokens": 10**30, "completion_tokens": 1},
        {"completion_tokens": 3},
    ],
)
async def test_usage_that_is_no_count_is_not_reported(
    fake: FakeModelServer, openai: OpenAIProvider, usage: dict[str, Any]
) -> None:
    """The turn then estimates (turns.md) instead of a negative total or a made-up 0."""
    chunks = [openai_chunk({"content": "hi"}), openai_chunk({}, finish_reason="stop")]
    chunks.append(openai_chunk(no_choices=True, usage=(0, 0)))
    chunks[-1]["usage"] = usage
    fake.script(CHAT, Reply(sse=[(None, chunk) for chunk in chunks] + [(None, "[DONE]")]))
    events = await collect(openai.stream(hello()))
    assert not [event for event in events if isinstance(event, Usage)]
    assert isinstance(events[-1], Stop)
