"""What ``acceptForSession`` of a shell command covers (docs/approvals.md): that
command by default, every command there only when the answer asks for ``wider``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from appserver.protocol.base import WireModel
from appserver.protocol.turns import ApprovalRequestParams, TextPart
from appserver.providers.offline import OfflineProvider
from appserver.runtime.approvals import (
    grant_key,
    parse_answer,
    scope_key,
    session_scopes,
    shell_command_key,
)
from appserver.runtime.events import Event, QuestionUnanswered
from appserver.runtime.host import Runtime
from appserver.runtime.threads import NewThread
from appserver.storage.db import Database
from appserver.tools.base import ApprovalNeed
from tests.support.servers import ServerUnderTest
from tests.support.turns import Approver, new_thread, run_turn

INSIDE = ApprovalNeed("shell", "ls -la", "/home/me/project", "Run a shell command in .")
OUTSIDE = ApprovalNeed("shell", "ls -la", "/tmp", "Run a shell command in /tmp", True)


def test_a_shell_command_offers_exact_then_wider() -> None:
    exact, wider = session_scopes(INSIDE)
    assert (exact.scope, wider.scope) == ("exact", "wider")
    assert exact.scope_key == shell_command_key(INSIDE) == scope_key(INSIDE)
    assert exact.scope_key.startswith("shell:cmd-") and exact.scope_key.count(":") == 1
    assert exact.description == (
        "this command (`ls -la`) in /home/me/project for the rest of this thread"
    )
    assert wider.scope_key == "shell:*"
    assert wider.description == "every shell command in the workspace for the rest of this thread"
    # Another command, or the same one elsewhere, is another key.
    assert shell_command_key(ApprovalNeed("shell", "ls", INSIDE.target, "")) != exact.scope_key
    assert shell_command_key(ApprovalNeed("shell", "ls -la", "/home/me", "")) != exact.scope_key


def test_outside_the_workspace_both_keys_name_the_directory() -> None:
    exact, wider = session_scopes(OUTSIDE)
    assert exact.scope_key.endswith(":/tmp") and exact.scope_key.startswith("shell:cmd-")
    assert wider.scope_key == "shell:*:/tmp"
    assert wider.description == "every shell command in /tmp for the rest of this thread"


def test_a_file_operation_offers_its_one_scope() -> None:
    (only,) = session_scopes(ApprovalNeed("file", "write", "/home/me/project/a.txt", ""))
    assert (only.scope, only.scope_key) == ("exact", "file:write")
    assert only.description == "file write of any path in the workspace for the rest of this thread"
    (outside,) = session_scopes(ApprovalNeed("file", "read", "/etc/passwd", "", True))
    assert outside.scope_key == "file:read:/etc/passwd"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("acceptForSession", ("acceptForSession", "exact")),
        ({"decision": "acceptForSession"}, ("acceptForSession", "exact")),
        ({"decision": "acceptForSession", "scope": "wider"}, ("acceptForSession", "wider")),
        ({"decision": "acceptForSession", "scope": "everything"}, ("acceptForSession", "exact")),
        ({"decision": "acceptForSession", "scope": 3}, ("acceptForSession", "exact")),
        ({"decision": "maybe", "scope": "wider"}, ("decline", "wider")),
        (None, ("decline", "exact")),
    ],
)
def test_answers_fail_closed(answer: Any, expected: tuple[str, str]) -> None:
    assert parse_answer(answer) == expected


def test_an_unknown_scope_grants_the_exact_key() -> None:
    assert grant_key(INSIDE, "wider") == "shell:*"
    assert grant_key(INSIDE, "bogus") == shell_command_key(INSIDE)
    file_need = ApprovalNeed("file", "write", "/w/a", "")
    assert grant_key(file_need, "wider") == "file:write"  # nothing wider offered


# --- over JSON-RPC: an old client (no scope in its answer) ---------------------------------


async def test_an_old_clients_session_grant_covers_that_command_only(
    server: ServerUnderTest,
) -> None:
    with anyio.fail_after(20):
        async with server.connect() as client:
            approver = Approver(client, "acceptForSession")  # answers {"decision": ...} only
            thread_id = await new_thread(client)
            _, terminal = await run_turn(client, thread_id, "!echo one")
            assert terminal["method"] == "turn/completed"
            params = approver.requests[0]["params"]
            assert [s["scope"] for s in params["sessionScopes"]] == ["exact", "wider"]
            assert params["scopeKey"] == params["sessionScopes"][0]["scopeKey"]
            assert "`echo one`" in params["sessionScopes"][0]["description"]
            await run_turn(client, thread_id, "!echo one")  # the same command: granted
            assert len(approver.requests) == 1
            await run_turn(client, thread_id, "!echo two")  # another one: asked
            assert len(approver.requests) == 2


def wider(params: dict[str, Any]) -> dict[str, Any]:
    return {"decision": "acceptForSession", "scope": "wider"}


async def test_a_wider_answer_over_json_rpc_covers_every_command(
    multi_server: ServerUnderTest,
) -> None:
    with anyio.fail_after(20):
        async with multi_server.connect() as client:
            approver = Approver(client, wider)
            thread_id = await new_thread(client)
            await run_turn(client, thread_id, "!echo one")
            await run_turn(client, thread_id, "!echo two")
            assert len(approver.requests) == 1


# --- through the runtime's port: a front door that passes the scope on --------------------


class Door:
    """A front door's client that answers every approval with ``answer``."""

    name = "door"
    closed = False

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[ApprovalRequestParams] = []

    def wants(self, kind: str, topic: str | None) -> bool:
        return True

    def deliver(self, event: Event) -> None:
        pass

    def can_answer_approvals(self) -> bool:
        return True

    async def ask_approval(self, request: WireModel, timeout: float) -> Any:
        assert isinstance(request, ApprovalRequestParams)
        self.asked.append(request)
        if self.answer is None:
            raise QuestionUnanswered("no answer")
        return self.answer


async def asked_after(workspace: Path, answer: Any, commands: list[str]) -> int:
    """How many approval requests ``commands`` (one turn each) caused."""
    db = await Database.open(workspace / ".craft" / "scopes.db")
    try:
        runtime = Runtime(db, workspace, OfflineProvider())
        door = Door(answer)
        async with anyio.create_task_group() as tg:
            await tg.start(runtime.run)
            runtime.join(door)
            thread = await runtime.threads.create(NewThread(user_id="u", channel_name="door"))
            await runtime.threads.subscribe(thread.id, door)
            for command in commands:
                parts = [TextPart(type="text", text=f"!{command}")]
                active = await runtime.turns.start(thread.id, parts, door)
                with anyio.fail_after(10):
                    await active.done.wait()
                assert active.record.status == "completed", active.record.error
            await runtime.shutdown()
            tg.cancel_scope.cancel()
    finally:
        await db.close()
    return len(door.asked)


@pytest.mark.parametrize(
    ("answer", "asked"),
    [
        ("acceptForSession", 2),  # exact: "echo two" is asked again
        ({"decision": "acceptForSession"}, 2),
        ({"decision": "acceptForSession", "scope": "nonsense"}, 2),  # fails closed
        ({"decision": "acceptForSession", "scope": "wider"}, 1),  # every command
        ({"decision": "acceptAlways", "scope": "wider"}, 2),  # always: the exact operation
    ],
)
async def test_what_a_session_answer_covers(answer: Any, asked: int, workspace: Path) -> None:
    assert await asked_after(workspace, answer, ["echo one", "echo one", "echo two"]) == asked
