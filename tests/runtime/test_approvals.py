"""The approval flow end to end: request shape, every decision, fallbacks that
never hang, policies, and several clients on one thread (reference §6)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.runtime.approvals import shell_command_key
from appserver.runtime.turns import EngineConfig
from appserver.tools.base import ApprovalNeed
from tests.conftest import BOTH_STORES
from tests.support.servers import TRANSPORTS, ServerUnderTest, running_server
from tests.support.turns import (
    Approver,
    deltas,
    items_completed,
    new_thread,
    one_item,
    run_turn,
    start_turn,
    terminals,
    thread_events,
    turn_events,
    wait_terminal,
)

STORES = BOTH_STORES  # thread, turn and approval tests run on SQLite and on PostgreSQL

SHORT = EngineConfig(approval_timeout=0.3, reconnect_grace=0.3)


def _requests(client: Any) -> list[dict[str, Any]]:
    return [m for m in client.messages if m.get("method") == "item/approval/request" and "id" in m]


def _item_methods(client: Any, turn_id: str, item_id: str) -> list[str]:
    return [
        m["method"]
        for m in turn_events(client, turn_id)
        if m["params"].get("item", {}).get("id") == item_id
    ]


# --- 2. request shape and decisions -------------------------------------------------


async def test_shell_approval_request_and_accept(server: ServerUnderTest, workspace: Path) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, "accept")
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!echo hi")
            assert terminal["method"] == "turn/completed"

            # The tool call streamed its arguments.
            call = one_item(client, turn_id, "toolCall", mark)
            assert call["payload"]["toolName"] == "shell"
            assert call["payload"]["arguments"] == {"command": "echo hi"}
            fragments = deltas(client, call["id"], "item/toolCall/argumentsDelta", mark)
            assert fragments and all(f["deltaKind"] == "toolCallArguments" for f in fragments)
            assert fragments[0]["toolName"] == "shell" and fragments[0]["callId"]
            assert "".join(f["delta"] for f in fragments) == '{"command": "echo hi"}'

            # One request, with everything a client needs to render it.
            assert len(approver.requests) == 1
            request = approver.requests[0]
            params = request["params"]
            request_item = one_item(client, turn_id, "approvalRequest", mark)
            assert params["threadId"] == thread_id and params["turnId"] == turn_id
            assert params["itemId"] == request_item["id"]
            assert re.fullmatch(r"[0-9a-f]{12}", params["requestId"])
            assert params["approvalType"] == "shell"
            assert params["operation"] == "echo hi"
            assert params["target"] == str(workspace.resolve())
            assert params["scopeKey"] == shell_command_key(
                ApprovalNeed("shell", "echo hi", str(workspace.resolve()), "")
            )
            assert [scope["scope"] for scope in params["sessionScopes"]] == ["exact", "wider"]
            assert params["sessionScopes"][0]["scopeKey"] == params["scopeKey"]
            assert params["sessionScopes"][1]["scopeKey"] == "shell:*"
            assert params["reason"]
            assert request_item["payload"] == {
                key: params[key]
                for key in (
                    "approvalType",
                    "operation",
                    "target",
                    "requestId",
                    "scopeKey",
                    "reason",
                )
            }

            # waitingOnApproval true was announced before the request went out.
            request_at = client.messages.index(request)
            waiting = [
                i
                for i, m in enumerate(client.messages)
                if m.get("method") == "thread/runtimeChanged"
                and m["params"]["runtime"]["waitingOnApproval"]
            ]
            assert waiting and waiting[0] < request_at

            # After the answer: approvalResponse started, resolved, completed.
            response = one_item(client, turn_id, "approvalResponse", mark)
            assert response["payload"] == {
                "requestId": params["requestId"],
                "approved": True,
                "decision": "accept",
            }
            methods = [
                m["method"]
                for m in turn_events(client, turn_id, mark)
                if m["params"].get("item", {}).get("id") == response["id"]
            ]
            assert methods == ["item/started", "item/approval/resolved", "item/completed"]

            result = one_item(client, turn_id, "toolResult", mark)
            assert result["payload"]["success"] is True
            assert result["payload"]["callId"] == call["payload"]["callId"]
            assert "hi" in result["payload"]["result"]
            agent = items_completed(client, turn_id, "agentMessage", mark)
            assert agent[-1]["payload"]["text"] == "The command exited with code 0."

            # The turn went back to running; the thread is idle at the end.
            await client.notification(
                "thread/runtimeChanged", start=mark, where=lambda p: not p["runtime"]["running"]
            )
            flags = [
                (m["params"]["runtime"]["running"], m["params"]["runtime"]["waitingOnApproval"])
                for m in thread_events(client, thread_id, mark)
                if m["method"] == "thread/runtimeChanged"
            ]
            assert flags == [(True, False), (True, True), (True, False), (False, False)]


async def test_accept_for_session_covers_the_thread_only(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, "acceptForSession")
            thread_id = await new_thread(client)
            _, terminal = await run_turn(client, thread_id, "!echo one")
            assert terminal["method"] == "turn/completed"
            assert len(approver.requests) == 1

            # The same command in the same thread: not asked again (the exact scope).
            approver.decision = "decline"
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!echo one")
            assert terminal["method"] == "turn/completed"
            assert len(approver.requests) == 1
            assert not items_completed(client, turn_id, "approvalRequest", mark)
            result = one_item(client, turn_id, "toolResult", mark)
            assert result["payload"]["success"] is True and "one" in result["payload"]["result"]
            # Another command is asked again (tests/runtime/test_approval_scopes.py has the rest).
            await run_turn(client, thread_id, "!echo two")
            assert len(approver.requests) == 2
            approver.decision = "acceptForSession"

            # Another thread is asked.
            other = await new_thread(client)
            _, terminal = await run_turn(client, other, "!echo one")
            assert len(approver.requests) == 3


async def test_accept_always_survives_a_restart(workspace: Path) -> None:
    with anyio.fail_after(20):
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            approver = Approver(client, "acceptAlways")
            thread_id = await new_thread(client)
            _, terminal = await run_turn(client, thread_id, "!echo persisted")
            assert terminal["method"] == "turn/completed"
            assert len(approver.requests) == 1

        async with running_server("memory", workspace) as sut, sut.connect() as client:
            approver = Approver(client, "decline")
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!echo persisted")
            assert terminal["method"] == "turn/completed"
            assert approver.requests == []
            assert one_item(client, turn_id, "toolResult", mark)["payload"]["success"] is True
            # The grant is for that exact command, not all shell.
            turn_id, terminal = await run_turn(client, thread_id, "!echo something else")
            assert len(approver.requests) == 1
            assert one_item(client, turn_id, "toolResult")["payload"]["success"] is False


async def test_decline_is_a_tool_failure_not_a_turn_failure(
    server: ServerUnderTest, workspace: Path
) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, "decline")
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!touch declined.txt")
            assert terminal["method"] == "turn/completed"
            assert len(approver.requests) == 1
            assert not (workspace / "declined.txt").exists()
            response = one_item(client, turn_id, "approvalResponse", mark)
            assert response["payload"]["decision"] == "decline"
            assert response["payload"]["approved"] is False
            result = one_item(client, turn_id, "toolResult", mark)
            assert result["payload"]["success"] is False
            assert result["payload"]["result"].startswith("Declined")
            agent = items_completed(client, turn_id, "agentMessage", mark)
            assert agent[-1]["payload"]["text"] == "The shell call was declined."
            # A decline is remembered nowhere: the next call asks again.
            await run_turn(client, thread_id, "!touch declined.txt")
            assert len(approver.requests) == 2


async def test_cancel_cancels_the_turn(server: ServerUnderTest, workspace: Path) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            Approver(client, "cancel")
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!touch cancelled.txt")
            assert terminal["method"] == "turn/cancelled"
            assert terminal["params"]["reason"] == "approvalCancelled"
            assert terminal["params"]["turn"]["status"] == "cancelled"
            assert not (workspace / "cancelled.txt").exists()
            response = one_item(client, turn_id, "approvalResponse", mark)
            assert response["payload"]["decision"] == "cancel"
            assert response["payload"]["approved"] is False
            assert not items_completed(client, turn_id, "toolResult", mark)
            await client.settle()
            assert len(terminals(client, turn_id, mark)) == 1
            # The thread is usable afterwards.
            _, after = await run_turn(client, thread_id, "hello")
            assert after["method"] == "turn/completed"


MALFORMED = [
    {"result": {"decision": "maybe"}},
    {"result": {"decision": "ACCEPT"}},
    {"result": {}},
    {"result": None},
    {"result": "accept"},
    {"result": {"decision": ["accept"]}},
    {"error": {"code": -32000, "message": "user closed the dialog"}},
]


async def test_malformed_answers_decline(server: ServerUnderTest, workspace: Path) -> None:
    with anyio.fail_after(20):
        async with server.connect() as client:
            approver = Approver(client, None)
            thread_id = await new_thread(client)
            for n, answer in enumerate(MALFORMED, start=1):
                mark = client.mark()
                turn_id = await start_turn(client, thread_id, f"!touch malformed{n}.txt")
                request = await approver.wait_request(n)
                await client.send({"jsonrpc": "2.0", "id": request["id"], **answer})
                terminal = await wait_terminal(client, turn_id, start=mark)
                assert terminal["method"] == "turn/completed", answer
                response = one_item(client, turn_id, "approvalResponse", mark)
                assert response["payload"]["decision"] == "decline", answer
                assert one_item(client, turn_id, "toolResult", mark)["payload"]["success"] is False
                assert not (workspace / f"malformed{n}.txt").exists()


async def test_write_file_needs_file_write_approval(
    server: ServerUnderTest, workspace: Path
) -> None:
    seen_before: list[bool] = []

    def decide(params: dict[str, Any]) -> dict[str, Any]:
        seen_before.append((workspace / "notes.txt").exists())
        return {"decision": "accept"}

    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, decide)
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, ">notes.txt\nhello")
            assert terminal["method"] == "turn/completed"
            assert seen_before == [False]
            params = approver.requests[0]["params"]
            assert params["approvalType"] == "file"
            assert params["operation"] == "write"
            assert params["scopeKey"] == "file:write"
            assert params["target"] == str((workspace / "notes.txt").resolve())
            assert (workspace / "notes.txt").read_text() == "hello\n"
            assert one_item(client, turn_id, "toolResult", mark)["payload"]["success"] is True
            agent = items_completed(client, turn_id, "agentMessage", mark)
            assert agent[-1]["payload"]["text"] == "Wrote 6 bytes to notes.txt."


async def test_write_file_declined_writes_nothing(server: ServerUnderTest, workspace: Path) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            Approver(client, "decline")
            thread_id = await new_thread(client)
            _, terminal = await run_turn(client, thread_id, ">kept-out.txt\nsecret")
            assert terminal["method"] == "turn/completed"
            assert not (workspace / "kept-out.txt").exists()


# --- 3. fallbacks ---------------------------------------------------------------------------


def _error_items(client: Any, turn_id: str, mark: int = 0) -> list[dict[str, Any]]:
    return [item["payload"] for item in items_completed(client, turn_id, "error", mark)]


@pytest.fixture(params=TRANSPORTS)
async def short_server(
    request: pytest.FixtureRequest, workspace: Path
) -> AsyncIterator[ServerUnderTest]:
    """A server whose approvals time out after 0.3 s (stdio: --approval-timeout)."""
    async with running_server(request.param, workspace, engine=SHORT) as sut:
        yield sut


@pytest.fixture(params=["memory", "websocket"])
async def short_multi_server(
    request: pytest.FixtureRequest, workspace: Path
) -> AsyncIterator[ServerUnderTest]:
    """Several clients; a vanished approver is given up on after 0.3 s."""
    engine = EngineConfig(reconnect_grace=0.3)
    async with running_server(request.param, workspace, engine=engine) as sut:
        yield sut


async def test_approval_timeout_declines(short_server: ServerUnderTest, workspace: Path) -> None:
    with anyio.fail_after(15):
        async with short_server.connect() as client:
            approver = Approver(client, None)  # never answers
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!touch late.txt")
            assert terminal["method"] == "turn/completed"
            assert len(approver.requests) == 1
            errors = _error_items(client, turn_id, mark)
            assert len(errors) == 1
            assert errors[0]["code"] == "approval_timeout"
            assert errors[0]["fatal"] is False
            response = one_item(client, turn_id, "approvalResponse", mark)
            assert response["payload"]["decision"] == "decline"
            result = one_item(client, turn_id, "toolResult", mark)
            assert result["payload"]["success"] is False
            assert not (workspace / "late.txt").exists()
            # A late answer changes nothing.
            await approver.answer(approver.requests[0], "accept")
            await client.settle()
            assert not (workspace / "late.txt").exists()


async def test_client_without_approval_support_is_not_asked(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect(capabilities={"approvalSupport": False}) as client:
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!echo nobody-asked")
            assert terminal["method"] == "turn/completed"
            assert _requests(client) == []
            errors = _error_items(client, turn_id, mark)
            assert [e["code"] for e in errors] == ["approval_unavailable"]
            assert errors[0]["fatal"] is False
            assert one_item(client, turn_id, "approvalResponse", mark)["payload"]["decision"] == (
                "decline"
            )
            assert one_item(client, turn_id, "toolResult", mark)["payload"]["success"] is False


async def test_client_gone_resolves_after_the_grace(
    short_multi_server: ServerUnderTest, workspace: Path
) -> None:
    sut = short_multi_server
    with anyio.fail_after(15):
        async with sut.connect("observer", capabilities={"approvalSupport": False}) as obs:
            async with sut.connect("asker") as asker:
                approver = Approver(asker, None)
                thread_id = await new_thread(asker)
                await obs.request("thread/subscribe", {"threadId": thread_id})
                mark = obs.mark()
                turn_id = await start_turn(asker, thread_id, "!touch orphan.txt")
                await approver.wait_request()
            # The only client able to answer is gone; the turn must not hang.
            terminal = await wait_terminal(obs, turn_id, start=mark)
            assert terminal["method"] == "turn/completed"
            errors = _error_items(obs, turn_id, mark)
            assert [e["code"] for e in errors] == ["approval_client_gone"]
            assert errors[0]["fatal"] is False
            response = one_item(obs, turn_id, "approvalResponse", mark)
            assert response["payload"]["decision"] == "decline"
            assert not (workspace / "orphan.txt").exists()
            assert _requests(obs) == []


async def test_reconnecting_client_can_still_answer(multi_server: ServerUnderTest) -> None:
    """Within the grace a client that comes back is asked again and answers."""
    with anyio.fail_after(15):
        async with multi_server.connect("first") as first:
            approver = Approver(first, None)
            thread_id = await new_thread(first)
            turn_id = await start_turn(first, thread_id, "!echo came-back")
            request = await approver.wait_request()
        async with multi_server.connect("second") as second:
            again = Approver(second, "accept")
            await second.request("thread/subscribe", {"threadId": thread_id})
            terminal = await wait_terminal(second, turn_id)
            assert terminal["method"] == "turn/completed"
            assert again.requests[0]["params"] == request["params"]
            result = [i for i in terminal["params"]["turn"]["items"] if i["type"] == "toolResult"]
            assert result[0]["payload"]["success"] is True


async def test_policy_auto_approve_runs_without_asking(
    server: ServerUnderTest, workspace: Path
) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, "decline")
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!touch auto.txt")
            assert terminal["method"] == "turn/completed"
            assert approver.requests == []
            assert (workspace / "auto.txt").exists()
            assert not items_completed(client, turn_id, "approvalRequest", mark)
            assert one_item(client, turn_id, "toolResult", mark)["payload"]["success"] is True


async def test_policy_interrupt_cancels_at_the_first_gated_call(
    server: ServerUnderTest, workspace: Path
) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, "accept")
            thread_id = await new_thread(client, approvalPolicy="interrupt")
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, "!touch never.txt")
            assert terminal["method"] == "turn/cancelled"
            assert terminal["params"]["reason"] == "approvalCancelled"
            assert approver.requests == []
            assert not (workspace / "never.txt").exists()
            assert not items_completed(client, turn_id, "toolResult", mark)
            # Plain text needs no approval under any policy.
            _, terminal = await run_turn(client, thread_id, "just talk")
            assert terminal["method"] == "turn/completed"


async def test_policy_set_by_config_update(server: ServerUnderTest, workspace: Path) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, "decline")
            thread_id = await new_thread(client)
            await client.request(
                "thread/config/update",
                {"threadId": thread_id, "config": {"approvalPolicy": "autoApprove"}},
            )
            _, terminal = await run_turn(client, thread_id, "!touch updated.txt")
            assert terminal["method"] == "turn/completed"
            assert approver.requests == []
            assert (workspace / "updated.txt").exists()


async def test_outside_workspace_refused_without_asking(
    server: ServerUnderTest, workspace: Path
) -> None:
    outside = workspace.parent / "outside.txt"
    outside.write_text("not yours\n")
    script = f'?tool read_file {{"path": "{outside}"}}'
    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, "accept")
            thread_id = await new_thread(client, requireApprovalOutsideWorkspace=False)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, thread_id, script)
            assert terminal["method"] == "turn/completed"
            assert approver.requests == []
            errors = _error_items(client, turn_id, mark)
            assert [e["code"] for e in errors] == ["outside_workspace_refused"]
            result = one_item(client, turn_id, "toolResult", mark)
            assert result["payload"]["success"] is False
            assert "not yours" not in result["payload"]["result"]

            # By default reading outside the workspace asks (and then reads).
            other = await new_thread(client)
            mark = client.mark()
            turn_id, terminal = await run_turn(client, other, script)
            assert len(approver.requests) == 1
            params = approver.requests[0]["params"]
            assert params["approvalType"] == "file" and params["operation"] == "read"
            assert params["target"] == str(outside.resolve())
            assert params["scopeKey"] == f"file:read:{outside.resolve()}"
            result = one_item(client, turn_id, "toolResult", mark)
            assert result["payload"]["success"] is True
            assert "not yours" in result["payload"]["result"]


async def test_reading_inside_the_workspace_needs_no_approval(
    server: ServerUnderTest, workspace: Path
) -> None:
    (workspace / "inside.txt").write_text("all yours\n")
    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, "decline")
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id, _ = await run_turn(client, thread_id, '?tool read_file {"path": "inside.txt"}')
            assert approver.requests == []
            result = one_item(client, turn_id, "toolResult", mark)
            assert result["payload"]["success"] is True
            assert "all yours" in result["payload"]["result"]


# --- 4. several clients ----------------------------------------------------------------------


async def test_two_clients_first_answer_wins(
    multi_server: ServerUnderTest, workspace: Path
) -> None:
    with anyio.fail_after(15):
        async with multi_server.connect("a") as a, multi_server.connect("b") as b:
            asker_a, asker_b = Approver(a, None), Approver(b, None)
            thread_id = await new_thread(a)
            await a.request("thread/subscribe", {"threadId": thread_id})
            await b.request("thread/subscribe", {"threadId": thread_id})
            mark_a, mark_b = a.mark(), b.mark()
            turn_id = await start_turn(a, thread_id, "!touch winner.txt")
            request_a = await asker_a.wait_request()
            request_b = await asker_b.wait_request()
            assert request_a["params"] == request_b["params"]

            await asker_b.answer(request_b, "accept")
            resolved = await a.notification("item/approval/resolved", start=mark_a)
            assert resolved["item"]["payload"]["decision"] == "accept"
            await asker_a.answer(request_a, "decline")  # too late: ignored

            for client, mark in ((a, mark_a), (b, mark_b)):
                terminal = await wait_terminal(client, turn_id, start=mark)
                assert terminal["method"] == "turn/completed"
            await a.settle()
            await b.settle()
            assert (workspace / "winner.txt").exists()
            for client, mark in ((a, mark_a), (b, mark_b)):
                events = turn_events(client, turn_id, mark)
                numbers = [m["params"]["seq"] for m in events]
                assert len(numbers) == len(set(numbers)), "an event arrived twice"
                assert len(terminals(client, turn_id, mark)) == 1
                assert len(items_completed(client, turn_id, "approvalResponse", mark)) == 1
                assert len(client.since(mark, "item/approval/resolved")) == 1
                result = one_item(client, turn_id, "toolResult", mark)
                assert result["payload"]["success"] is True
            assert [m["params"]["seq"] for m in turn_events(a, turn_id, mark_a)] == [
                m["params"]["seq"] for m in turn_events(b, turn_id, mark_b)
            ]


async def test_resume_without_subscribing_is_not_asked(multi_server: ServerUnderTest) -> None:
    """A client that resumes a thread it does not subscribe would never see the
    request resolved or the turn end, so it is not asked; subscribing asks it."""
    with anyio.fail_after(15):
        async with multi_server.connect("starter") as starter:
            starter_approver = Approver(starter, None)
            thread_id = await new_thread(starter)
            mark = starter.mark()
            turn_id = await start_turn(starter, thread_id, "!echo resumed")
            await starter_approver.wait_request()
            async with multi_server.connect("late") as late:
                late_approver = Approver(late, "accept")
                await late.request("thread/resume", {"threadId": thread_id})
                await late.settle()
                assert late_approver.requests == []
                late_mark = late.mark()
                await late.request("thread/subscribe", {"threadId": thread_id})
                await late_approver.wait_request()
                terminal = await wait_terminal(late, turn_id, start=late_mark)
                assert terminal["method"] == "turn/completed"
                assert len(late.since(late_mark, "item/approval/resolved")) == 1
                await wait_terminal(starter, turn_id, start=mark)


@pytest.mark.parametrize("join", ["thread/subscribe"])
async def test_pending_approval_is_sent_to_a_client_that_joins(
    multi_server: ServerUnderTest, join: str
) -> None:
    with anyio.fail_after(15):
        async with multi_server.connect("starter") as starter:
            starter_approver = Approver(starter, None)  # sees it, never answers
            thread_id = await new_thread(starter)
            mark = starter.mark()
            turn_id = await start_turn(starter, thread_id, "!echo joined")
            first = await starter_approver.wait_request()
            async with multi_server.connect("late") as late:
                late_approver = Approver(late, "accept")
                await late.request(join, {"threadId": thread_id})
                request = await late_approver.wait_request()
                assert request["params"] == first["params"]
                terminal = await wait_terminal(starter, turn_id, start=mark)
                assert terminal["method"] == "turn/completed"
                resolved = starter.since(mark, "item/approval/resolved")
                assert len(resolved) == 1
                assert resolved[0]["params"]["item"]["payload"]["decision"] == "accept"
                assert one_item(starter, turn_id, "toolResult", mark)["payload"]["success"]
                # Joining twice does not ask twice.
                await late.request(join, {"threadId": thread_id})
                await late.settle()
                assert len(late_approver.requests) == 1


async def test_observer_without_approval_support_is_never_asked(
    multi_server: ServerUnderTest,
) -> None:
    with anyio.fail_after(15):
        async with (
            multi_server.connect("asker") as asker,
            multi_server.connect("watcher", capabilities={"approvalSupport": False}) as watcher,
        ):
            Approver(asker, "accept")
            thread_id = await new_thread(asker)
            await watcher.request("thread/subscribe", {"threadId": thread_id})
            mark = watcher.mark()
            turn_id = await start_turn(asker, thread_id, "!echo watched")
            terminal = await wait_terminal(watcher, turn_id, start=mark)
            assert terminal["method"] == "turn/completed"
            assert _requests(watcher) == []
            assert len(watcher.since(mark, "item/approval/resolved")) == 1


# --- pending approvals never outlive their turn -------------------------------------------


async def test_deleting_the_thread_while_an_approval_is_pending(
    multi_server: ServerUnderTest, workspace: Path
) -> None:
    with anyio.fail_after(15):
        async with multi_server.connect("a") as a, multi_server.connect("b") as b:
            approver = Approver(a, None)
            thread_id = await new_thread(a)
            mark = a.mark()
            turn_id = await start_turn(a, thread_id, "!touch deleted.txt")
            await approver.wait_request()
            await b.request("thread/delete", {"threadId": thread_id})
            terminal = await wait_terminal(a, turn_id, start=mark)
            assert terminal["method"] == "turn/cancelled"
            assert terminal["params"]["reason"] == "threadDeleted"
            await approver.answer(approver.requests[0], "accept")  # too late: harmless
            await a.settle()
            assert not (workspace / "deleted.txt").exists()


@pytest.mark.parametrize("kind", ["memory", "websocket"])
async def test_shutdown_while_an_approval_is_pending(workspace: Path, kind: str) -> None:
    stop = anyio.Event()

    async def serve(*, task_status: Any) -> None:
        async with running_server(kind, workspace) as sut:
            task_status.started(sut)
            await stop.wait()

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            sut: ServerUnderTest = await tg.start(serve)
            async with sut.connect() as client:
                approver = Approver(client, None)
                thread_id = await new_thread(client)
                mark = client.mark()
                turn_id = await start_turn(client, thread_id, "!touch shutdown.txt")
                await approver.wait_request()
                stop.set()
                terminal = await wait_terminal(client, turn_id, start=mark)
                assert terminal["method"] == "turn/cancelled"
                assert terminal["params"]["reason"] == "serverShutdown"
    assert not (workspace / "shutdown.txt").exists()
    # After a restart the turn is cancelled, not left waiting for approval.
    async with running_server("memory", workspace) as sut, sut.connect() as client:
        result = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        assert result["thread"]["turns"][0]["status"] == "cancelled"
        assert result["thread"]["runtime"]["waitingOnApproval"] is False


async def test_thread_state_while_waiting_for_approval(server: ServerUnderTest) -> None:
    with anyio.fail_after(15):
        async with server.connect() as client:
            approver = Approver(client, None)
            thread_id = await new_thread(client)
            mark = client.mark()
            turn_id = await start_turn(client, thread_id, "!echo waiting")
            request = await approver.wait_request()
            result = await client.request(
                "thread/read", {"threadId": thread_id, "includeTurns": True}
            )
            assert result["thread"]["runtime"]["running"] is True
            assert result["thread"]["runtime"]["waitingOnApproval"] is True
            assert result["thread"]["turns"][-1]["status"] == "waitingApproval"
            listed = await client.request(
                "thread/list", {"identity": {"channelName": "cli", "userId": "local"}}
            )
            summary = next(t for t in listed["data"] if t["id"] == thread_id)
            assert summary["runtime"]["waitingOnApproval"] is True
            failure = await client.fail(
                "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": "x"}]}
            )
            assert failure.code == -32012
            await approver.answer(request, "accept")
            assert (await wait_terminal(client, turn_id, start=mark))["method"] == "turn/completed"
            result = await client.request(
                "thread/read", {"threadId": thread_id, "includeTurns": True}
            )
            assert result["thread"]["turns"][-1]["status"] == "completed"
