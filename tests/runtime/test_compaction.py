"""Context compaction: `thread/compact`, automatic compaction before a turn
whose history would overflow the context window, and what the model sees."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.providers.base import Message, ModelEvent, ModelRequest, ProviderError
from appserver.providers.offline import compaction_summary
from appserver.runtime.history import SUMMARY_PREFIX, messages_from_items
from appserver.runtime.turns import EngineConfig
from appserver.storage.records import ItemRecord
from tests.support.servers import ServerUnderTest, running_server
from tests.support.skills_provider import RecordingProvider
from tests.support.turns import (
    items_completed,
    new_thread,
    read_turn,
    run_turn,
    start_turn,
    turn_events,
    wait_terminal,
)


def system_events(client: Any, turn_id: str, mark: int = 0) -> list[str]:
    return [
        m["params"]["kind"]
        for m in client.messages[mark:]
        if m.get("method") == "system/event" and m["params"].get("turnId") == turn_id
    ]


async def compact(client: Any, thread_id: str) -> tuple[str, dict[str, Any]]:
    mark = client.mark()
    result = await client.request("thread/compact", {"threadId": thread_id})
    turn_id = str(result["turn"]["id"])
    assert result["turn"]["status"] == "running" and result["turn"]["items"] == []
    return turn_id, await wait_terminal(client, turn_id, start=mark)


@pytest.fixture
async def recorded(workspace: Path) -> AsyncGenerator[tuple[ServerUnderTest, RecordingProvider]]:
    provider = RecordingProvider()
    async with running_server("memory", workspace, provider=provider) as sut:
        yield sut, provider


async def test_thread_compact_summarises_and_later_turns_send_the_summary(
    recorded: tuple[ServerUnderTest, RecordingProvider],
) -> None:
    sut, provider = recorded
    with anyio.fail_after(15):
        async with sut.connect() as client:
            thread_id = await new_thread(client)
            first, _ = await run_turn(client, thread_id, "the first request")
            await run_turn(client, thread_id, "the second request")

            mark = client.mark()
            turn_id, terminal = await compact(client, thread_id)
            assert terminal["method"] == "turn/completed"
            assert system_events(client, turn_id, mark) == ["compacting", "compacted"]
            notice = items_completed(client, turn_id, "systemNotice", mark)
            assert len(notice) == 1
            payload = notice[0]["payload"]
            assert payload["kind"] == "compacted" and payload["trigger"] == "manual"
            assert payload["summary"] == (
                "Summary of the conversation so far: user: the first request | "
                "assistant: You said: the first request | user: the second request | "
                "assistant: You said: the second request"
            )
            assert payload["tokensBefore"] > 0 and payload["tokensAfter"] > 0
            # The compaction request went to the model with the purpose marked.
            assert provider.requests[-1].purpose == "compaction"
            # The events come before the terminal one, in this order.
            methods = [m["method"] for m in turn_events(client, turn_id, mark)]
            assert methods.index("item/completed") < methods.index("turn/completed")

            # The next turn sends the summary, then the new message: nothing older.
            await run_turn(client, thread_id, "the third request")
            messages = provider.requests[-1].messages
            assert [m.role for m in messages] == ["user", "user"]
            assert messages[0].content == SUMMARY_PREFIX + payload["summary"]
            assert messages[1].content == "the third request"

            # Every original item is still stored.
            stored = await read_turn(client, thread_id, first)
            assert [i["type"] for i in stored["items"]] == ["userMessage", "agentMessage"]


async def test_compacting_an_empty_thread_is_skipped(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await compact(client, thread_id)
            assert terminal["method"] == "turn/completed"
            assert system_events(client, turn_id, mark) == ["compactSkipped"]
            assert items_completed(client, turn_id, "systemNotice", mark) == []


async def test_compact_while_a_turn_runs_is_refused(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            turn_id = await start_turn(client, thread_id, "?stream 200\n?delay 10")
            failure = await client.fail("thread/compact", {"threadId": thread_id})
            assert failure.code == -32012
            await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
            await wait_terminal(client, turn_id)


class FailingCompactions(RecordingProvider):
    """Answers turns; fails every compaction request."""

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent]:
        if request.purpose == "compaction":
            yield ProviderError("unavailable", "503 from upstream")
            return
        async for event in super().stream(request):
            yield event


async def test_a_failed_compaction_fails_its_turn_and_changes_nothing(workspace: Path) -> None:
    provider = FailingCompactions()
    async with running_server("memory", workspace, provider=provider) as sut:
        with anyio.fail_after(15):
            async with sut.connect() as client:
                thread_id = await new_thread(client)
                await run_turn(client, thread_id, "keep me")
                mark = client.mark()
                turn_id, terminal = await compact(client, thread_id)
                assert terminal["method"] == "turn/failed"
                assert "compaction failed" in terminal["params"]["error"]
                assert system_events(client, turn_id, mark) == ["compacting", "compactFailed"]
                await run_turn(client, thread_id, "and then")
                contents = [m.content for m in provider.requests[-1].messages]
                assert contents[0] == "keep me"


async def test_a_turn_past_the_context_window_compacts_first(workspace: Path) -> None:
    provider = RecordingProvider()
    engine = EngineConfig(context_window=400, auto_compact_ratio=0.5)
    async with running_server("memory", workspace, engine=engine, provider=provider) as sut:
        with anyio.fail_after(15):
            async with sut.connect() as client:
                thread_id = await new_thread(client)
                long = "word " * 150  # about 190 tokens a message, twice: over 200
                await run_turn(client, thread_id, f"first {long}")
                mark = client.mark()
                turn_id, terminal = await run_turn(client, thread_id, "the short one")
                assert terminal["method"] == "turn/completed"
                assert system_events(client, turn_id, mark) == ["compacting", "compacted"]
                notice = items_completed(client, turn_id, "systemNotice", mark)[0]["payload"]
                assert notice["trigger"] == "auto"
                # The turn's model call saw the summary and its own message only.
                answer = provider.requests[-1].messages
                assert [m.content for m in answer] == [
                    SUMMARY_PREFIX + notice["summary"],
                    "the short one",
                ]
                # Order in the turn: the user message, the compaction, the answer.
                types = [i["type"] for i in terminal["params"]["turn"]["items"]]
                assert types == ["userMessage", "systemNotice", "agentMessage"]

                # A later turn rebuilds the same view from the store.
                await run_turn(client, thread_id, "later")
                later = [m.content for m in provider.requests[-1].messages]
                assert later[0] == SUMMARY_PREFIX + notice["summary"]
                assert later[1:] == ["the short one", "You said: the short one", "later"]


def _item(turn: str, seq: int, kind: str, payload: dict[str, Any]) -> ItemRecord:
    return ItemRecord("t", turn, f"i{seq}", seq, kind, "completed", "now", payload=payload)


def test_history_replaces_what_a_compaction_covers_but_keeps_its_own_turn() -> None:
    items = [
        _item("turn_1", 1, "userMessage", {"text": "old"}),
        _item("turn_1", 2, "agentMessage", {"text": "old answer"}),
        _item("turn_2", 3, "userMessage", {"text": "new"}),
        _item("turn_2", 4, "systemNotice", {"kind": "compacted", "summary": "S"}),
        _item("turn_2", 5, "agentMessage", {"text": "new answer"}),
        _item("turn_3", 6, "systemNotice", {"kind": "memoryConsolidated"}),
        _item("turn_3", 7, "userMessage", {"text": "next"}),
    ]
    messages = messages_from_items(items)
    assert [(m.role, m.content) for m in messages] == [
        ("user", SUMMARY_PREFIX + "S"),
        ("user", "new"),
        ("assistant", "new answer"),
        ("user", "next"),
    ]


def test_the_offline_summary_is_deterministic() -> None:
    messages = [Message("user", "a\nsecond line"), Message("assistant", "b"), Message("tool", "x")]
    assert (
        compaction_summary(messages) == "Summary of the conversation so far: user: a | assistant: b"
    )
