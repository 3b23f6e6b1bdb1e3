"""The turn lifecycle end to end: event order, interrupt, errors, provider
failure, shutdown and per-client streaming (reference §3.3, §4, §5, §8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.runtime.turns import EngineConfig
from tests.conftest import BOTH_STORES, IDENTITY
from tests.support.helpers import start_thread
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import (
    DELTA_METHODS,
    TERMINAL,
    assert_increasing,
    deltas,
    items_completed,
    new_thread,
    one_item,
    read_turn,
    run_turn,
    seqs,
    start_turn,
    streamed_text,
    terminals,
    text_input,
    thread_events,
    turn_events,
    wait_count,
    wait_terminal,
)

STORES = BOTH_STORES  # thread, turn and approval tests run on SQLite and on PostgreSQL

STREAM_SLOW = "?stream 200\n?delay 20"


def _index(client: Any, predicate: Any, start: int = 0) -> int:
    for index in range(start, len(client.messages)):
        if predicate(client.messages[index]):
            return index
    raise AssertionError("no matching message")


# --- 1. a plain text turn ----------------------------------------------------------


async def test_plain_text_turn_event_sequence(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "hello world")
            terminal = await wait_terminal(client, turn_id, start=mark)
            # running: false follows the terminal notification.
            await client.notification(
                "thread/runtimeChanged", start=mark, where=lambda p: not p["runtime"]["running"]
            )

            # The turn/start response comes before turn/started.
            response_at = _index(client, lambda m: "result" in m and "turn" in m["result"], mark)
            started_at = _index(client, lambda m: m.get("method") == "turn/started", mark)
            assert response_at < started_at
            response = client.messages[response_at]["result"]["turn"]
            assert response["id"] == turn_id and response["status"] == "running"

            events = turn_events(client, turn_id, mark)
            methods = [m["method"] for m in events]
            assert methods[0] == "turn/started"
            # Exactly one terminal notification, and it is the turn's last event.
            assert [m for m in methods if m in TERMINAL] == ["turn/completed"]
            assert methods[-1] == "turn/completed"
            assert terminal is events[-1]

            # userMessage: started then completed, created complete.
            user = [m for m in events if m["params"].get("item", {}).get("type") == "userMessage"]
            assert [m["method"] for m in user] == ["item/started", "item/completed"]
            assert user[1]["params"]["item"]["payload"]["text"] == "hello world"
            assert user[1]["params"]["item"]["payload"]["deliveryMode"] == "normal"

            # agentMessage: started < deltas < completed; text = concatenated deltas.
            agent = one_item(client, turn_id, "agentMessage", mark)
            item_events = [
                (i, m)
                for i, m in enumerate(events)
                if m["params"].get("itemId") == agent["id"]
                or m["params"].get("item", {}).get("id") == agent["id"]
            ]
            kinds = [m["method"] for _, m in item_events]
            assert kinds[0] == "item/started" and kinds[-1] == "item/completed"
            assert set(kinds[1:-1]) == {"item/agentMessage/delta"} and len(kinds) >= 5
            texts = [m["params"]["delta"] for _, m in item_events[1:-1]]
            assert all(texts)
            assert all(m["params"]["deltaKind"] == "agentMessage" for _, m in item_events[1:-1])
            assert "".join(texts) == agent["payload"]["text"] == "You said: hello world"

            usage = [m["params"] for m in events if m["method"] == "item/usage/delta"]
            assert usage and all(u["inputTokens"] > 0 and u["outputTokens"] > 0 for u in usage)

            # The terminal carries the items and the token usage.
            turn = terminal["params"]["turn"]
            assert turn["status"] == "completed" and turn["completedAt"]
            assert [i["type"] for i in turn["items"]] == ["userMessage", "agentMessage"]
            tokens = turn["tokenUsage"]
            assert tokens["inputTokens"] == sum(u["inputTokens"] for u in usage)
            assert tokens["outputTokens"] == sum(u["outputTokens"] for u in usage)
            assert tokens["totalTokens"] == tokens["inputTokens"] + tokens["outputTokens"]

            # Every notification about the thread carries an increasing seq.
            about_thread = thread_events(client, thread_id)
            assert all("seq" in m["params"] for m in about_thread)
            assert_increasing(seqs(about_thread))

            runtime = [
                m["params"]["runtime"]["running"]
                for m in about_thread
                if m["method"] == "thread/runtimeChanged"
            ]
            assert runtime == [True, False]

            # Read-your-writes on the same connection, right after turn/completed.
            stored = await read_turn(client, thread_id, turn_id)
            assert stored["status"] == "completed"
            assert [i["id"] for i in stored["items"]] == [i["id"] for i in turn["items"]]
            assert stored["items"][1]["payload"]["text"] == "You said: hello world"
            assert stored["items"][1]["status"] == "completed"

            if server.multi_client:
                async with server.connect("other") as other:
                    seen = await read_turn(other, thread_id, turn_id)
                    assert seen["status"] == "completed"
                    assert seen["items"] == stored["items"]


async def test_read_your_writes_from_another_connection_at_turn_completed(
    multi_server: ServerUnderTest,
) -> None:
    """A second connection reads the turn the moment the first sees it end."""
    with anyio.fail_after(15):
        async with multi_server.connect("a") as a, multi_server.connect("b") as b:
            thread_id = await new_thread(a)
            for n in range(3):
                turn_id, terminal = await run_turn(a, thread_id, f"message {n}")
                assert terminal["method"] == "turn/completed"
                stored = await read_turn(b, thread_id, turn_id)
                assert stored["status"] == "completed"
                assert [i["type"] for i in stored["items"]] == ["userMessage", "agentMessage"]
                assert stored["items"][1]["payload"]["text"] == f"You said: message {n}"


async def test_turn_start_right_after_turn_completed(server: ServerUnderTest) -> None:
    """A client may start the next turn the moment it sees the terminal event."""
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            for n in range(5):
                turn_id, terminal = await run_turn(client, thread_id, f"quick {n}")
                assert terminal["method"] == "turn/completed"
                assert turn_id == f"turn_{n + 1:03d}"


async def test_reasoning_streams_before_the_answer(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            turn_id, terminal = await run_turn(client, thread_id, "?think step by step\nhi")
            assert terminal["method"] == "turn/completed"
            reasoning = one_item(client, turn_id, "reasoningContent")
            parts = deltas(client, reasoning["id"], "item/reasoning/delta")
            assert parts and all(p["deltaKind"] == "reasoningContent" for p in parts)
            assert "".join(p["delta"] for p in parts) == reasoning["payload"]["text"]
            assert reasoning["payload"]["text"] == "step by step"
            assert one_item(client, turn_id, "agentMessage")["payload"]["text"] == "You said: hi"


async def test_second_turn_sees_the_history(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            first, _ = await run_turn(client, thread_id, "one")
            second, terminal = await run_turn(client, thread_id, "two")
            assert (first, second) == ("turn_001", "turn_002")
            assert terminal["method"] == "turn/completed"
            result = await client.request(
                "thread/read", {"threadId": thread_id, "includeTurns": True}
            )
            assert [t["id"] for t in result["thread"]["turns"]] == ["turn_001", "turn_002"]
            ids = [i["id"] for t in result["thread"]["turns"] for i in t["items"]]
            assert len(ids) == len(set(ids)) == 4


# --- 5. interrupt --------------------------------------------------------------------


async def test_interrupt_while_streaming_keeps_the_text_so_far(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, STREAM_SLOW)
            await wait_count(client, lambda m: m.get("method") == "item/agentMessage/delta", 3)
            assert (
                await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
                == {}
            )
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/cancelled"
            assert terminal["params"]["reason"] == "interrupted"
            assert terminal["params"]["turn"]["status"] == "cancelled"
            await client.settle()
            assert len(terminals(client, turn_id, mark)) == 1

            agent = one_item(client, turn_id, "agentMessage", mark)
            text = agent["payload"]["text"]
            assert agent["status"] == "completed"
            assert text and streamed_text(200).startswith(text) and text != streamed_text(200)
            seen = "".join(d["delta"] for d in deltas(client, agent["id"], start=mark))
            assert seen == text
            # The completed item precedes the terminal notification.
            events = turn_events(client, turn_id, mark)
            assert events[-1]["method"] == "turn/cancelled"

            stored = await read_turn(client, thread_id, turn_id)
            assert stored["status"] == "cancelled"
            stored_agent = [i for i in stored["items"] if i["type"] == "agentMessage"]
            assert stored_agent == [agent]

            # The thread is idle again: a new turn runs.
            _, after = await run_turn(client, thread_id, "again")
            assert after["method"] == "turn/completed"


async def test_repeated_interrupt_never_hangs(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, STREAM_SLOW)
            await wait_count(client, lambda m: m.get("method") == "item/agentMessage/delta", 2)
            params = {"threadId": thread_id, "turnId": turn_id}
            # Pipelined: all sent before the first answer arrives.
            ids = list(range(1000, 1005))
            for request_id in ids:
                await client.send(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "method": "turn/interrupt",
                        "params": params,
                    }
                )
            answers = [await client.response(request_id, timeout=5) for request_id in ids]
            assert answers[0].get("result") == {}
            for answer in answers[1:]:
                # While the turn winds down: {}; once it has ended: -32014. Never pending.
                assert answer.get("result") == {} or answer["error"]["code"] == -32014, answer
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["params"]["reason"] == "interrupted"
            # Once cancelled, interrupting again is "not running".
            failure = await client.fail("turn/interrupt", params)
            assert failure.code == -32014
            await client.settle()
            assert len(terminals(client, turn_id, mark)) == 1


async def test_interrupt_errors(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            failure = await client.fail(
                "turn/interrupt", {"threadId": thread_id, "turnId": "turn_404"}
            )
            assert failure.code == -32013
            turn_id, _ = await run_turn(client, thread_id, "hi")
            failure = await client.fail(
                "turn/interrupt", {"threadId": thread_id, "turnId": turn_id}
            )
            assert failure.code == -32014
            failure = await client.fail(
                "turn/interrupt", {"threadId": "thread_20200101_zzzzzz", "turnId": turn_id}
            )
            assert failure.code == -32010


async def test_interrupt_while_waiting_on_approval(
    server: ServerUnderTest, workspace: Path
) -> None:
    from tests.support.turns import Approver

    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, decision=None)  # never answers
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "!touch interrupted.txt")
            await approver.wait_request()
            assert (
                await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
                == {}
            )
            terminal = await wait_terminal(client, turn_id, timeout=5, start=mark)
            assert terminal["method"] == "turn/cancelled"
            assert terminal["params"]["reason"] == "interrupted"
            await client.notification(
                "thread/runtimeChanged", start=mark, where=lambda p: not p["runtime"]["running"]
            )
            assert not (workspace / "interrupted.txt").exists()
            assert len(terminals(client, turn_id, mark)) == 1
            runtime = [
                m["params"]["runtime"]
                for m in thread_events(client, thread_id, mark)
                if m["method"] == "thread/runtimeChanged"
            ]
            assert runtime[-1] == {
                "running": False,
                "waitingOnApproval": False,
                "waitingOnPlanConfirmation": False,
            }
            # A late answer to the abandoned request is harmless.
            await approver.answer(approver.requests[0], "accept")
            _, after = await run_turn(client, thread_id, "next")
            assert after["method"] == "turn/completed"
            assert not (workspace / "interrupted.txt").exists()


async def test_interrupt_during_a_checkpoint_write_still_ends_the_turn(workspace: Path) -> None:
    """Checkpoint on every delta so an interrupt often lands inside a DB write
    (regression: a cancelled BEGIN IMMEDIATE used to wedge the database)."""
    engine = EngineConfig(checkpoint_interval=0.0)
    async with running_server("memory", workspace, engine=engine) as sut, sut.connect() as client:
        for _ in range(100):
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "?stream 2000")
            await client.wait(lambda m: m.get("method") == "item/agentMessage/delta", start=mark)
            await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
            terminal = await wait_terminal(client, turn_id, timeout=3, start=mark)
            assert terminal["method"] == "turn/cancelled"


# --- 5. turn/start errors --------------------------------------------------------------


async def test_turn_start_while_running_is_refused(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            turn_id = await start_turn(client, thread_id, STREAM_SLOW)
            failure = await client.fail(
                "turn/start", {"threadId": thread_id, "input": text_input("again")}
            )
            assert failure.code == -32012
            # Archiving is refused too (as documented), and the turn goes on.
            failure = await client.fail("thread/archive", {"threadId": thread_id})
            assert failure.code == -32012
            await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
            await wait_terminal(client, turn_id)
            await client.request("thread/archive", {"threadId": thread_id})


async def test_turn_start_on_paused_or_archived_thread(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            paused = await new_thread(client)
            await client.request("thread/pause", {"threadId": paused})
            failure = await client.fail(
                "turn/start", {"threadId": paused, "input": text_input("hi")}
            )
            assert failure.code == -32011
            archived = await new_thread(client)
            await client.request("thread/archive", {"threadId": archived})
            failure = await client.fail(
                "turn/start", {"threadId": archived, "input": text_input("hi")}
            )
            assert failure.code == -32011
            failure = await client.fail(
                "turn/start", {"threadId": "thread_20200101_zzzzzz", "input": text_input("hi")}
            )
            assert failure.code == -32010


@pytest.mark.parametrize(
    ("parts", "code"),
    [
        ([], -32602),
        ([{"type": "unknown", "text": "hi"}], -32602),
        ([{"type": "text"}], -32602),
        ([{"type": "skillRef", "name": "no-such-skill"}], -32040),
        ([{"type": "commandRef", "name": "no-such-command"}], -32060),
        (
            [{"type": "text", "text": "hi"}, {"type": "commandRef", "name": "no-such-command"}],
            -32060,
        ),
    ],
    ids=["empty", "unknown-type", "text-without-text", "skillRef", "commandRef", "text+commandRef"],
)
async def test_turn_start_invalid_input(
    server: ServerUnderTest, parts: list[Any], code: int
) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            failure = await client.fail("turn/start", {"threadId": thread_id, "input": parts})
            assert failure.code == code
            await client.quiet_after(mark)  # no turn started
            _, terminal = await run_turn(client, thread_id, "still idle")
            assert terminal["method"] == "turn/completed"


async def test_history_mode_rules(server: ServerUnderTest) -> None:
    messages = [
        {"role": "user", "content": "earlier question"},
        {"role": "assistant", "content": "earlier answer"},
    ]
    with anyio.fail_after(15):
        async with server.connect() as client:
            client_mode = (await start_thread(client, historyMode="client"))["id"]
            failure = await client.fail(
                "turn/start", {"threadId": client_mode, "input": text_input("hi")}
            )
            assert failure.code == -32602
            server_mode = await new_thread(client)
            failure = await client.fail(
                "turn/start",
                {"threadId": server_mode, "input": text_input("hi"), "messages": messages},
            )
            assert failure.code == -32602

            turn_id, terminal = await run_turn(client, client_mode, "now", messages=messages)
            assert terminal["method"] == "turn/completed"
            assert one_item(client, turn_id, "agentMessage")["payload"]["text"] == "You said: now"
            # Microsoft.Extensions.AI shape is accepted too.
            mea = [{"role": "user", "contents": [{"$type": "text", "text": "x"}]}]
            _, terminal = await run_turn(client, client_mode, "again", messages=mea)
            assert terminal["method"] == "turn/completed"


# --- 6. provider failure -----------------------------------------------------------------


@pytest.mark.parametrize("script", ["?fail rate_limit", "?stream 3\n?fail rate_limit slow down"])
async def test_provider_failure_fails_the_turn(server: ServerUnderTest, script: str) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, script)
            await client.settle()
            assert terminal["method"] == "turn/failed"
            assert "rate_limit" in terminal["params"]["error"]
            turn = terminal["params"]["turn"]
            assert turn["status"] == "failed" and "rate_limit" in turn["error"]
            errors = items_completed(client, turn_id, "error", mark)
            assert len(errors) == 1
            assert errors[0]["payload"]["fatal"] is True
            assert "rate_limit" in errors[0]["payload"]["code"]
            assert len(terminals(client, turn_id, mark)) == 1
            events = turn_events(client, turn_id, mark)
            error_at = next(
                i
                for i, m in enumerate(events)
                if m["params"].get("item", {}).get("type") == "error"
            )
            assert error_at < len(events) - 1 and events[-1]["method"] == "turn/failed"
            if "?stream" in script:
                agent = one_item(client, turn_id, "agentMessage", mark)
                assert agent["payload"]["text"] == streamed_text(3)
            stored = await read_turn(client, thread_id, turn_id)
            assert stored["status"] == "failed" and "rate_limit" in stored["error"]
            # A failed turn leaves the thread usable.
            _, after = await run_turn(client, thread_id, "ok")
            assert after["method"] == "turn/completed"


# --- 12. shutdown --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "websocket"])
async def test_server_shutdown_cancels_running_turns(workspace: Path, kind: str) -> None:
    stop = anyio.Event()
    stopped = anyio.Event()

    async def serve(*, task_status: Any) -> None:
        async with running_server(kind, workspace) as sut:
            task_status.started(sut)
            await stop.wait()
        stopped.set()

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            sut: ServerUnderTest = await tg.start(serve)
            async with sut.connect() as client:
                thread_id = await new_thread(client)
                mark = client.mark()
                turn_id = await start_turn(client, thread_id, "?stream 500\n?delay 10")
                await wait_count(client, lambda m: m.get("method") == "item/agentMessage/delta", 2)
                stop.set()
                terminal = await wait_terminal(client, turn_id, start=mark)
                assert terminal["method"] == "turn/cancelled"
                assert terminal["params"]["reason"] == "serverShutdown"
                agent = one_item(client, turn_id, "agentMessage", mark)
                assert agent["payload"]["text"]
                await stopped.wait()
                with anyio.fail_after(5):
                    while not client.closed:
                        await client.wait(lambda m: True, 5, start=len(client.messages))
                assert len(terminals(client, turn_id, mark)) == 1
                assert client.messages[-1] is not None


# --- 13. per-client streaming ----------------------------------------------------------------


async def test_command_execution_items_only_for_clients_that_ask(
    server: ServerUnderTest,
) -> None:
    capabilities = {"commandExecutionStreaming": True}
    with anyio.fail_after(15):
        async with server.connect(capabilities=capabilities) as client:
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!echo streamed-out")
            assert terminal["method"] == "turn/completed"
            command = one_item(client, turn_id, "commandExecution", mark)
            assert command["payload"]["command"] == "echo streamed-out"
            assert command["payload"]["exitCode"] == 0
            assert command["payload"]["status"] == "completed"
            assert "streamed-out" in command["payload"]["aggregatedOutput"]
            output = deltas(client, command["id"], "item/commandExecution/outputDelta", mark)
            assert "".join(d["delta"] for d in output) == command["payload"]["aggregatedOutput"]
            started = [
                m
                for m in turn_events(client, turn_id, mark)
                if m["method"] == "item/started" and m["params"]["item"]["id"] == command["id"]
            ]
            assert len(started) == 1
            assert one_item(client, turn_id, "toolResult", mark)["payload"]["success"] is True


async def test_command_execution_hidden_by_default(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!echo hidden-out")
            assert terminal["method"] == "turn/completed"
            events = turn_events(client, turn_id, mark)
            assert not [m for m in events if m["method"] == "item/commandExecution/outputDelta"]
            types = {m["params"]["item"]["type"] for m in events if "item" in m["params"]}
            assert "commandExecution" not in types
            assert {"toolCall", "toolResult", "agentMessage"} <= types
            result = one_item(client, turn_id, "toolResult", mark)
            assert result["payload"]["success"] is True
            assert "hidden-out" in result["payload"]["result"]


async def test_streaming_support_false_suppresses_every_delta(server: ServerUnderTest) -> None:
    capabilities = {"streamingSupport": False, "commandExecutionStreaming": True}
    with anyio.fail_after(15):
        async with server.connect(capabilities=capabilities) as client:
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "?think hmm\n!echo quiet")
            assert terminal["method"] == "turn/completed"
            second, terminal = await run_turn(client, thread_id, "plain text")
            assert terminal["method"] == "turn/completed"
            await client.settle()
            assert not [m for m in client.messages[mark:] if m.get("method") in DELTA_METHODS]
            # Items still start and complete with their full content.
            call = one_item(client, turn_id, "toolCall", mark)
            assert call["payload"]["arguments"] == {"command": "echo quiet"}
            assert one_item(client, turn_id, "reasoningContent", mark)["payload"]["text"] == "hmm"
            assert one_item(client, second, "agentMessage", mark)["payload"]["text"] == (
                "You said: plain text"
            )
            command = one_item(client, turn_id, "commandExecution", mark)
            assert "quiet" in command["payload"]["aggregatedOutput"]


async def test_opt_out_of_deltas_by_method(server: ServerUnderTest) -> None:
    capabilities = {"optOutNotificationMethods": ["item/agentMessage/delta", "item/usage/delta"]}
    with anyio.fail_after(15):
        async with server.connect(capabilities=capabilities) as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "?think x\nhello")
            assert terminal["method"] == "turn/completed"
            methods = {m.get("method") for m in client.messages[mark:]}
            assert "item/agentMessage/delta" not in methods
            assert "item/usage/delta" not in methods
            assert "item/reasoning/delta" in methods
            agent = one_item(client, turn_id, "agentMessage", mark)
            assert agent["payload"]["text"] == "You said: hello"


async def test_turn_events_reach_observer_and_origin_once_each(
    multi_server: ServerUnderTest,
) -> None:
    with anyio.fail_after(15):
        async with multi_server.connect("origin") as origin, multi_server.connect("obs") as obs:
            thread_id = await new_thread(origin)
            await origin.request("thread/subscribe", {"threadId": thread_id})  # both paths
            await obs.request("thread/subscribe", {"threadId": thread_id})
            mark_o, mark_b = origin.mark(), obs.mark()
            turn_id, _ = await run_turn(origin, thread_id, "?stream 20\nbroadcast")
            await wait_terminal(obs, turn_id, start=mark_b)
            await origin.settle()
            await obs.settle()
            for client, mark in ((origin, mark_o), (obs, mark_b)):
                events = turn_events(client, turn_id, mark)
                numbers = seqs(events)
                assert len(numbers) == len(set(numbers))
                assert_increasing(numbers)
                assert len(terminals(client, turn_id, mark)) == 1
            assert seqs(turn_events(origin, turn_id, mark_o)) == seqs(
                turn_events(obs, turn_id, mark_b)
            )


async def test_engine_config_is_honoured_in_process(workspace: Path) -> None:
    """The harness passes EngineConfig through (used by the fallback tests)."""
    engine = EngineConfig(approval_timeout=0.25, reconnect_grace=0.25)
    async with running_server("memory", workspace, engine=engine) as sut:
        assert sut.app is not None
        assert sut.app.approvals.timeout == 0.25
        assert sut.app.approvals.reconnect_grace == 0.25


# --- more edges: ownership, races, tools -----------------------------------------------------


async def test_turn_outlives_the_connection_that_started_it(multi_server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with multi_server.connect("watcher") as watcher:
            async with multi_server.connect("starter") as starter:
                thread_id = await new_thread(starter)
                await watcher.request("thread/subscribe", {"threadId": thread_id})
                mark = watcher.mark()
                turn_id = await start_turn(starter, thread_id, "?stream 60\n?delay 10")
                await wait_count(starter, lambda m: m.get("method") == "item/agentMessage/delta", 3)
            terminal = await wait_terminal(watcher, turn_id, start=mark)
            assert terminal["method"] == "turn/completed"
            agent = one_item(watcher, turn_id, "agentMessage", mark)
            assert agent["payload"]["text"] == streamed_text(60)
            seen = "".join(d["delta"] for d in deltas(watcher, agent["id"], start=mark))
            assert seen == streamed_text(60)


async def test_concurrent_turn_starts_one_wins(multi_server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with multi_server.connect("a") as a, multi_server.connect("b") as b:
            thread_id = await new_thread(a)
            outcomes: dict[str, Any] = {}

            async def start(name: str, client: Any) -> None:
                try:
                    outcomes[name] = await start_turn(client, thread_id, "?stream 20\n?delay 10")
                except Exception as exc:  # RpcFailure
                    outcomes[name] = exc

            async with anyio.create_task_group() as tg:
                tg.start_soon(start, "a", a)
                tg.start_soon(start, "b", b)
            winners = [v for v in outcomes.values() if isinstance(v, str)]
            losers = [v for v in outcomes.values() if not isinstance(v, str)]
            assert len(winners) == 1 and len(losers) == 1
            assert getattr(losers[0], "code", None) == -32012
            winner = a if isinstance(outcomes["a"], str) else b
            assert (await wait_terminal(winner, winners[0]))["method"] == "turn/completed"


async def test_deleting_the_thread_cancels_its_turn(multi_server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with multi_server.connect("a") as a, multi_server.connect("b") as b:
            thread_id = await new_thread(a)
            mark = a.mark()
            turn_id = await start_turn(a, thread_id, STREAM_SLOW)
            await wait_count(a, lambda m: m.get("method") == "item/agentMessage/delta", 2)
            assert await b.request("thread/delete", {"threadId": thread_id}) == {}
            terminal = await wait_terminal(a, turn_id, start=mark)
            assert terminal["method"] == "turn/cancelled"
            assert terminal["params"]["reason"] == "threadDeleted"
            deleted = await a.notification("thread/deleted", start=mark)
            assert deleted["threadId"] == thread_id
            failure = await a.fail("thread/read", {"threadId": thread_id})
            assert failure.code == -32010


async def test_interrupting_a_running_command_kills_it(
    server: ServerUnderTest, workspace: Path
) -> None:
    script = "!sleep 30 && touch finished.txt"
    with anyio.fail_after(20):
        async with server.connect(capabilities={"commandExecutionStreaming": True}) as client:
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, script)
            await client.notification(
                "item/started",
                start=mark,
                where=lambda p: p["item"]["type"] == "commandExecution",
            )
            with anyio.fail_after(5):  # the command is killed, not awaited
                await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
                terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/cancelled"
            command = one_item(client, turn_id, "commandExecution", mark)
            assert command["payload"]["status"] != "completed"
            assert not items_completed(client, turn_id, "toolResult", mark)
            assert not (workspace / "finished.txt").exists()
            # The dangling tool call does not break the next model call.
            _, after = await run_turn(client, thread_id, "are you there")
            assert after["method"] == "turn/completed"


async def test_bad_tool_calls_fail_the_call_not_the_turn(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            for script, expect in [
                ('?tool read_file {"path": ', "argument"),
                ("?tool no_such_tool {}", "unknown tool"),
                ('?tool read_file {"path": "missing.txt"}', "missing.txt"),
                ('?tool read_file {"path": "x", "bogus": 1}', "bogus"),
            ]:
                mark = client.mark()
                turn_id, terminal = await run_turn(client, thread_id, script)
                assert terminal["method"] == "turn/completed", script
                result = one_item(client, turn_id, "toolResult", mark)
                assert result["payload"]["success"] is False, script
                assert expect in result["payload"]["result"].lower() or expect in str(
                    one_item(client, turn_id, "toolCall", mark)["payload"]
                ), (script, result)


async def test_sender_is_recorded_on_the_turn_and_message(server: ServerUnderTest) -> None:
    sender = {"senderId": "u-42", "senderName": "Ada", "senderRole": "admin", "groupId": "g1"}
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "hi", sender=sender)
            initiator = terminal["params"]["turn"]["initiator"]
            assert initiator["userId"] == "u-42" and initiator["userName"] == "Ada"
            user = one_item(client, turn_id, "userMessage", mark)["payload"]
            assert (user["senderId"], user["senderName"], user["senderRole"], user["groupId"]) == (
                "u-42",
                "Ada",
                "admin",
                "g1",
            )


@pytest.mark.parametrize("pipelined", [True, False])
async def test_a_read_after_turn_start_sees_the_turn(
    server: ServerUnderTest, pipelined: bool
) -> None:
    """Read-your-writes on one connection: thread/read sent right after
    turn/start (answered or not yet) sees the new turn and its input."""
    with anyio.fail_after(15):
        async with server.connect() as client:
            thread_id = await new_thread(client)
            for n in range(1, 4):
                start = {
                    "jsonrpc": "2.0",
                    "id": f"start-{n}",
                    "method": "turn/start",
                    "params": {
                        "threadId": thread_id,
                        "input": text_input("?stream 50\n?delay 20"),
                    },
                }
                read = {
                    "jsonrpc": "2.0",
                    "id": f"read-{n}",
                    "method": "thread/read",
                    "params": {"threadId": thread_id, "includeTurns": True},
                }
                await client.send(start)
                if not pipelined:
                    await client.response(f"start-{n}")
                await client.send(read)
                started = (await client.response(f"start-{n}"))["result"]["turn"]
                turns = (await client.response(f"read-{n}"))["result"]["thread"]["turns"]
                assert [t["id"] for t in turns][-1] == started["id"] == f"turn_{n:03d}"
                items = turns[-1]["items"]
                assert items and items[0]["type"] == "userMessage"
                await client.request(
                    "turn/interrupt", {"threadId": thread_id, "turnId": started["id"]}
                )
                await wait_terminal(client, started["id"])


async def test_a_turn_started_while_another_input_materialises_gets_its_own_id(
    workspace: Path,
) -> None:
    """The thread record a turn/start read may be stale by the time its input
    is ready (an image fetch): numbering must not reuse the id of a turn that
    started and ended meanwhile."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    hit, release = threading.Event(), threading.Event()

    class SlowImage(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hit.set()
            release.wait(10)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            self.wfile.write(b"\x89PNG\r\n\x1a\n" + b"0" * 64)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), SlowImage)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_port}/x.png"
    try:
        async with running_server("memory", workspace, allow_private_image_urls=True) as sut:
            with anyio.fail_after(20):
                async with sut.connect() as a, sut.connect() as b:
                    thread_id = await new_thread(a)
                    slow: dict[str, Any] = {}

                    async def start_slow() -> None:
                        parts = [{"type": "text", "text": "slow"}, {"type": "image", "url": url}]
                        slow.update(
                            await b.request("turn/start", {"threadId": thread_id, "input": parts})
                        )

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(start_slow)
                        await anyio.to_thread.run_sync(hit.wait, 10)
                        fast, terminal = await run_turn(a, thread_id, "fast")
                        assert terminal["method"] == "turn/completed"
                        release.set()
                    assert fast == "turn_001"
                    assert slow["turn"]["id"] == "turn_002"
                    await wait_terminal(b, "turn_002")
                    read = await a.request(
                        "thread/read", {"threadId": thread_id, "includeTurns": True}
                    )
                    turns = read["thread"]["turns"]
                    assert [t["id"] for t in turns] == ["turn_001", "turn_002"]
                    texts = [t["items"][0]["payload"]["text"] for t in turns]
                    assert texts == ["fast", "slow"]
                    item_ids = [i["id"] for t in turns for i in t["items"]]
                    assert len(item_ids) == len(set(item_ids))
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


async def test_every_thread_notification_names_its_thread_at_the_top(
    server: ServerUnderTest,
) -> None:
    """A client routes every thread-scoped notification by `params.threadId`
    (turn/started and friends carry it beside `turn`, thread/started beside
    `thread`)."""
    with anyio.fail_after(15):
        async with server.connect() as client:
            mark = client.mark()
            thread_id = await new_thread(client)
            turn_id = await start_turn(client, thread_id, "?think why\nhello")
            await wait_terminal(client, turn_id, start=mark)
            await client.settle()
            notifications = [m for m in client.messages[mark:] if "method" in m and "id" not in m]
            assert {"thread/started", "turn/started", "turn/completed"} <= {
                m["method"] for m in notifications
            }
            for message in notifications:
                assert message["params"].get("threadId") == thread_id, message["method"]


async def test_only_a_later_turn_reads_the_earlier_ones(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread's first turn has nothing earlier to read (no trip to the
    database for it); its second reads the first, and the model gets it."""
    from appserver.storage.threads import ThreadRepository

    reads: list[str] = []
    original = ThreadRepository.turns

    async def counted(self: ThreadRepository, thread_id: str, *args: Any, **kw: Any) -> Any:
        reads.append(thread_id)
        return await original(self, thread_id, *args, **kw)

    monkeypatch.setattr(ThreadRepository, "turns", counted)
    with anyio.fail_after(15):
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            await run_turn(client, thread_id, "one")
            assert reads == []
            await run_turn(client, thread_id, "two")
            assert reads == [thread_id]
            usage = [
                message["params"]
                for message in client.messages[mark:]
                if message.get("method") == "item/usage/delta"
            ]
            # The second request carried the first turn too.
            assert usage[-1]["inputTokens"] > usage[0]["inputTokens"]


async def test_usage_keeps_its_place_among_the_turns_events(workspace: Path) -> None:
    """A model call's usage goes out with what follows it (the response's items
    closing, the turn's end: one commit), never after text streamed later, and
    its totals are the turn's."""
    from appserver.providers.base import ModelRequest, Stop, TextDelta, Usage

    class UsageMidway:
        default_model = "midway"

        async def stream(self, request: ModelRequest) -> Any:
            yield TextDelta("before ")
            yield Usage(5, 1)  # reported mid-stream (as some providers do)
            yield TextDelta("after")
            yield Usage(0, 2)
            yield Stop("end_turn")

    with anyio.fail_after(15):
        async with (
            running_server("memory", workspace, provider=UsageMidway()) as sut,
            sut.connect() as client,
        ):
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "hello")
            terminal = await wait_terminal(client, turn_id, start=mark)
            methods = [m.get("method") for m in client.messages[mark:] if "method" in m]
            events = [
                m
                for m in methods
                if m in ("item/usage/delta", "item/agentMessage/delta", "item/completed")
                or (m or "").startswith("turn/")
            ]
            assert events[-6:] == [
                "item/agentMessage/delta",  # "before "
                "item/usage/delta",  # the first report, before the text after it
                "item/agentMessage/delta",  # "after"
                "item/usage/delta",
                "item/completed",  # the agentMessage
                "turn/completed",
            ]
            usage = terminal["params"]["turn"]["tokenUsage"]
            assert (usage["inputTokens"], usage["outputTokens"]) == (5, 3)


async def test_a_new_thread_and_its_first_turn_read_nothing_they_cannot_have(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``thread/start`` answers with the view it announced, made without reading
    a queue, a plan, SubAgent children or client tools that no one can have
    given a thread nobody knows yet; ``thread/read`` still reads them."""
    from appserver.storage.events import EventRepository
    from appserver.storage.plans import PlanRepository
    from appserver.storage.spawn_edges import SpawnEdgeRepository
    from appserver.storage.threads import ThreadRepository

    reads: list[str] = []

    def counting(cls: Any, name: str) -> None:
        original = getattr(cls, name)

        async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            reads.append(name)
            return await original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, counted)

    counting(EventRepository, "queue")
    counting(PlanRepository, "get")
    counting(SpawnEdgeRepository, "children")
    counting(ThreadRepository, "dynamic_tools")
    with anyio.fail_after(15):
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            started = await client.request("thread/start", {"identity": IDENTITY})
            assert started["thread"]["queuedInputs"] == []
            assert "plan" not in started or started["plan"] is None
            await run_turn(client, started["thread"]["id"], "one")
            assert "dynamic_tools" not in reads
            assert "get" not in reads and "children" not in reads
            await client.request("thread/read", {"threadId": started["thread"]["id"]})
            assert "get" in reads and "children" in reads
