"""The deterministic offline provider and its directive grammar."""

from __future__ import annotations

import json
import time

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    Usage,
)
from appserver.providers.offline import OfflineProvider, split_text
from tests.support.fake_models import collect


def user(text: str, **kwargs: object) -> ModelRequest:
    return ModelRequest(model="offline", messages=[Message("user", text, **kwargs)])  # type: ignore[arg-type]


async def run(request: ModelRequest) -> list[ModelEvent]:
    return await collect(OfflineProvider().stream(request))


def text_of(events: list[ModelEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def tool_call(events: list[ModelEvent]) -> ToolCallDone:
    [done] = [e for e in events if isinstance(e, ToolCallDone)]
    return done


async def test_plain_text_is_echoed_in_several_deltas() -> None:
    events = await run(user("hello there"))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) >= 3
    assert text_of(events) == "You said: hello there"
    # Input: the user's 2 words; output: the 4 words streamed.
    assert events[-2:] == [Usage(2, 4), Stop("end_turn")]


async def test_identical_requests_give_identical_streams() -> None:
    request = user("?think hmm\nsame input")
    assert await run(request) == await run(request)


async def test_shell_directive_calls_the_shell_tool() -> None:
    events = await run(user("please\n!ls -la\nthanks"))
    arguments = json.dumps({"command": "ls -la"})
    fragments = [e for e in events if isinstance(e, ToolCallDelta)]
    assert len(fragments) == 3
    assert fragments[0].call_id == "offline_call_1" and fragments[0].name == "shell"
    assert all(f.call_id is None and f.name is None for f in fragments[1:])
    assert "".join(f.arguments_delta for f in fragments) == arguments
    assert tool_call(events) == ToolCallDone(
        0, ToolCall("offline_call_1", "shell", {"command": "ls -la"})
    )
    assert isinstance(events[-2], Usage)
    assert events[-1] == Stop("tool_calls")
    assert not any(isinstance(e, TextDelta) for e in events)


async def test_only_the_first_tool_directive_counts() -> None:
    events = await run(user("!pwd\n!rm -rf /\n?tool read_file {}"))
    assert tool_call(events).call.arguments == {"command": "pwd"}


async def test_write_directive_takes_the_rest_of_the_message_verbatim() -> None:
    events = await run(user("write it\n>notes/todo.md\n# Title\n  indented\n!not a command"))
    assert tool_call(events).call == ToolCall(
        "offline_call_1",
        "write_file",
        {"path": "notes/todo.md", "content": "# Title\n  indented\n!not a command\n"},
    )


async def test_write_directive_without_content_writes_an_empty_file() -> None:
    events = await run(user(">empty.txt"))
    assert tool_call(events).call.arguments == {"path": "empty.txt", "content": ""}


async def test_tool_directive_calls_any_tool() -> None:
    events = await run(user('?tool read_file {"path": "a.txt", "limit": 5}'))
    assert tool_call(events).call == ToolCall(
        "offline_call_1", "read_file", {"path": "a.txt", "limit": 5}
    )
    assert tool_call(await run(user("?tool list_dir"))).call.arguments == {}


async def test_tool_directive_with_bad_json_reports_an_arguments_error() -> None:
    done = tool_call(await run(user('?tool read_file {"path": ')))
    assert (done.call.call_id, done.call.name, done.call.arguments) == (
        "offline_call_1",
        "read_file",
        {},
    )
    assert done.arguments_error is not None


async def test_call_ids_are_unique_within_a_thread() -> None:
    request = ModelRequest(
        model="offline",
        messages=[
            Message("user", "!ls"),
            Message("assistant", "", tool_calls=[ToolCall("offline_call_1", "shell", {})]),
            Message("tool", "exit code: 0", tool_call_id="offline_call_1", tool_name="shell"),
            Message("assistant", "The command exited with code 0."),
            Message("user", "!pwd"),
        ],
    )
    assert tool_call(await run(request)).call.call_id == "offline_call_2"


async def test_stream_directive_gives_exactly_n_deltas() -> None:
    events = await run(user("?stream 5"))
    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta(f"chunk {i} ") for i in range(1, 6)
    ]
    assert events[-1] == Stop("end_turn")


async def test_think_directive_streams_reasoning_first() -> None:
    events = await run(user("?think Consider the options carefully\nhi"))
    reasoning = [e for e in events if isinstance(e, ReasoningDelta)]
    assert "".join(r.text for r in reasoning) == "Consider the options carefully"
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert all(isinstance(e, ReasoningDelta) for e in events[:first_text])
    assert text_of(events) == "You said: hi"


@pytest.mark.parametrize("kind", ["auth", "rate_limit", "unavailable", "timeout", "other"])
async def test_fail_directive_fails_immediately(kind: str) -> None:
    events = await run(user(f"hello\n?fail {kind}"))
    assert events == [ProviderError(kind, f"offline: simulated {kind} failure")]  # type: ignore[arg-type]


async def test_fail_directive_with_message_and_unknown_kind() -> None:
    assert await run(user("?fail quota Out of credits")) == [
        ProviderError("other", "Out of credits")
    ]


async def test_fail_after_streamed_chunks() -> None:
    events = await run(user("?stream 2\n?fail unavailable Upstream went away"))
    assert events == [
        TextDelta("chunk 1 "),
        TextDelta("chunk 2 "),
        ProviderError("unavailable", "Upstream went away"),
    ]


async def test_malformed_directives_are_plain_text() -> None:
    events = await run(user("?stream many\n!\n?unknown thing"))
    assert text_of(events) == "You said: ?stream many ! ?unknown thing"


async def test_directives_only_reply_ok() -> None:
    assert text_of(await run(user("?think quietly"))) == "OK."


async def test_images_are_acknowledged() -> None:
    events = await run(user("look", images=[ImagePart("image/png", "AAAA")]))
    assert text_of(events) == "You said: look [1 image attached]"


async def test_delay_paces_the_deltas() -> None:
    started = time.monotonic()
    events = await run(user("?stream 3\n?delay 30"))
    assert len([e for e in events if isinstance(e, TextDelta)]) == 3
    assert time.monotonic() - started >= 0.06  # two gaps between three deltas


async def test_delayed_stream_can_be_cancelled_mid_way() -> None:
    seen = []
    started = time.monotonic()
    with anyio.CancelScope() as scope:
        async for event in OfflineProvider().stream(user("?stream 100\n?delay 1000")):
            seen.append(event)
            scope.cancel()
    assert scope.cancelled_caught
    assert seen == [TextDelta("chunk 1 ")]
    assert time.monotonic() - started < 0.5


def tool_result_request(name: str, arguments: dict[str, object], result: str) -> ModelRequest:
    return ModelRequest(
        model="offline",
        messages=[
            Message("user", "do it"),
            Message("assistant", "", tool_calls=[ToolCall("c1", name, arguments)]),
            Message("tool", result, tool_call_id="c1", tool_name=name),
        ],
    )


@pytest.mark.parametrize(
    ("name", "arguments", "result", "summary"),
    [
        ("shell", {"command": "ls"}, "exit code: 0\na.txt\n", "The command exited with code 0."),
        ("shell", {"command": "false"}, "Exit code: 2", "The command exited with code 2."),
        ("shell", {"command": "ls"}, "a.txt\nb.txt", "The command finished: a.txt"),
        (
            "write_file",
            {"path": "a.txt", "content": "hello\n"},
            "Wrote 6 bytes to a.txt",
            "Wrote 6 bytes to a.txt.",
        ),
        (
            "write_file",
            {"path": "b.txt", "content": "héllo\n"},
            "ok",
            "Wrote 7 bytes to b.txt.",
        ),
        ("shell", {"command": "rm x"}, "Declined by the user", "The shell call was declined."),
        (
            "write_file",
            {"path": "/etc/x"},
            "Error: path is outside the workspace",
            "The write_file call failed: Error: path is outside the workspace",
        ),
        ("read_file", {"path": "a.txt"}, "\nline one\nline two", "read_file returned: line one"),
    ],
)
async def test_tool_results_are_summarised(
    name: str, arguments: dict[str, object], result: str, summary: str
) -> None:
    events = await run(tool_result_request(name, arguments, result))
    assert text_of(events) == summary
    assert len([e for e in events if isinstance(e, TextDelta)]) >= 3
    assert events[-1] == Stop("end_turn")
    assert isinstance(events[-2], Usage)


async def test_parallel_tool_results_are_all_summarised() -> None:
    request = ModelRequest(
        model="offline",
        messages=[
            Message("user", "go"),
            Message(
                "assistant",
                "",
                tool_calls=[
                    ToolCall("a", "shell", {"command": "x"}),
                    ToolCall("b", "read_file", {}),
                ],
            ),
            Message("tool", "exit code: 1", tool_call_id="a"),  # name found through the call
            Message("tool", "contents", tool_call_id="b", tool_name="read_file"),
        ],
    )
    events = await run(request)
    assert text_of(events) == "The command exited with code 1. read_file returned: contents"


async def test_list_models() -> None:
    provider = OfflineProvider()
    assert (provider.name, provider.default_model) == ("offline", "offline")
    assert await provider.list_models() == [ModelInfo("offline", owned_by="appserver")]


@settings(max_examples=60)
@given(st.text(max_size=200))
def test_split_text_round_trips(text: str) -> None:
    parts = split_text(text)
    assert "".join(parts) == text
    if len(text) >= 3:
        assert len(parts) >= 3
    assert len(parts) <= 16
