"""The thread family end to end (reference §3.1, §3.2, §4, §8; DotCraft's
AppServerThreadLifecycleTests), over every transport."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from appserver.protocol import errors as rpc_errors
from appserver.protocol.ids import now_iso
from appserver.storage.records import ItemRecord, ThreadRecord, TurnRecord
from tests.conftest import BOTH_STORES
from tests.support.client import RpcClient
from tests.support.helpers import (
    IDENTITY,
    THREAD_ID,
    identity,
    index_of,
    list_ids,
    response_index,
    start_thread,
    without_seq,
)
from tests.support.servers import ServerUnderTest

STORES = BOTH_STORES  # thread, turn and approval tests run on SQLite and on PostgreSQL

UNKNOWN = "thread_19700101_zzzzzz"


def status_changes(client: RpcClient, mark: int) -> list[tuple[str, str, str]]:
    return [
        (p["params"]["threadId"], p["params"]["previousStatus"], p["params"]["newStatus"])
        for p in client.since(mark, "thread/statusChanged")
    ]


async def status_of(client: RpcClient, thread_id: str) -> str:
    status: str = (await client.request("thread/read", {"threadId": thread_id}))["thread"]["status"]
    return status


# --- thread/start --------------------------------------------------------------


async def test_start_returns_an_active_thread(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread = await start_thread(client, displayName="  First  ")
        assert THREAD_ID.match(thread["id"]), thread["id"]
        assert thread["status"] == "active"
        assert thread["workspacePath"] == str(server.workspace.resolve())
        assert thread["userId"] == "local"
        assert thread["originChannel"] == "cli"
        assert "channelContext" not in thread
        assert thread["displayName"] == "First"
        assert thread["historyMode"] == "server"
        assert thread["turns"] == []
        assert thread["createdAt"] == thread["lastActiveAt"]
        assert thread["createdAt"].endswith("Z") and "T" in thread["createdAt"]
        assert thread["runtime"]["running"] is False
        read = (await client.request("thread/read", {"threadId": thread["id"]}))["thread"]
        assert read == thread


async def test_start_normalises_the_workspace_path(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        host = str(server.workspace.resolve())
        for given in (None, "", "   "):
            ident = identity() if given is None else identity(workspacePath=given)
            thread = await start_thread(client, identity=ident)
            assert thread["workspacePath"] == host
        elsewhere = os.path.join(os.sep, "srv", "proj", "..", "other")
        thread = await start_thread(client, identity=identity(workspacePath=elsewhere))
        assert thread["workspacePath"] == os.path.join(os.sep, "srv", "other")


async def test_start_persists_history_mode_and_config(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        config = {"mode": "plan", "model": "m-1", "approvalPolicy": "autoApprove", "futureKey": 3}
        thread = await start_thread(client, historyMode="client", config=config)
        assert thread["historyMode"] == "client"
        read = (await client.request("thread/read", {"threadId": thread["id"]}))["thread"]
        assert read["historyMode"] == "client"
        assert read["configuration"] == config


async def test_start_rejects_bad_params(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        for params in [
            {"identity": IDENTITY, "historyMode": "both"},
            {"identity": IDENTITY, "config": {"approvalPolicy": "sometimes"}},
            {"identity": {"channelName": "cli"}},
            {
                "identity": IDENTITY,
                "dynamicTools": [
                    {"name": "t", "description": "d", "inputSchema": {}},
                    {"name": "t", "description": "d", "inputSchema": {}},
                ],
            },
            {
                "identity": IDENTITY,
                "dynamicTools": [
                    {"namespace": "", "name": "t", "description": "d", "inputSchema": {}}
                ],
            },
        ]:
            assert (await client.fail("thread/start", params)).code == rpc_errors.INVALID_PARAMS
        assert await list_ids(client) == []


async def test_started_notification_follows_the_response(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        mark = client.mark()
        thread = await start_thread(client)
        started = await client.notification("thread/started", start=mark)
        assert started["thread"] == thread
        first_request_id = client.messages[mark]["id"]
        note = index_of(client, lambda m: m.get("method") == "thread/started")
        assert response_index(client, first_request_id) < note
        await client.settle()
        assert len(client.since(mark, "thread/started")) == 1


# --- thread/list ------------------------------------------------------------------


def assert_newest_first(summaries: list[dict[str, Any]]) -> None:
    keys = [(s["lastActiveAt"], s["id"]) for s in summaries]
    assert keys == sorted(keys, reverse=True)


async def test_list_is_newest_activity_first(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        ids = [(await start_thread(client))["id"] for _ in range(4)]
        listed = (await client.request("thread/list", {"identity": IDENTITY}))["data"]
        assert {s["id"] for s in listed} == set(ids)
        assert_newest_first(listed)
        assert all(s["turnCount"] == 0 and s["status"] == "active" for s in listed)
        # Resuming the oldest makes its activity the newest.
        await client.request("thread/resume", {"threadId": ids[0]})
        listed = (await client.request("thread/list", {"identity": IDENTITY}))["data"]
        assert_newest_first(listed)
        newest = max(s["lastActiveAt"] for s in listed)
        assert next(s for s in listed if s["id"] == ids[0])["lastActiveAt"] == newest


async def test_list_order_with_known_timestamps(multi_server: ServerUnderTest) -> None:
    assert multi_server.app is not None
    repo = multi_server.app.threads.repo
    workspace = str(multi_server.workspace.resolve())
    stamps = {
        "thread_20240101_aaaaaa": "2024-01-01T00:00:00.000Z",
        "thread_20240101_bbbbbb": "2024-03-01T00:00:00.000Z",
        "thread_20240101_cccccc": "2024-02-01T00:00:00.000Z",
        "thread_20240101_dddddd": "2024-03-01T00:00:00.000Z",
    }
    for thread_id, stamp in stamps.items():
        await repo.create(
            ThreadRecord(
                id=thread_id,
                workspace_path=workspace,
                user_id="local",
                origin_channel="cli",
                status="active",
                created_at=stamp,
                last_active_at=stamp,
            )
        )
    async with multi_server.connect() as client:
        assert await list_ids(client) == [
            "thread_20240101_dddddd",
            "thread_20240101_bbbbbb",
            "thread_20240101_cccccc",
            "thread_20240101_aaaaaa",
        ]
        page = await client.request("thread/list", {"identity": IDENTITY, "limit": 1})
        assert [s["id"] for s in page["data"]] == ["thread_20240101_dddddd"]
        page = await client.request(
            "thread/list", {"identity": IDENTITY, "limit": 2, "cursor": page["nextCursor"]}
        )
        assert [s["id"] for s in page["data"]] == [
            "thread_20240101_bbbbbb",
            "thread_20240101_cccccc",
        ]


async def test_list_include_archived(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        kept = await start_thread(client)
        archived = await start_thread(client)
        await client.request("thread/archive", {"threadId": archived["id"]})
        assert await list_ids(client) == [kept["id"]]
        assert await list_ids(client, includeArchived=False) == [kept["id"]]
        everything = (
            await client.request("thread/list", {"identity": IDENTITY, "includeArchived": True})
        )["data"]
        statuses = {s["id"]: s["status"] for s in everything}
        assert statuses == {kept["id"]: "active", archived["id"]: "archived"}


async def test_list_channel_name_filter_is_case_insensitive(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        cli = await start_thread(client)
        desktop = await start_thread(client, identity=identity(channelName="Desktop"))
        assert set(await list_ids(client)) == {cli["id"], desktop["id"]}
        assert await list_ids(client, channelName="DESKTOP") == [desktop["id"]]
        assert await list_ids(client, channelName="desktop") == [desktop["id"]]
        assert await list_ids(client, channelName="CLI") == [cli["id"]]
        assert await list_ids(client, channelName="telegram") == []


async def test_list_search_term_matches_name_or_id(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        fix = await start_thread(client, displayName="Fix the Login bug")
        notes = await start_thread(client, displayName="Release notes 100%")
        other = await start_thread(client, displayName="other_thing")
        assert await list_ids(client, searchTerm="login") == [fix["id"]]
        assert await list_ids(client, searchTerm="LOGIN BUG") == [fix["id"]]
        assert await list_ids(client, searchTerm=notes["id"][-6:]) == [notes["id"]]
        # % and _ are literal, not wildcards.
        assert await list_ids(client, searchTerm="100%") == [notes["id"]]
        assert await list_ids(client, searchTerm="r_t") == [other["id"]]
        assert await list_ids(client, searchTerm="%") == [notes["id"]]
        assert await list_ids(client, searchTerm="nothing like it") == []
        assert len(await list_ids(client, searchTerm="")) == 3
        page = await client.request(
            "thread/list", {"identity": IDENTITY, "searchTerm": "e", "limit": 1}
        )
        assert len(page["data"]) == 1 and page["nextCursor"]


async def test_list_owner_predicate(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        mine = await start_thread(client)
        other_user = await start_thread(client, identity=identity(userId="someone-else"))
        ctx = "workspace:/a"
        with_ctx = await start_thread(client, identity=identity(channelContext=ctx))
        # channelContext null matches only null; a value matches only itself.
        assert await list_ids(client) == [mine["id"]]
        assert await list_ids(client, identity=identity(channelContext=ctx)) == [with_ctx["id"]]
        assert await list_ids(client, identity=identity(channelContext="workspace:/b")) == []
        assert await list_ids(client, identity=identity(userId="someone-else")) == [
            other_user["id"]
        ]
        # identity.channelName is not a filter.
        assert await list_ids(client, identity=identity(channelName="other")) == [mine["id"]]


async def test_list_cross_channel_origins(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        mine = await start_thread(client)
        telegram = await start_thread(
            client, identity=identity(channelName="telegram", channelContext="chat:42")
        )
        feishu = await start_thread(
            client, identity=identity(channelName="feishu", channelContext="chat:7")
        )
        assert await list_ids(client) == [mine["id"]]
        found = await list_ids(client, crossChannelOrigins=["telegram"])
        assert set(found) == {mine["id"], telegram["id"]}
        found = await list_ids(client, crossChannelOrigins=["telegram", "feishu"])
        assert set(found) == {mine["id"], telegram["id"], feishu["id"]}
        assert await list_ids(client, crossChannelOrigins=[]) == [mine["id"]]
        assert await list_ids(client, crossChannelOrigins=None) == [mine["id"]]


async def test_list_workspace_scoping(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        here = await start_thread(client)
        there = await start_thread(client, identity=identity(workspacePath="/srv/Project"))
        assert await list_ids(client) == [here["id"]]
        assert await list_ids(client, identity=identity(workspacePath="/srv/Project")) == [
            there["id"]
        ]
        # Workspace paths match case-insensitively, as in DotCraft.
        assert await list_ids(client, identity=identity(workspacePath="/SRV/project")) == [
            there["id"]
        ]


async def test_list_paging_returns_every_thread_once(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        created = {(await start_thread(client))["id"] for _ in range(7)}
        seen: list[str] = []
        pages = 0
        cursor = None
        while True:
            params: dict[str, Any] = {"identity": IDENTITY, "limit": 3}
            if cursor is not None:
                params["cursor"] = cursor
            page = await client.request("thread/list", params)
            pages += 1
            assert len(page["data"]) <= 3
            seen.extend(s["id"] for s in page["data"])
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert pages == 3
        assert len(seen) == len(set(seen)) == 7
        assert set(seen) == created
        # Without a limit everything comes back at once, with no cursor.
        everything = await client.request("thread/list", {"identity": IDENTITY})
        assert "nextCursor" not in everything
        assert [s["id"] for s in everything["data"]] == seen
        # A page size equal to the count needs no second page.
        exact = await client.request("thread/list", {"identity": IDENTITY, "limit": 7})
        assert "nextCursor" not in exact and len(exact["data"]) == 7


async def test_list_rejects_bad_cursors_and_limits(server: ServerUnderTest) -> None:
    def cursor(value: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    async with server.connect() as client:
        await start_thread(client)
        for bad in [
            "!!!",
            "not-a-cursor",
            cursor({"a": 1}),
            cursor([1]),
            cursor([[], {}]),
            cursor(["2024", None]),
            "",
        ]:
            if bad == "":
                continue  # an empty cursor means "first page"
            failure = await client.fail(
                "thread/list", {"identity": IDENTITY, "limit": 1, "cursor": bad}
            )
            assert failure.code == rpc_errors.INVALID_PARAMS, bad
            assert "cursor" in failure.data["detail"]
        for limit in (0, -1, 1001, 2.5, "many"):
            failure = await client.fail("thread/list", {"identity": IDENTITY, "limit": limit})
            assert failure.code == rpc_errors.INVALID_PARAMS, limit


# --- thread/read ---------------------------------------------------------------------


async def test_read(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread = await start_thread(client)
        await client.request("thread/pause", {"threadId": thread["id"]})
        for params in ({}, {"includeTurns": False}, {"includeTurns": True}):
            read = await client.request("thread/read", {"threadId": thread["id"], **params})
            assert read["thread"]["turns"] == []
            # Read-only: status and activity time are untouched.
            assert read["thread"]["status"] == "paused"
            assert read["thread"]["lastActiveAt"] == thread["lastActiveAt"]
        failure = await client.fail("thread/read", {"threadId": UNKNOWN})
        assert (failure.code, failure.message) == (
            rpc_errors.THREAD_NOT_FOUND,
            f"Thread not found: {UNKNOWN}",
        )


async def test_pipelined_write_then_read_sees_the_write(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread = await start_thread(client)
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": "w",
                "method": "thread/rename",
                "params": {"threadId": thread["id"], "displayName": "Renamed"},
            }
        )
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": "r",
                "method": "thread/read",
                "params": {"threadId": thread["id"]},
            }
        )
        read = await client.response("r")
        assert read["result"]["thread"]["displayName"] == "Renamed"


# --- thread/resume ---------------------------------------------------------------------


async def test_resume_emits_resumed_with_client_name(server: ServerUnderTest) -> None:
    async with server.connect("resumer") as client:
        thread = await start_thread(client)
        await client.settle()
        mark = client.mark()
        result = await client.request("thread/resume", {"threadId": thread["id"]})
        assert result["thread"]["id"] == thread["id"]
        assert result["thread"]["status"] == "active"
        assert result["thread"]["turns"] == []
        resumed = await client.notification("thread/resumed", start=mark)
        assert resumed["resumedBy"] == "resumer"
        assert resumed["thread"]["id"] == thread["id"]
        assert response_index(client, client.messages[mark]["id"]) < index_of(
            client, lambda m: m.get("method") == "thread/resumed"
        )
        await client.settle()
        # Already active: no status change.
        assert status_changes(client, mark) == []
        assert len(client.since(mark, "thread/resumed")) == 1


async def test_resume_reactivates_a_paused_thread(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread = await start_thread(client)
        await client.request("thread/pause", {"threadId": thread["id"]})
        await client.settle()
        mark = client.mark()
        result = await client.request("thread/resume", {"threadId": thread["id"]})
        assert result["thread"]["status"] == "active"
        await client.notification("thread/resumed", start=mark)
        await client.settle()
        assert status_changes(client, mark) == [(thread["id"], "paused", "active")]
        assert await status_of(client, thread["id"]) == "active"


async def test_resume_refuses_archived_and_unknown(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread = await start_thread(client)
        await client.request("thread/archive", {"threadId": thread["id"]})
        failure = await client.fail("thread/resume", {"threadId": thread["id"]})
        assert failure.code == rpc_errors.THREAD_NOT_ACTIVE
        assert failure.message == f"Thread is not active: {thread['id']}"
        assert await status_of(client, thread["id"]) == "archived"
        failure = await client.fail("thread/resume", {"threadId": UNKNOWN})
        assert failure.code == rpc_errors.THREAD_NOT_FOUND


# --- pause / archive / unarchive --------------------------------------------------------


async def test_status_transitions_notify_after_the_response(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        thread = await start_thread(client)
        tid = thread["id"]
        await client.settle()
        steps = [
            ("thread/pause", ("active", "paused")),
            ("thread/archive", ("paused", "archived")),
            ("thread/unarchive", ("archived", "active")),
            ("thread/archive", ("active", "archived")),
        ]
        for method, (previous, new) in steps:
            mark = client.mark()
            assert await client.request(method, {"threadId": tid}) == {}
            changed = await client.notification("thread/statusChanged", start=mark)
            assert without_seq(changed) == {
                "threadId": tid,
                "previousStatus": previous,
                "newStatus": new,
            }
            assert "result" in client.messages[mark]  # the response came first
            await client.settle()
            assert len(status_changes(client, mark)) == 1
            assert await status_of(client, tid) == new


async def test_rename_notifies_after_the_response(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        tid = (await start_thread(client))["id"]
        await client.settle()
        mark = client.mark()
        params = {"threadId": tid, "displayName": "Renamed"}
        assert await client.request("thread/rename", params) == {}
        renamed = await client.notification("thread/renamed", start=mark)
        assert without_seq(renamed) == params
        assert "result" in client.messages[mark]  # the response came first


async def test_repeated_status_changes_only_answer(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        tid = (await start_thread(client))["id"]
        await client.settle()
        mark = client.mark()
        assert await client.request("thread/unarchive", {"threadId": tid}) == {}
        await client.quiet_after(mark)
        await client.request("thread/pause", {"threadId": tid})
        await client.settle()
        mark = client.mark()
        assert await client.request("thread/pause", {"threadId": tid}) == {}
        await client.quiet_after(mark)
        await client.request("thread/archive", {"threadId": tid})
        await client.settle()
        mark = client.mark()
        assert await client.request("thread/archive", {"threadId": tid}) == {}
        await client.quiet_after(mark)
        # Pausing an archived thread is refused.
        failure = await client.fail("thread/pause", {"threadId": tid})
        assert failure.code == rpc_errors.THREAD_NOT_ACTIVE


async def test_subscribed_caller_gets_exactly_one_notification(server: ServerUnderTest) -> None:
    async with server.connect("sub") as client:
        tid = (await start_thread(client))["id"]
        assert await client.request("thread/subscribe", {"threadId": tid}) == {}
        mark = client.mark()
        for method in ("thread/pause", "thread/archive", "thread/unarchive"):
            await client.request(method, {"threadId": tid})
        await client.request("thread/resume", {"threadId": tid})
        await client.request("thread/rename", {"threadId": tid, "displayName": "n"})
        await client.settle()
        assert status_changes(client, mark) == [
            (tid, "active", "paused"),
            (tid, "paused", "archived"),
            (tid, "archived", "active"),
        ]
        assert len(client.since(mark, "thread/resumed")) == 1
        assert len(client.since(mark, "thread/renamed")) == 1


async def test_status_changes_reach_other_connections(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect("a") as a, multi_server.connect("b") as b:
        tid = (await start_thread(a))["id"]
        mark = b.mark()
        await a.request("thread/pause", {"threadId": tid})
        changed = await b.notification("thread/statusChanged", start=mark)
        assert (changed["previousStatus"], changed["newStatus"]) == ("active", "paused")
        # A repeat is answered but announced to no one.
        await a.request("thread/pause", {"threadId": tid})
        await a.settle()
        await b.settle()
        assert len(status_changes(b, mark)) == 1


# --- rename / mode / config ---------------------------------------------------------------


async def test_rename(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        tid = (await start_thread(client))["id"]
        for bad in ("", "   "):
            failure = await client.fail("thread/rename", {"threadId": tid, "displayName": bad})
            assert failure.code == rpc_errors.INVALID_PARAMS
            assert "displayName" in failure.data["detail"]
        failure = await client.fail("thread/rename", {"threadId": tid})
        assert failure.data == {"detail": "'displayName' is required."}
        failure = await client.fail("thread/rename", {"threadId": UNKNOWN, "displayName": "x"})
        assert failure.code == rpc_errors.THREAD_NOT_FOUND
        mark = client.mark()
        assert (
            await client.request(
                "thread/rename", {"threadId": tid, "displayName": "  Refactor plan "}
            )
            == {}
        )
        renamed = await client.notification("thread/renamed", start=mark)
        assert without_seq(renamed) == {"threadId": tid, "displayName": "Refactor plan"}
        read = await client.request("thread/read", {"threadId": tid})
        assert read["thread"]["displayName"] == "Refactor plan"
        listed = await client.request("thread/list", {"identity": IDENTITY})
        assert listed["data"][0]["displayName"] == "Refactor plan"


async def test_rename_reaches_everyone_once(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect("a") as a, multi_server.connect("b") as b:
        tid = (await start_thread(a))["id"]
        await b.request("thread/subscribe", {"threadId": tid})
        marks = a.mark(), b.mark()
        await a.request("thread/rename", {"threadId": tid, "displayName": "Shared"})
        await a.settle()
        await b.settle()
        for client, mark in zip((a, b), marks, strict=True):
            notes = client.since(mark, "thread/renamed")
            assert [without_seq(n["params"]) for n in notes] == [
                {"threadId": tid, "displayName": "Shared"}
            ]


async def test_mode_and_config_persist(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        tid = (await start_thread(client))["id"]
        assert await client.request("thread/mode/set", {"threadId": tid, "mode": "plan"}) == {}
        read = await client.request("thread/read", {"threadId": tid})
        assert read["thread"]["configuration"] == {"mode": "plan"}
        config = {
            "model": "model-x",
            "approvalPolicy": "interrupt",
            "agentInstructions": "Be brief.",
            "mcpServers": [{"name": "fs", "command": "mcp-fs"}],
            "someFutureOption": {"nested": [1, 2]},
        }
        assert (
            await client.request("thread/config/update", {"threadId": tid, "config": config}) == {}
        )
        read = await client.request("thread/read", {"threadId": tid})
        # The mode belongs to thread/mode/set and survives a config update.
        assert read["thread"]["configuration"] == {**config, "mode": "plan"}
        await client.request("thread/config/update", {"threadId": tid, "config": {"mode": "agent"}})
        read = await client.request("thread/read", {"threadId": tid})
        assert read["thread"]["configuration"] == {"mode": "agent"}

        failure = await client.fail("thread/mode/set", {"threadId": tid, "mode": " "})
        assert failure.code == rpc_errors.INVALID_PARAMS
        failure = await client.fail(
            "thread/config/update", {"threadId": tid, "config": {"approvalPolicy": "never"}}
        )
        assert failure.code == rpc_errors.INVALID_PARAMS
        failure = await client.fail("thread/config/update", {"threadId": tid})
        assert failure.data == {"detail": "'config' is required."}
        for method, params in [
            ("thread/mode/set", {"threadId": UNKNOWN, "mode": "plan"}),
            ("thread/config/update", {"threadId": UNKNOWN, "config": {}}),
        ]:
            assert (await client.fail(method, params)).code == rpc_errors.THREAD_NOT_FOUND


# --- rollback -------------------------------------------------------------------------------


async def test_rollback_validation(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        tid = (await start_thread(client))["id"]
        for num in (0, -1):
            failure = await client.fail("thread/rollback", {"threadId": tid, "numTurns": num})
            assert failure.code == rpc_errors.INVALID_PARAMS
            assert "numTurns" in failure.data["detail"]
        failure = await client.fail("thread/rollback", {"threadId": tid, "numTurns": 1})
        assert failure.code == rpc_errors.INVALID_PARAMS
        failure = await client.fail("thread/rollback", {"threadId": UNKNOWN, "numTurns": 1})
        assert failure.code == rpc_errors.THREAD_NOT_FOUND
        await client.request("thread/archive", {"threadId": tid})
        failure = await client.fail("thread/rollback", {"threadId": tid, "numTurns": 1})
        assert failure.code == rpc_errors.THREAD_NOT_ACTIVE


async def add_history(sut: ServerUnderTest, thread_id: str, turns: int) -> None:
    """Store ``turns`` completed turns of two items each, straight into the repository."""
    assert sut.app is not None
    repo = sut.app.threads.repo
    item_seq = 0
    for n in range(1, turns + 1):
        stamp = now_iso()
        turn = TurnRecord(
            thread_id=thread_id,
            id=f"turn_{n:03d}",
            seq=n,
            status="completed",
            started_at=stamp,
            completed_at=stamp,
            token_usage={"inputTokens": n, "outputTokens": 1, "totalTokens": n + 1},
            origin_channel="cli",
        )
        await repo.add_turn(turn, stamp)
        for kind, payload in (
            ("userMessage", {"text": f"q{n}"}),
            ("agentMessage", {"text": f"a{n}"}),
        ):
            item_seq += 1
            await repo.save_item(
                ItemRecord(
                    thread_id=thread_id,
                    turn_id=turn.id,
                    id=f"item_{item_seq:03d}",
                    seq=item_seq,
                    type=kind,
                    status="completed",
                    created_at=stamp,
                    completed_at=stamp,
                    payload=payload,
                )
            )


async def test_rollback_drops_the_newest_turns(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        tid = (await start_thread(client))["id"]
        await add_history(multi_server, tid, 3)
        full = await client.request("thread/read", {"threadId": tid, "includeTurns": True})
        turns = full["thread"]["turns"]
        assert [t["id"] for t in turns] == ["turn_001", "turn_002", "turn_003"]
        assert [i["payload"]["text"] for i in turns[2]["items"]] == ["q3", "a3"]
        assert turns[0]["tokenUsage"] == {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}

        failure = await client.fail("thread/rollback", {"threadId": tid, "numTurns": 4})
        assert failure.code == rpc_errors.INVALID_PARAMS
        rolled = await client.request("thread/rollback", {"threadId": tid, "numTurns": 1})
        assert rolled["thread"]["turns"] == turns[:2]
        read = await client.request("thread/read", {"threadId": tid, "includeTurns": True})
        assert read["thread"]["turns"] == rolled["thread"]["turns"]
        summary = (await client.request("thread/list", {"identity": IDENTITY}))["data"][0]
        assert summary["turnCount"] == 2

        rolled = await client.request("thread/rollback", {"threadId": tid, "numTurns": 2})
        assert rolled["thread"]["turns"] == []
        summary = (await client.request("thread/list", {"identity": IDENTITY}))["data"][0]
        assert summary["turnCount"] == 0


async def test_read_and_resume_page_turns(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect() as client:
        tid = (await start_thread(client))["id"]
        await add_history(multi_server, tid, 5)
        page = await client.request(
            "thread/read", {"threadId": tid, "includeTurns": True, "turnLimit": 2}
        )
        assert [t["id"] for t in page["thread"]["turns"]] == ["turn_004", "turn_005"]
        page = await client.request(
            "thread/read",
            {
                "threadId": tid,
                "includeTurns": True,
                "turnLimit": 2,
                "turnsCursor": page["nextTurnsCursor"],
            },
        )
        assert [t["id"] for t in page["thread"]["turns"]] == ["turn_002", "turn_003"]
        resumed = await client.request("thread/resume", {"threadId": tid})
        assert len(resumed["thread"]["turns"]) == 5
        failure = await client.fail(
            "thread/read", {"threadId": tid, "includeTurns": True, "turnsCursor": "%%%"}
        )
        assert failure.code == rpc_errors.INVALID_PARAMS


# --- subscriptions -------------------------------------------------------------------------


async def test_subscribe_is_idempotent_and_checks_the_thread(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        tid = (await start_thread(client))["id"]
        assert await client.request("thread/subscribe", {"threadId": tid}) == {}
        mark = client.mark()
        assert await client.request("thread/subscribe", {"threadId": tid}) == {}
        assert (
            await client.request("thread/subscribe", {"threadId": tid, "replayRecent": True}) == {}
        )
        await client.quiet_after(mark)
        failure = await client.fail("thread/subscribe", {"threadId": UNKNOWN})
        assert (failure.code, failure.message) == (
            rpc_errors.THREAD_NOT_FOUND,
            f"Thread not found: {UNKNOWN}",
        )
        # Unsubscribing is always fine, even twice or from an unknown thread.
        for thread_id in (tid, tid, UNKNOWN):
            assert await client.request("thread/unsubscribe", {"threadId": thread_id}) == {}


async def test_replay_recent(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        tid = (await start_thread(client))["id"]
        await client.request("thread/rename", {"threadId": tid, "displayName": "R"})
        await client.request("thread/pause", {"threadId": tid})
        await client.settle()
        live = [m for m in client.messages if "method" in m]
        assert [m["method"] for m in live] == [
            "thread/started",
            "thread/renamed",
            "thread/statusChanged",
        ]
        mark = client.mark()
        assert (
            await client.request("thread/subscribe", {"threadId": tid, "replayRecent": True}) == {}
        )
        await client.settle()
        replayed = [m for m in client.since(mark) if "method" in m]
        assert replayed == live
        assert "result" in client.messages[mark]  # the response precedes the replay


async def test_subscription_delivers_other_connections_events(
    multi_server: ServerUnderTest,
) -> None:
    async with (
        multi_server.connect("owner") as owner,
        multi_server.connect("watcher") as watcher,
        multi_server.connect("bystander") as bystander,
    ):
        tid = (await start_thread(owner))["id"]
        await watcher.request("thread/subscribe", {"threadId": tid})
        marks = watcher.mark(), bystander.mark()
        await owner.request("thread/resume", {"threadId": tid})
        resumed = await watcher.notification("thread/resumed", start=marks[0])
        assert resumed["resumedBy"] == "owner"
        await owner.settle()
        await bystander.settle()
        assert bystander.since(marks[1], "thread/resumed") == []
        # After unsubscribing, thread-only events stop.
        await watcher.request("thread/unsubscribe", {"threadId": tid})
        mark = watcher.mark()
        await owner.request("thread/resume", {"threadId": tid})
        await owner.settle()
        await watcher.settle()
        assert watcher.since(mark, "thread/resumed") == []


# --- delete -----------------------------------------------------------------------------------


async def test_delete(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        doomed = await start_thread(client)
        kept = await start_thread(client)
        await client.request("thread/subscribe", {"threadId": doomed["id"]})
        mark = client.mark()
        assert await client.request("thread/delete", {"threadId": doomed["id"]}) == {}
        await client.quiet_after(mark)  # the deleter gets no thread/deleted
        failure = await client.fail("thread/read", {"threadId": doomed["id"]})
        assert failure.code == rpc_errors.THREAD_NOT_FOUND
        assert await list_ids(client, includeArchived=True) == [kept["id"]]
        failure = await client.fail("thread/delete", {"threadId": doomed["id"]})
        assert failure.code == rpc_errors.THREAD_NOT_FOUND


async def test_delete_notifies_other_connections(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect("a") as a, multi_server.connect("b") as b:
        tid = (await start_thread(a))["id"]
        await a.request("thread/subscribe", {"threadId": tid})
        marks = a.mark(), b.mark()
        await a.request("thread/delete", {"threadId": tid})
        deleted = await b.notification("thread/deleted", start=marks[1])
        assert deleted == {"threadId": tid}
        await a.settle()
        await b.settle()
        assert a.since(marks[0], "thread/deleted") == []
        assert len(b.since(marks[1], "thread/deleted")) == 1
        assert (await b.fail("thread/read", {"threadId": tid})).code == rpc_errors.THREAD_NOT_FOUND


# --- several clients --------------------------------------------------------------------------


async def test_started_reaches_every_client_exactly_once(multi_server: ServerUnderTest) -> None:
    async with multi_server.connect("a") as a, multi_server.connect("b") as b:
        thread = await start_thread(a)
        note = await b.notification("thread/started")
        assert note["thread"] == thread
        await a.settle()
        await b.settle()
        for client in (a, b):
            notes = client.notifications("thread/started")
            assert [n["params"]["thread"]["id"] for n in notes] == [thread["id"]]
        # Both see the same thread in their lists.
        assert await list_ids(a) == await list_ids(b) == [thread["id"]]
