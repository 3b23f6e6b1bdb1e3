"""The model's own tools stay in their thread and within the stored bounds (issue 24).

* ``cron``: a thread's model lists only its own jobs and cannot remove another
  thread's (``not_found``, as an unknown id), as the terminal tools reach only
  their own thread's terminals.
* ``CreatePlan``/``UpdateTodos``: a plan is bounded like every stored string; a
  call that would pass the bound fails with a tool error and stores nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from appserver.protocol.limits import MAX_PLAN_BYTES
from tests.support.client import RpcClient
from tests.support.cron_servers import clocked_server, list_jobs
from tests.support.servers import running_server
from tests.support.turns import new_thread, one_item, run_turn


def _tool(name: str, **arguments: Any) -> str:
    return f"?tool {name} {json.dumps(arguments)}"


async def _result(client: RpcClient, thread_id: str, text: str) -> dict[str, Any]:
    """Run a turn making one tool call; its toolResult payload."""
    mark = client.mark()
    turn_id, terminal = await run_turn(client, thread_id, text)
    assert terminal["method"] == "turn/completed", terminal
    return dict(one_item(client, turn_id, "toolResult", mark)["payload"])


async def _cron(client: RpcClient, thread_id: str, **arguments: Any) -> dict[str, Any]:
    result = await _result(client, thread_id, _tool("cron", **arguments))
    assert result["success"] is True, result
    answer: dict[str, Any] = json.loads(result["result"])
    return answer


# --- cron -----------------------------------------------------------------------------


async def test_the_cron_tool_reaches_only_its_own_threads_jobs(workspace: Path) -> None:
    with anyio.fail_after(20):
        async with clocked_server(workspace) as (sut, _clock), sut.connect() as client:
            mine = await new_thread(client)
            theirs = await new_thread(client)
            kept = await _cron(client, theirs, action="add", everySeconds=3600, message="theirs")
            own = await _cron(client, mine, action="add", everySeconds=3600, message="mine")
            # A job a client made for no thread (a dedicated one) is no thread's model's either.
            await client.request(
                "cron/add",
                {"name": "c", "message": "m", "schedule": {"kind": "every", "everyMs": 3_600_000}},
            )

            listed = await _cron(client, mine, action="list")
            assert listed["count"] == 1
            assert [job["id"] for job in listed["jobs"]] == [own["id"]]

            refused = await _cron(client, mine, action="remove", jobId=kept["id"])
            assert refused == {"status": "not_found", "jobId": kept["id"]}
            assert kept["id"] in {job["id"] for job in await list_jobs(client)}

            # Its own thread's model still manages it.
            listed = await _cron(client, theirs, action="list")
            assert [job["id"] for job in listed["jobs"]] == [kept["id"]]
            removed = await _cron(client, theirs, action="remove", jobId=kept["id"])
            assert removed == {"status": "removed", "jobId": kept["id"]}
            assert len(await list_jobs(client)) == 2


# --- plans ----------------------------------------------------------------------------


async def _stored_plan(client: RpcClient, thread_id: str) -> dict[str, Any] | None:
    result = await client.request("thread/read", {"threadId": thread_id})
    plan = result.get("plan")
    return dict(plan) if plan is not None else None


def _plan_updates(client: RpcClient, mark: int) -> list[dict[str, Any]]:
    return [m for m in client.since(mark) if m.get("method") == "plan/updated"]


async def test_a_plan_past_its_bound_is_refused_and_nothing_is_stored(workspace: Path) -> None:
    half = "x" * (MAX_PLAN_BYTES // 2)
    with anyio.fail_after(30):
        async with running_server("memory", workspace) as sut, sut.connect() as client:
            thread_id = await new_thread(client)
            todos = [{"content": "step"}]

            # One call too large: a tool error, nothing stored or announced.
            mark = client.mark()
            too_large = _tool(
                "CreatePlan", title="T", overview=half, content=half + "y", todos=todos
            )
            result = await _result(client, thread_id, too_large)
            assert result["success"] is False
            assert f"at most {MAX_PLAN_BYTES:,} bytes" in result["result"]
            assert "Nothing was stored" in result["result"]
            assert _plan_updates(client, mark) == []
            assert await _stored_plan(client, thread_id) is None

            # A plan that fits, then updates that would make it too large.
            fits = _tool("CreatePlan", title="T", overview=half, todos=todos)
            assert (await _result(client, thread_id, fits))["success"] is True
            before = await _stored_plan(client, thread_id)
            mark = client.mark()
            grow = _tool("UpdateTodos", todos=[{"id": "2", "content": half}])
            result = await _result(client, thread_id, grow)
            assert result["success"] is False and "Nothing was stored" in result["result"]
            assert _plan_updates(client, mark) == []
            assert await _stored_plan(client, thread_id) == before

            # Labels are labels.
            long_title = _tool("CreatePlan", title="t" * 1001, overview="o", todos=todos)
            result = await _result(client, thread_id, long_title)
            assert result["success"] is False and "title must be at most" in result["result"]
            assert await _stored_plan(client, thread_id) == before
