"""Bounds on what clients send and on what the server answers (protocol/limits.py):
integers past 64 bits and past their domain are -32602, stored strings and
configuration objects have a maximum size, and `thread/list` pages by bytes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from appserver.protocol import errors as rpc_errors
from appserver.protocol.cron import MAX_AT_MS, MAX_DURATION_MS
from appserver.protocol.limits import (
    INT64_MAX,
    INT64_MIN,
    LIST_PAGE_BYTES,
    MAX_LABEL_CHARS,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    MAX_SERVER_CONFIG_BYTES,
    MAX_TEXT_CHARS,
    MAX_THREAD_CONFIG_BYTES,
)
from appserver.protocol.methods import METHODS, SERVER_REQUESTS
from appserver.protocol.schema import build_schema
from appserver.storage.records import ThreadRecord
from tests.support.client import RpcClient
from tests.support.helpers import IDENTITY, identity, start_thread
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import new_thread, run_turn

UNKNOWN_THREAD = "thread_19700101_zzzzzz"
EVERY = {"kind": "every", "everyMs": 60_000}


@pytest.fixture
async def sut(workspace: Path) -> AsyncIterator[ServerUnderTest]:
    async with running_server("memory", workspace) as server:
        yield server


async def invalid_params(client: RpcClient, method: str, params: Any) -> str:
    """Send a request that must be -32602; return its message and detail."""
    failure = await client.fail(method, params)
    assert failure.code == rpc_errors.INVALID_PARAMS, (method, failure.code, failure.message)
    return f"{failure.message} {json.dumps(failure.data)}"


def encoded_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


# --- every integer param is bounded ---------------------------------------------------


def _integers(schema: Any, defs: dict[str, Any], path: str, seen: set[str]) -> list[tuple]:
    """(path, schema) of every integer reachable from ``schema``."""
    found: list[tuple] = []
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            if name not in seen:
                found += _integers(defs[name], defs, f"{path}<{name}>", seen | {name})
        if schema.get("type") == "integer":
            found.append((path, schema))
        for key, value in schema.items():
            if key == "properties":
                for prop, sub in value.items():
                    found += _integers(sub, defs, f"{path}.{prop}", seen)
            elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems"):
                found += _integers(value, defs, path, seen)
    elif isinstance(schema, list):
        for sub in schema:
            found += _integers(sub, defs, path, seen)
    return found


def test_every_integer_param_in_the_method_table_is_within_64_bits() -> None:
    schema = build_schema()
    defs = schema["$defs"]
    inputs = [(f"{m} params", s["params"]) for m, s in schema["x-methods"].items()]
    inputs += [(f"{r} answer", s["result"]) for r, s in schema["x-serverRequests"].items()]
    integers = [hit for label, ref in inputs for hit in _integers(ref, defs, label, set())]
    assert any("afterSeq" in path for path, _ in integers)  # the walk finds nested fields
    assert any("everyMs" in path for path, _ in integers)
    unbounded = [
        path
        for path, node in integers
        if not (
            INT64_MIN <= node.get("minimum", INT64_MIN - 1) <= INT64_MAX
            and INT64_MIN <= node.get("maximum", INT64_MAX + 1) <= INT64_MAX
        )
    ]
    assert unbounded == []
    assert set(METHODS) and set(SERVER_REQUESTS)


async def test_subscribe_after_seq_past_64_bits_is_invalid_params(
    sut: ServerUnderTest,
) -> None:
    async with sut.connect() as watcher, sut.connect() as driver:
        thread_id = await new_thread(driver)
        for after_seq in (2**63, 2**64, 10**30, -1):
            detail = await invalid_params(
                watcher, "thread/subscribe", {"threadId": thread_id, "afterSeq": after_seq}
            )
            assert "afterSeq" in detail, detail
        # The largest allowed value subscribes (nothing to replay; live events follow).
        assert (
            await watcher.request(
                "thread/subscribe", {"threadId": thread_id, "afterSeq": INT64_MAX}
            )
            == {}
        )
        turn_id, _ = await run_turn(driver, thread_id, "hello")
        completed = await watcher.notification(
            "turn/completed", where=lambda p: p["turn"]["id"] == turn_id
        )
        assert completed["turn"]["threadId"] == thread_id


async def test_rollback_num_turns_past_64_bits_is_invalid_params(sut: ServerUnderTest) -> None:
    async with sut.connect() as client:
        thread_id = await new_thread(client)
        for num_turns in (2**63, 2**70, 0, -(2**63)):
            detail = await invalid_params(
                client, "thread/rollback", {"threadId": thread_id, "numTurns": num_turns}
            )
            assert "numTurns" in detail, detail


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"kind": "every", "everyMs": 2**63}, "everyMs"),
        ({"kind": "every", "everyMs": 2**64 + 5}, "everyMs"),
        ({"kind": "every", "everyMs": MAX_DURATION_MS + 1}, "everyMs"),
        ({"kind": "every", "everyMs": -(2**63) - 1}, "everyMs"),
        ({**EVERY, "initialDelayMs": 2**63}, "initialDelayMs"),
        ({**EVERY, "initialDelayMs": MAX_DURATION_MS + 1}, "initialDelayMs"),
        ({**EVERY, "initialDelayMs": -1}, "initialDelayMs"),
        ({"kind": "at", "atMs": 2**63}, "atMs"),
        ({"kind": "at", "atMs": MAX_AT_MS + 1}, "atMs"),
        ({"kind": "at", "atMs": -(2**63)}, "atMs"),
        ({"kind": "daily", "dailyHour": 2**63}, "dailyHour"),
        ({"kind": "daily", "dailyHour": 9, "dailyMinute": -(2**64)}, "dailyMinute"),
    ],
)
async def test_cron_add_out_of_range_integers_are_invalid_params(
    sut: ServerUnderTest, schedule: dict[str, Any], field: str
) -> None:
    async with sut.connect() as client:
        params = {"name": "job", "message": "hello", "schedule": schedule}
        detail = await invalid_params(client, "cron/add", params)
        assert f"schedule.{field}" in detail, detail
        assert (await client.request("cron/list", {"includeDisabled": True}))["jobs"] == []


async def test_cron_add_accepts_the_largest_durations_and_time(sut: ServerUnderTest) -> None:
    async with sut.connect() as client:
        schedules = [
            {"kind": "every", "everyMs": MAX_DURATION_MS, "initialDelayMs": MAX_DURATION_MS},
            {"kind": "at", "atMs": MAX_AT_MS},
        ]
        for schedule in schedules:
            job = (
                await client.request(
                    "cron/add", {"name": "far", "message": "hello", "schedule": schedule}
                )
            )["job"]
            assert job["schedule"] == schedule
        jobs = (await client.request("cron/list", {}))["jobs"]
        assert [job["schedule"] for job in jobs] == schedules
        assert jobs[1]["state"]["nextRunAtMs"] == MAX_AT_MS


# --- stored strings and objects ---------------------------------------------------------

_BIG_CONFIG = {"agentInstructions": "x" * MAX_TEXT_CHARS, "notes": "y" * MAX_THREAD_CONFIG_BYTES}
_BIG_CHANNEL = {"name": "relay", "command": "relay", "args": ["a" * 1000] * 80}
_BIG_SERVER = {"name": "docs", "command": "docs", "args": ["a" * 1000] * 80}

STRING_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("thread/start", {"identity": IDENTITY, "displayName": "n" * 1001}, "displayName"),
    ("thread/start", {"identity": identity(userId="u" * 257)}, "identity.userId"),
    ("thread/start", {"identity": identity(channelName="c" * 257)}, "identity.channelName"),
    ("thread/start", {"identity": identity(channelContext="c" * 1001)}, "identity.channelContext"),
    ("thread/start", {"identity": identity(workspacePath="/" * 8193)}, "identity.workspacePath"),
    ("thread/start", {"identity": IDENTITY, "config": _BIG_CONFIG}, "config"),
    ("thread/rename", {"threadId": UNKNOWN_THREAD, "displayName": "n" * 1001}, "displayName"),
    ("thread/mode/set", {"threadId": UNKNOWN_THREAD, "mode": "m" * 257}, "mode"),
    ("thread/config/update", {"threadId": UNKNOWN_THREAD, "config": _BIG_CONFIG}, "config"),
    ("cron/add", {"name": "n" * 1001, "message": "m", "schedule": EVERY}, "name"),
    ("cron/add", {"name": "n", "message": "m" * 100_001, "schedule": EVERY}, "message"),
    (
        "cron/add",
        {"name": "n", "message": "m", "schedule": {"kind": "cron", "expr": "*" * 1001}},
        "schedule.expr",
    ),
    (
        "cron/add",
        {
            "name": "n",
            "message": "m",
            "schedule": {"kind": "daily", "dailyHour": 1, "tz": "Z" * 257},
        },
        "schedule.tz",
    ),
    ("workspace/config/update", {"model": "m" * 257}, "model"),
    ("workspace/config/update", {"apiKey": "k" * 8193}, "apiKey"),
    ("workspace/config/update", {"endPoint": "https://" + "e" * 8192}, "endPoint"),
    ("skills/setEnabled", {"name": "s" * 257, "enabled": False}, "name"),
    ("plugin/setEnabled", {"id": "p" * 257, "enabled": False}, "id"),
    ("externalChannel/upsert", {"channel": {"name": "c" * 257, "command": "x"}}, "channel"),
    ("externalChannel/upsert", {"channel": _BIG_CHANNEL}, "channel"),
    ("mcp/upsert", {"server": _BIG_SERVER}, "server"),
]


@pytest.mark.parametrize(
    ("method", "params", "field"),
    STRING_CASES,
    ids=[f"{m}:{f}" for m, _, f in STRING_CASES],
)
async def test_stored_strings_and_objects_past_their_limit_are_invalid_params(
    sut: ServerUnderTest, method: str, params: dict[str, Any], field: str
) -> None:
    async with sut.connect() as client:
        detail = await invalid_params(client, method, params)
        assert f"'{field}" in detail, detail
        assert "at most" in detail, detail
        # Nothing was stored.
        threads = (await client.request("thread/list", {"identity": IDENTITY}))["data"]
        assert threads == []


async def test_client_name_past_its_limit_is_invalid_params(sut: ServerUnderTest) -> None:
    async with sut.connect(initialize=False) as client:
        params = {"clientInfo": {"name": "c" * (MAX_NAME_CHARS + 1), "version": "1"}}
        detail = await invalid_params(client, "initialize", params)
        assert "clientInfo.name" in detail, detail


async def test_values_at_their_limit_are_stored(sut: ServerUnderTest) -> None:
    # Limits count characters, not bytes: 1,000 emoji are a valid display name.
    name = "\N{GRINNING FACE}" * MAX_LABEL_CHARS
    async with sut.connect() as client:
        thread = await start_thread(
            client,
            identity=identity(
                userId="u" * MAX_NAME_CHARS,
                channelContext="c" * MAX_LABEL_CHARS,
                workspacePath=str(sut.workspace),
            ),
            displayName=name,
            config={"agentInstructions": "x" * MAX_TEXT_CHARS},
        )
        assert thread["displayName"] == name
        renamed = "r" * MAX_LABEL_CHARS
        await client.request("thread/rename", {"threadId": thread["id"], "displayName": renamed})
        read = (await client.request("thread/read", {"threadId": thread["id"]}))["thread"]
        assert read["displayName"] == renamed
        job = (
            await client.request(
                "cron/add",
                {"name": "n" * MAX_LABEL_CHARS, "message": "m" * MAX_TEXT_CHARS, "schedule": EVERY},
            )
        )["job"]
        assert job["name"] == "n" * MAX_LABEL_CHARS
        channel = {"name": "relay", "command": "relay", "args": ["a" * 1000] * 60}
        assert encoded_bytes(channel) < MAX_SERVER_CONFIG_BYTES
        stored = await client.request("externalChannel/upsert", {"channel": channel})
        assert stored["channel"]["args"] == channel["args"]
        url = "https://" + "e" * (MAX_PATH_CHARS - len("https://"))
        updated = await client.request("workspace/config/update", {"endPoint": url})
        assert updated["endPoint"] == url


# --- thread/list pages by size ------------------------------------------------------------


async def test_thread_list_pages_before_the_answer_passes_its_byte_budget(
    sut: ServerUnderTest,
) -> None:
    # 300 threads with the longest display name in 4-byte characters: about 1.2 MiB of
    # summaries, more than one page may carry (and each is a valid thread/start).
    assert sut.app is not None
    repo = sut.app.threads.repo
    workspace = str(sut.workspace.resolve())
    name = "\N{GRINNING FACE}" * MAX_LABEL_CHARS
    count = 300
    for n in range(count):
        stamp = f"2024-01-01T00:{n // 60:02d}:{n % 60:02d}.000Z"
        await repo.create(
            ThreadRecord(
                id=f"thread_20240101_{n:06d}",
                workspace_path=workspace,
                user_id="local",
                origin_channel="cli",
                status="active",
                created_at=stamp,
                last_active_at=stamp,
                display_name=name,
            )
        )
    expected = [f"thread_20240101_{n:06d}" for n in reversed(range(count))]
    assert count * len(name.encode()) > LIST_PAGE_BYTES
    async with sut.connect() as client:
        for extra in ({}, {"limit": 1000}):
            seen: list[str] = []
            pages = 0
            cursor: str | None = None
            while True:
                params: dict[str, Any] = {"identity": IDENTITY, **extra}
                if cursor is not None:
                    params["cursor"] = cursor
                page = await client.request("thread/list", params)
                assert encoded_bytes(page) <= LIST_PAGE_BYTES
                assert page["data"], page
                seen += [summary["id"] for summary in page["data"]]
                pages += 1
                cursor = page.get("nextCursor")
                if cursor is None:
                    break
            assert pages >= 2
            assert seen == expected  # every thread once, newest first
        # A limit smaller than what fits still applies.
        page = await client.request("thread/list", {"identity": IDENTITY, "limit": 5})
        assert [s["id"] for s in page["data"]] == expected[:5]
        assert page["nextCursor"]


@pytest.mark.parametrize("method", ["thread/read", "thread/resume"])
async def test_thread_turns_page_before_the_answer_passes_its_byte_budget(
    sut: ServerUnderTest, method: str
) -> None:
    """A long thread pages its turns (newest first) instead of making an answer
    larger than a frame, with or without ``turnLimit``."""
    text = "x" * 100_000  # each turn stores it four times: about 400 KB a turn
    async with sut.connect() as client:
        thread_id = await new_thread(client)
        turn_ids = [(await run_turn(client, thread_id, f"{n} {text}"))[0] for n in range(6)]
        assert 6 * 4 * len(text) > LIST_PAGE_BYTES
        for extra in ({}, {"turnLimit": 100}):
            seen: list[str] = []
            pages = 0
            cursor: str | None = None
            while True:
                params: dict[str, Any] = {"threadId": thread_id, **extra}
                if method == "thread/read":
                    params["includeTurns"] = True
                if cursor is not None:
                    params["turnsCursor"] = cursor
                page = await client.request(method, params)
                assert encoded_bytes(page) <= LIST_PAGE_BYTES + 64 * 1024  # the thread itself
                turns = page["thread"]["turns"]
                assert turns
                seen = [turn["id"] for turn in turns] + seen
                pages += 1
                cursor = page.get("nextTurnsCursor")
                if cursor is None:
                    break
            assert pages >= 3
            assert seen == turn_ids  # every turn once, in order


async def test_an_integer_param_takes_no_boolean_nor_fraction(sut: ServerUnderTest) -> None:
    """`true` was read as 1 (`timeoutMs: true` was one millisecond), `2.5` cut to 2."""
    async with sut.connect() as client:
        thread_id = await new_thread(client)
        for value in (True, False, 2.5, "3"):
            detail = await invalid_params(
                client, "thread/subscribe", {"threadId": thread_id, "afterSeq": value}
            )
            assert "afterSeq" in detail, detail
            detail = await invalid_params(
                client, "workspace/commitMessage/suggest", {"paths": [], "timeoutMs": value}
            )
            assert "timeoutMs" in detail, detail
