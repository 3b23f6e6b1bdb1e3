"""What a grant covers, and where the workspace boundary is asked under every policy.

A grant covers what its prompt showed: the workspace, or the one outside
path (or shell working directory) the prompt named. ``autoApprove`` covers
the workspace only. See docs/security.md.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import Approver, items_completed, new_thread, one_item, run_turn


@pytest.fixture
async def memory_server(workspace: Path) -> AsyncIterator[ServerUnderTest]:
    async with running_server("memory", workspace) as sut:
        yield sut


@pytest.fixture
def outside(workspace: Path) -> Path:
    place = workspace.parent / "outside"
    place.mkdir()
    (place / "secret.txt").write_text("top secret\n")
    (place / "other.txt").write_text("also secret\n")
    return place


def tool(name: str, **arguments: Any) -> str:
    return f"?tool {name} {json.dumps(arguments)}"


def result_of(client: Any, turn_id: str, mark: int) -> dict[str, Any]:
    payload: dict[str, Any] = one_item(client, turn_id, "toolResult", mark)["payload"]
    return payload


async def test_a_session_grant_to_write_inside_does_not_cover_outside(
    memory_server: ServerUnderTest, workspace: Path, outside: Path
) -> None:
    with anyio.fail_after(15):
        async with memory_server.connect() as client:
            approver = Approver(client, "acceptForSession")
            thread_id = await new_thread(client)
            await run_turn(client, thread_id, tool("write_file", path="in.txt", content="x"))
            assert [r["params"]["scopeKey"] for r in approver.requests] == ["file:write"]
            # Inside again: covered.
            await run_turn(client, thread_id, tool("write_file", path="in2.txt", content="y"))
            assert len(approver.requests) == 1

            approver.decision = "decline"
            target = outside / "planted.txt"
            mark = client.mark()
            turn_id, _ = await run_turn(
                client, thread_id, tool("write_file", path=str(target), content="z")
            )
            assert len(approver.requests) == 2
            assert approver.requests[1]["params"]["scopeKey"] == f"file:write:{target}"
            assert result_of(client, turn_id, mark)["success"] is False
            assert not target.exists()

            mark = client.mark()
            turn_id, _ = await run_turn(
                client,
                thread_id,
                tool(
                    "edit_file", path=str(outside / "secret.txt"), old_string="top", new_string="no"
                ),
            )
            assert len(approver.requests) == 3
            assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_a_granted_read_outside_covers_that_one_path(
    memory_server: ServerUnderTest, outside: Path
) -> None:
    with anyio.fail_after(15):
        async with memory_server.connect() as client:
            approver = Approver(client, "acceptForSession")
            thread_id = await new_thread(client)
            secret = str((outside / "secret.txt").resolve())
            await run_turn(client, thread_id, tool("read_file", path=secret))
            assert approver.requests[0]["params"]["scopeKey"] == f"file:read:{secret}"
            # The same path again: covered, not asked.
            mark = client.mark()
            turn_id, _ = await run_turn(client, thread_id, tool("read_file", path=secret))
            assert len(approver.requests) == 1
            assert "top secret" in result_of(client, turn_id, mark)["result"]

            # Any other path outside asks again.
            approver.decision = "decline"
            mark = client.mark()
            turn_id, _ = await run_turn(client, thread_id, tool("read_file", path="/etc/passwd"))
            assert len(approver.requests) == 2
            assert "root:" not in result_of(client, turn_id, mark)["result"]


async def test_a_shell_session_grant_does_not_cover_a_workdir_outside(
    memory_server: ServerUnderTest, outside: Path
) -> None:
    with anyio.fail_after(15):
        async with memory_server.connect() as client:
            approver = Approver(client, "acceptForSession")
            thread_id = await new_thread(client)
            await run_turn(client, thread_id, "!echo inside")
            scopes = approver.requests[0]["params"]["sessionScopes"]
            assert [(s["scope"], s["scopeKey"].startswith("shell:cmd-")) for s in scopes] == [
                ("exact", True),
                ("wider", False),
            ]
            assert scopes[1]["scopeKey"] == "shell:*"
            await run_turn(client, thread_id, "!echo inside")
            assert len(approver.requests) == 1

            approver.decision = "decline"
            script = tool("shell", command="rm secret.txt", workdir=str(outside))
            mark = client.mark()
            turn_id, _ = await run_turn(client, thread_id, script)
            assert len(approver.requests) == 2
            params = approver.requests[1]["params"]
            assert params["scopeKey"].startswith("shell:cmd-")  # the exact key names the place
            assert params["scopeKey"].endswith(f":{outside.resolve()}")
            assert params["sessionScopes"][1]["scopeKey"] == f"shell:*:{outside.resolve()}"
            assert result_of(client, turn_id, mark)["success"] is False
            assert (outside / "secret.txt").exists()


async def test_auto_approve_still_asks_at_the_workspace_boundary(
    memory_server: ServerUnderTest, workspace: Path, outside: Path
) -> None:
    target = outside / "auto.txt"
    with anyio.fail_after(15):
        async with memory_server.connect() as client:
            approver = Approver(client, "decline")
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            await run_turn(client, thread_id, tool("write_file", path="in.txt", content="x"))
            assert approver.requests == [] and (workspace / "in.txt").exists()

            mark = client.mark()
            turn_id, terminal = await run_turn(
                client, thread_id, tool("write_file", path=str(target), content="x")
            )
            assert terminal["method"] == "turn/completed"
            assert len(approver.requests) == 1
            assert approver.requests[0]["params"]["target"] == str(target)
            assert result_of(client, turn_id, mark)["success"] is False
            assert not target.exists()

            mark = client.mark()
            secret = str(outside / "secret.txt")
            turn_id, _ = await run_turn(client, thread_id, tool("read_file", path=secret))
            assert len(approver.requests) == 2
            assert "top secret" not in result_of(client, turn_id, mark)["result"]


async def test_auto_approve_outside_is_refused_when_nobody_can_answer(
    memory_server: ServerUnderTest, outside: Path
) -> None:
    target = outside / "unattended.txt"
    with anyio.fail_after(15):
        async with memory_server.connect(capabilities={"approvalSupport": False}) as client:
            thread_id = await new_thread(client, approvalPolicy="autoApprove")
            mark = client.mark()
            turn_id, terminal = await run_turn(
                client, thread_id, tool("write_file", path=str(target), content="x")
            )
            assert terminal["method"] == "turn/completed"
            errors = [i["payload"] for i in items_completed(client, turn_id, "error", mark)]
            assert [e["code"] for e in errors] == ["approval_unavailable"]
            assert not target.exists()


async def test_auto_approve_with_the_boundary_turned_off_refuses_outside(
    memory_server: ServerUnderTest, outside: Path
) -> None:
    target = outside / "off.txt"
    with anyio.fail_after(15):
        async with memory_server.connect() as client:
            approver = Approver(client, "accept")
            thread_id = await new_thread(
                client, approvalPolicy="autoApprove", requireApprovalOutsideWorkspace=False
            )
            await run_turn(client, thread_id, tool("write_file", path=str(target), content="x"))
            assert approver.requests == []
            assert not target.exists()
