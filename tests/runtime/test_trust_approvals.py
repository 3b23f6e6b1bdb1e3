"""An approval has one answer, and a grant is as narrow as its prompt (issue 24).

* The first answer to ``item/approval/request`` wins: a second one read before
  the waiting task wakes (two answers in one write) is ignored and logged.
* An answer with neither ``result`` nor ``error`` declines at once.
* A shell grant covers the call its prompt showed: how the command runs (to its
  end, in the background, with its stdin open) is part of the key, and input
  the agent types into a background terminal is asked on its own, with an
  exact scope (that input to that terminal) and a wider one (any input to it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.protocol.errors import RpcError
from appserver.rpc.connection import Connection, RequestContext
from appserver.runtime.grant_keys import session_scopes, shell_command_key, stored_grant
from appserver.tools.base import ApprovalNeed
from appserver.transport.memory import memory_pair
from tests.support.client import RpcClient
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import (
    Approver,
    new_thread,
    one_item,
    run_turn,
    start_turn,
    wait_terminal,
)

DOORS = ["stdio", "websocket"]  # the transports the race was seen on
TERMINALS = {"backgroundTerminals": True, "commandExecutionStreaming": True}


def _tool(name: str, **arguments: Any) -> str:
    return f"?tool {name} {json.dumps(arguments)}"


def _answer(request: dict[str, Any], decision: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"decision": decision}})


async def _send_together(client: RpcClient, frames: list[str]) -> None:
    """The frames in one write on stdio (one read gives the server all of them);
    back to back on WebSocket."""
    if hasattr(client.stream, "send_bytes"):
        await client.send_raw("\n".join(frames))
    else:
        for frame in frames:
            await client.send_raw(frame)


# --- one answer per approval ------------------------------------------------------------


@pytest.mark.parametrize("kind", DOORS)
async def test_the_first_of_two_answers_in_one_write_wins(
    kind: str, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="appserver.rpc")
    with anyio.fail_after(30):
        async with running_server(kind, workspace) as server, server.connect() as client:
            approver = Approver(client, None)
            thread_id = await new_thread(client)
            # Before the fix: decline then accept ran the command 10 of 10 times over
            # stdio and 6 of 10 over WebSocket; several rounds, both orders.
            for round_number in range(1, 7):
                first, second = ("decline", "accept") if round_number % 2 else ("accept", "decline")
                target = workspace / f"round{round_number}.txt"
                mark = client.mark()
                turn_id = await start_turn(client, thread_id, f"!touch {target.name}")
                request = await approver.wait_request(round_number)
                await _send_together(client, [_answer(request, first), _answer(request, second)])
                terminal = await wait_terminal(client, turn_id, start=mark)
                assert terminal["method"] == "turn/completed"
                response = one_item(client, turn_id, "approvalResponse", mark)
                assert response["payload"]["decision"] == first, round_number
                assert target.exists() is (first == "accept"), round_number
    if kind == "websocket":  # in process: its log is ours to read
        ignored = [r for r in caplog.records if "already answered" in r.getMessage()]
        assert ignored and all(r.levelno == logging.WARNING for r in ignored)


class _Asker:
    """An application with no methods: the test only sends server->client requests."""

    def admit(self, connection: Connection, method: str) -> RpcError | None:
        return None

    def access(self, method: str) -> str:
        return "write"

    def holds(self, method: str) -> bool:
        return False

    def overloaded(self) -> RpcError:
        return RpcError(-31001, "busy")

    async def handle_request(self, ctx: RequestContext, params: Any) -> Any:
        raise RpcError(-32601, "no methods")

    def handle_notification(self, connection: Connection, method: str, params: Any) -> None:
        pass

    def connection_closed(self, connection: Connection) -> None:
        pass


async def test_the_first_answer_stands_whatever_follows_before_the_waiter_wakes() -> None:
    """The core, step by step: two answers and the connection's close all happen
    before the waiting task runs again; the first answer is what it gets."""
    client, server_end = memory_pair()
    connection = Connection(server_end, _Asker())
    answers: list[Any] = []

    async def ask() -> None:
        answers.append(await connection.request("ask", {}, timeout=10))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(connection.serve)
            tg.start_soon(ask)
            request = json.loads(await client.receive())
            # A response is settled in the read path without waiting (no task switch):
            # nothing below lets the asking task run before the close.
            for result in ("first", "second"):
                frame = {"jsonrpc": "2.0", "id": request["id"], "result": result}
                await connection._handle_frame(json.dumps(frame))
            connection.close("peer gone")
        await client.close()
    assert answers == ["first"]


@pytest.mark.parametrize("kind", DOORS)
async def test_an_answer_with_neither_result_nor_error_declines_at_once(
    kind: str, workspace: Path
) -> None:
    # The approval timeout is the default 120 s: only an immediate decline ends this in time.
    with anyio.fail_after(20):
        async with running_server(kind, workspace) as server, server.connect() as client:
            approver = Approver(client, None)
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "!touch empty-answer.txt")
            request = await approver.wait_request()
            await client.send({"jsonrpc": "2.0", "id": request["id"]})
            terminal = await wait_terminal(client, turn_id, start=mark)
            assert terminal["method"] == "turn/completed"
            response = one_item(client, turn_id, "approvalResponse", mark)
            assert response["payload"]["decision"] == "decline"
            assert not (workspace / "empty-answer.txt").exists()
            # It answered the server's request: no error reply carries that id back.
            assert not [
                m for m in client.since(mark) if m.get("id") == request["id"] and "error" in m
            ]


# --- a grant covers what its prompt showed ------------------------------------------------


def test_how_a_command_runs_is_part_of_its_key() -> None:
    plain = ApprovalNeed("shell", "bash", "/w", "")
    background = ApprovalNeed("shell", "bash", "/w", "", background=True)
    interactive = ApprovalNeed("shell", "bash", "/w", "", background=True, interactive=True)
    keys = [shell_command_key(need) for need in (plain, background, interactive)]
    assert len(set(keys)) == 3
    assert keys[0].startswith("shell:cmd-") and keys[1].startswith("shell:background-")
    assert keys[2].startswith("shell:interactive-")
    # Remembered for good (acceptAlways), they stay apart too.
    assert len({stored_grant(need) for need in (plain, background, interactive)}) == 3
    assert stored_grant(plain) == ("shell", "bash", "/w")  # grants stored before still hold
    # The prompt says how it runs.
    assert "background terminal with its stdin open" in session_scopes(interactive)[0].description
    # Typed input is its own thing: never the key of the same text run as a command.
    typed = ApprovalNeed("shell", "bash", "/w", "", terminal="term_0123456789ab")
    exact, wider = session_scopes(typed)
    assert exact.scope_key.startswith("shell:stdin-") and exact.scope_key not in keys
    assert wider.scope_key == "shell:stdin:term_0123456789ab"
    assert stored_grant(typed) == ("shell+stdin", "bash", "term_0123456789ab")


@pytest.fixture
async def memory_server(workspace: Path) -> AsyncIterator[ServerUnderTest]:
    async with running_server("memory", workspace) as sut:
        yield sut


async def test_an_exact_grant_of_a_command_does_not_cover_it_in_the_background(
    memory_server: ServerUnderTest,
) -> None:
    with anyio.fail_after(20):
        async with memory_server.connect() as client:
            approver = Approver(client, "acceptForSession")
            thread_id = await new_thread(client)
            await run_turn(client, thread_id, _tool("shell", command="true"))
            await run_turn(client, thread_id, _tool("shell", command="true"))
            assert len(approver.requests) == 1  # the exact grant covers the same call

            approver.decision = "decline"
            mark = client.mark()
            turn_id, _ = await run_turn(
                client, thread_id, _tool("shell", command="true", run_in_background=True)
            )
            assert len(approver.requests) == 2
            params = approver.requests[1]["params"]
            assert "as a background terminal" in params["reason"]
            assert "as a background terminal" in params["sessionScopes"][0]["description"]
            assert params["scopeKey"] != approver.requests[0]["params"]["scopeKey"]
            assert one_item(client, turn_id, "toolResult", mark)["payload"]["success"] is False

            await run_turn(
                client,
                thread_id,
                _tool("shell", command="true", run_in_background=True, interactive=True),
            )
            assert len(approver.requests) == 3
            params = approver.requests[2]["params"]
            assert "stdin open" in params["reason"] and "asked separately" in params["reason"]

            # acceptAlways of the plain command is remembered for it alone.
            approver.decision = "acceptAlways"
            await run_turn(client, thread_id, _tool("shell", command="echo plain"))
            approver.decision = "decline"
            await run_turn(
                client, thread_id, _tool("shell", command="echo plain", run_in_background=True)
            )
            assert len(approver.requests) == 5


def _output(client: RpcClient, session_id: str) -> str:
    """What the terminal printed so far (its live ``terminal/outputDelta``)."""
    return "".join(
        m["params"]["delta"]
        for m in client.notifications("terminal/outputDelta")
        if m["params"]["terminal"]["sessionId"] == session_id
    )


async def _start_terminal(client: RpcClient, thread_id: str) -> str:
    """The model starts ``cat`` as an interactive background terminal; its session id."""
    mark = client.mark()
    turn_id, _ = await run_turn(
        client,
        thread_id,
        _tool("shell", command="cat", run_in_background=True, interactive=True, yield_time_ms=1),
    )
    return str(one_item(client, turn_id, "commandExecution", mark)["payload"]["sessionId"])


async def _write(client: RpcClient, thread_id: str, session_id: str, text: str) -> dict[str, Any]:
    """The model writes ``text`` to the terminal; the call's toolResult payload."""
    mark = client.mark()
    turn_id, _ = await run_turn(
        client, thread_id, _tool("write_stdin", session_id=session_id, input=text, yield_time_ms=1)
    )
    return dict(one_item(client, turn_id, "toolResult", mark)["payload"])


async def test_input_to_a_terminal_is_asked_and_its_grant_is_narrow(
    memory_server: ServerUnderTest, workspace: Path
) -> None:
    answers: list[dict[str, Any]] = []

    def decide(params: dict[str, Any]) -> dict[str, Any]:
        return answers.pop(0)

    with anyio.fail_after(30):
        async with memory_server.connect(capabilities=TERMINALS) as client:
            approver = Approver(client, decide)
            thread_id = await new_thread(client)
            answers.append({"decision": "acceptForSession", "scope": "wider"})  # every command
            session_id = await _start_terminal(client, thread_id)
            assert len(approver.requests) == 1

            # Typing is asked, even under the wider shell grant: it is not a command.
            answers.append({"decision": "acceptForSession"})
            assert (await _write(client, thread_id, session_id, "one\n"))["success"] is True
            assert len(approver.requests) == 2
            params = approver.requests[1]["params"]
            assert params["approvalType"] == "shell" and params["operation"] == "one\n"
            assert params["target"] == str(workspace.resolve())
            assert session_id in params["reason"] and "`cat`" in params["reason"]
            exact, wider = params["sessionScopes"]
            assert exact["scope"] == "exact" and "this input" in exact["description"]
            assert wider["scope"] == "wider"
            assert wider["description"].startswith(f"any input to terminal {session_id}")

            # The exact grant covers that input to that terminal, nothing else.
            assert (await _write(client, thread_id, session_id, "one\n"))["success"] is True
            assert len(approver.requests) == 2
            answers.append({"decision": "decline"})
            declined = await _write(client, thread_id, session_id, "two\n")
            assert declined["success"] is False and declined["result"].startswith("Declined")
            assert len(approver.requests) == 3

            # Polling asks nothing.
            assert (await _write(client, thread_id, session_id, ""))["success"] is True
            assert len(approver.requests) == 3

            # The wider grant: any input to this terminal.
            answers.append({"decision": "acceptForSession", "scope": "wider"})
            await _write(client, thread_id, session_id, "three\n")
            await _write(client, thread_id, session_id, "four\n")
            assert len(approver.requests) == 4

            # ... but not to another terminal of the thread.
            other = await _start_terminal(client, thread_id)
            assert len(approver.requests) == 4  # the wider shell grant covers starting it
            answers.append({"decision": "decline"})
            await _write(client, thread_id, other, "three\n")
            assert len(approver.requests) == 5

            # What was declined never reached the terminal: a pipe keeps the order of what
            # was written, so once "four" is out, "two" would be before it.
            await client.wait(lambda _: "four\n" in _output(client, session_id))
            assert _output(client, session_id) == "one\none\nthree\nfour\n"
            assert "three" not in _output(client, other)
