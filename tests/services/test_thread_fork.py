"""`thread/fork` over DotCraft's protocol: the fork starts with a copy of the
source's history (what its model sees next), goes on independently, and is
stored on SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import pytest

from tests.conftest import BOTH_STORES
from tests.support.client import RpcFailure
from tests.support.servers import ServerUnderTest, running_server
from tests.support.skills_provider import RecordingProvider
from tests.support.turns import new_thread, run_turn

STORES = BOTH_STORES


@pytest.fixture
async def recorded(
    workspace: Path, store: str | None
) -> AsyncGenerator[tuple[ServerUnderTest, RecordingProvider]]:
    provider = RecordingProvider()
    async with running_server("memory", workspace, store=store, provider=provider) as sut:
        yield sut, provider


async def test_a_fork_after_two_turns_has_the_history_and_goes_on_alone(
    recorded: tuple[ServerUnderTest, RecordingProvider],
) -> None:
    sut, provider = recorded
    with anyio.fail_after(20):
        async with sut.connect() as client:
            source = await new_thread(client)
            await client.request("thread/rename", {"threadId": source, "displayName": "plans"})
            first, _ = await run_turn(client, source, "the first request")
            second, _ = await run_turn(client, source, "the second request")

            forked = (await client.request("thread/fork", {"threadId": source}))["thread"]
            assert forked["id"] != source
            assert forked["displayName"] == "plans (fork)"
            assert forked["forkedFromId"] == source
            assert forked["metadata"] == {"forkedFromId": source, "forkedFromTurnId": second}
            assert [t["id"] for t in forked["turns"]] == [first, second]
            assert [i["type"] for i in forked["turns"][1]["items"]] == [
                "userMessage",
                "agentMessage",
            ]
            assert any(m.get("method") == "thread/started" for m in client.messages)

            # The fork's model sees the copied conversation, then the new message.
            third, _ = await run_turn(client, forked["id"], "only in the fork")
            assert third == "turn_003"
            assert [m.content for m in provider.requests[-1].messages] == [
                "the first request",
                "You said: the first request",
                "the second request",
                "You said: the second request",
                "only in the fork",
            ]
            # The source did not get the fork's turn, and goes on by itself.
            await run_turn(client, source, "only in the source")
            assert [m.content for m in provider.requests[-1].messages][-2:] == [
                "You said: the second request",
                "only in the source",
            ]
            read = await client.request(
                "thread/read", {"threadId": forked["id"], "includeTurns": True}
            )
            assert len(read["thread"]["turns"]) == 3
            assert read["thread"]["forkedFromId"] == source


async def test_a_fork_point_chooses_the_last_turn_copied(
    recorded: tuple[ServerUnderTest, RecordingProvider],
) -> None:
    sut, provider = recorded
    with anyio.fail_after(20):
        async with sut.connect() as client:
            source = await new_thread(client)
            first, _ = await run_turn(client, source, "the first request")
            second, _ = await run_turn(client, source, "the second request")

            params = {"threadId": source, "forkPoint": {"turnId": first}}
            after = (await client.request("thread/fork", params))["thread"]
            assert [t["id"] for t in after["turns"]] == [first]
            params["forkPoint"] = {"turnId": first, "position": "before"}
            params["displayName"] = "from scratch"
            before = (await client.request("thread/fork", params))["thread"]
            assert before["turns"] == [] and before["displayName"] == "from scratch"
            await run_turn(client, before["id"], "fresh start")
            assert [m.content for m in provider.requests[-1].messages] == ["fresh start"]

            bare = await client.request("thread/fork", {"threadId": source, "excludeTurns": True})
            assert bare["thread"]["turns"] == []

            for bad, code in [
                ({"threadId": "thread_nope"}, -32010),
                ({"threadId": source, "forkPoint": {"turnId": "turn_099"}}, -32013),
                ({"threadId": source, "forkPoint": {"turnId": second, "itemId": "x"}}, -32602),
                ({"threadId": source, "forkPoint": {"turnId": second, "position": "x"}}, -32602),
            ]:
                with pytest.raises(RpcFailure) as refused:
                    await client.request("thread/fork", bad)
                assert refused.value.code == code, bad
