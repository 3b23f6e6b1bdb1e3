"""Usage of an interrupted turn counts what streamed (issue 27): the provider's
usage never arrives, so the call is estimated, input from the request and
output from the streamed text, about four characters a token."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import anyio

from appserver.providers.openai_compat import OpenAIProvider
from tests.support.client import RpcClient
from tests.support.fake_models import fake_model_server, openai_text_reply
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import (
    any_delta,
    new_thread,
    one_item,
    read_turn,
    start_turn,
    turn_of,
    wait_count,
    wait_terminal,
)

ENDLESS = "?stream 1000\n?delay 20"


async def _interrupt_after_deltas(
    client: RpcClient, thread_id: str, text: str, deltas: int
) -> dict[str, Any]:
    """Start a turn, interrupt it once ``deltas`` text deltas arrived; its
    ``turn/cancelled`` params (plus ``_mark``, where its messages start)."""
    mark = client.mark()
    turn_id = await start_turn(client, thread_id, text)
    await wait_count(client, lambda m: any_delta()(m) and turn_of(m["params"]) == turn_id, deltas)
    await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
    terminal = await wait_terminal(client, turn_id, start=mark)
    assert terminal["method"] == "turn/cancelled"
    params: dict[str, Any] = terminal["params"]
    params["_mark"] = mark
    return params


async def _check_usage(client: RpcClient, thread_id: str, cancelled: dict[str, Any]) -> None:
    turn = cancelled["turn"]
    agent = one_item(client, turn["id"], "agentMessage", cancelled["_mark"])
    streamed = agent["payload"]["text"]
    assert streamed  # something streamed before the interrupt
    usage = turn["tokenUsage"]
    assert usage["inputTokens"] > 0
    assert usage["outputTokens"] == math.ceil(len(streamed) / 4)
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    stored = await read_turn(client, thread_id, turn["id"])
    assert stored["tokenUsage"] == usage


async def test_an_interrupted_offline_turn_counts_what_streamed(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            cancelled = await _interrupt_after_deltas(client, thread_id, ENDLESS, 3)
            await _check_usage(client, thread_id, cancelled)


async def test_an_interrupted_openai_stream_counts_what_streamed(tmp_path: Path) -> None:
    with anyio.fail_after(20):
        async with fake_model_server() as fake:
            reply = openai_text_reply(["Hello there, ", "this is ", "a long answer"])
            reply.stall_after = 3  # role chunk, two texts; then silence, usage never sent
            fake.script("POST /v1/chat/completions", reply)
            provider = OpenAIProvider(api_key="sk-test", base_url=fake.openai_base_url)
            try:
                async with (
                    running_server("memory", tmp_path, provider=provider) as sut,
                    sut.connect() as client,
                ):
                    thread_id = await new_thread(client)
                    cancelled = await _interrupt_after_deltas(client, thread_id, "hi", 2)
                    await _check_usage(client, thread_id, cancelled)
                    agent = one_item(client, cancelled["turn"]["id"], "agentMessage", 0)
                    assert agent["payload"]["text"] == "Hello there, this is "
            finally:
                await provider.aclose()


async def test_reported_usage_is_not_estimated_again(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "one two three")
            terminal = await wait_terminal(client, turn_id, start=mark)
            usage = terminal["params"]["turn"]["tokenUsage"]
            # The offline model's own count: "You said: one two three" is five words.
            assert usage["outputTokens"] == 5
