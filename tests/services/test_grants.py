"""``grant/list`` and ``grant/revoke``: approvals remembered for good, shown and taken
back, on SQLite and PostgreSQL, over every transport."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.conftest import BOTH_STORES
from tests.support.client import RpcFailure
from tests.support.servers import ServerUnderTest
from tests.support.turns import Approver, new_thread, run_turn

STORES = BOTH_STORES


async def test_list_and_revoke_a_remembered_grant(server: ServerUnderTest, workspace: Path) -> None:
    with anyio.fail_after(30):
        async with server.connect() as client:
            assert await client.request("grant/list") == {"grants": [], "honoured": True}
            approver = Approver(client, "acceptAlways")
            thread_id = await new_thread(client)
            _, terminal = await run_turn(client, thread_id, "!touch granted.txt")
            assert terminal["method"] == "turn/completed" and len(approver.requests) == 1

            listed = await client.request("grant/list")
            (grant,) = listed["grants"]
            assert grant["kind"] == "shell" and grant["operation"] == "touch granted.txt"
            assert grant["target"] == str(workspace.resolve()) and grant["createdAt"]

            # Remembered: the same command runs unasked, in this thread and another.
            await run_turn(client, thread_id, "!touch granted.txt")
            await run_turn(client, await new_thread(client), "!touch granted.txt")
            assert len(approver.requests) == 1

            named = {key: grant[key] for key in ("kind", "operation", "target")}
            assert await client.request("grant/revoke", named) == {"revoked": True}
            assert await client.request("grant/revoke", named) == {"revoked": False}
            assert (await client.request("grant/list"))["grants"] == []

            # Asked again, in the thread that had it for its session too.
            approver.decision = "decline"
            await run_turn(client, thread_id, "!touch granted.txt")
            assert len(approver.requests) == 2


async def test_revoke_names_one_grant_whole(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        whole = {"kind": "shell", "operation": "make test", "target": "/w"}
        for missing in whole:
            partial = {key: value for key, value in whole.items() if key != missing}
            with pytest.raises(RpcFailure) as refused:
                await client.request("grant/revoke", partial)
            assert refused.value.code == -32602, missing
        with pytest.raises(RpcFailure) as refused:
            await client.request("grant/revoke", {**whole, "kind": 7})
        assert refused.value.code == -32602
        assert await client.request("grant/revoke", whole) == {"revoked": False}


async def test_grant_methods_are_advertised(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        capabilities = (await client.initialize())["capabilities"]
        assert capabilities["approvalGrants"] is True
        assert capabilities["promptRead"] is True
