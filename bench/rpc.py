"""JSON-RPC overhead of appserver against an echo floor, and thread/list and
thread/read over a 10,000-thread database. Prints figures; never asserts.

    .venv/bin/python bench/rpc.py            # ~40 s on 2 cores
    .venv/bin/python bench/rpc.py --quick    # ~10 s, fewer samples

Every server is a real subprocess on loopback with its own temp workspace:
``python -m appserver app-server`` over stdio and over ``--listen
ws://127.0.0.1:0``, and ``bench/_echo.py`` (stdio / plain ``websockets``)
as the floor. The same client code drives all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Client,
    appserver_command,
    echo_command,
    ms,
    stdio_server,
    summarize,
    ws_server,
)

from appserver.storage.db import Database
from appserver.storage.records import ItemRecord, ThreadRecord, TurnRecord
from appserver.storage.threads import INSERT_THREAD, ThreadRepository, thread_row

WINDOW = 30  # outstanding requests when pipelining (the server's gate is 32)
LATENCY_TARGET = 2.0  # appserver latency <= 2x the echo floor
THROUGHPUT_TARGET = 0.5  # appserver throughput >= half the echo floor
BIG_P95_TARGET = 0.020  # thread/list and thread/read p95 under 20 ms


@dataclass(frozen=True)
class Plan:
    warmup: int
    sequential: int
    pipelined: int
    big_threads: int
    big_calls: int
    big_full_calls: int
    rounds: int = 5


FULL = Plan(
    warmup=300,
    sequential=5000,
    pipelined=20000,
    big_threads=10000,
    big_calls=200,
    big_full_calls=100,
)
QUICK = Plan(
    warmup=100, sequential=1000, pipelined=4000, big_threads=10000, big_calls=50, big_full_calls=20
)

IDENTITY = {"channelName": "cli", "userId": "local"}


# --- (a)-(c): round trips and pipelining against the echo floor ---------------------


async def _prepare(client: Client, appserver: bool) -> dict[str, Any]:
    """Handshake and a thread to read (the echo floor ignores params)."""
    if not appserver:
        return {"threadId": "none"}
    await client.initialize()
    started = await client.call("thread/start", {"identity": IDENTITY, "displayName": "b"})
    return {"threadId": started["thread"]["id"]}


async def _pair(plan: Plan, echo: Client, app: Client) -> dict[str, dict[str, Any]]:
    """Sequential latency and pipelined throughput of ``thread/read``, in
    ``plan.rounds`` alternating rounds so drift on a busy box hits both alike.
    Latency samples are pooled; throughput is the median of the rounds."""
    clients = {"echo": echo, "app": app}
    params = {"echo": await _prepare(echo, False), "app": await _prepare(app, True)}
    samples: dict[str, list[float]] = {"echo": [], "app": []}
    rates: dict[str, list[float]] = {"echo": [], "app": []}
    for name, client in clients.items():
        await client.sequential("thread/read", params[name], plan.warmup)
        await client.pipelined("thread/read", params[name], plan.warmup, WINDOW)
    for _ in range(plan.rounds):
        for name, client in clients.items():
            count = plan.sequential // plan.rounds
            samples[name] += await client.sequential("thread/read", params[name], count)
        for name, client in clients.items():
            count = plan.pipelined // plan.rounds
            rates[name].append(await client.pipelined("thread/read", params[name], count, WINDOW))
    return {
        name: {
            "latency": summarize(samples[name]),
            "rps": statistics.median(rates[name]),
            "rps_range": (min(rates[name]), max(rates[name])),
            "errors": clients[name].errors,
        }
        for name in clients
    }


async def bench_stdio(plan: Plan, workspace: Path) -> dict[str, dict[str, Any]]:
    async with (
        stdio_server(echo_command("stdio")) as echo,
        stdio_server(appserver_command(workspace)) as app,
    ):
        return await _pair(plan, echo, app)


async def bench_ws(plan: Plan, workspace: Path) -> dict[str, dict[str, Any]]:
    listen = ("--listen", "ws://127.0.0.1:0")
    async with (
        ws_server(echo_command("ws")) as open_echo,
        ws_server(appserver_command(workspace, *listen)) as open_app,
    ):
        return await _pair(plan, await open_echo(), await open_app())


# --- (d): a 10,000-thread database -------------------------------------------------

USERS = 5
CHANNELS = ("cli", "desktop", "feishu")


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


async def build_big_workspace(workspace: Path, count: int) -> dict[str, Any]:
    """``count`` threads over ``USERS`` identities (4% archived) plus 20 turns
    of 6 items on the newest thread of user u0. Returns what the bench needs."""
    workspace = workspace.resolve()
    db = await Database.open(workspace / ".craft" / "appserver.db")
    repo = ThreadRepository(db)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    threads = []
    for i in range(count):
        moment = _iso(base + timedelta(seconds=i))
        threads.append(
            ThreadRecord(
                id=f"thread_20260101_{i:06d}",
                workspace_path=str(workspace),
                user_id=f"u{i % USERS}",
                origin_channel=CHANNELS[i % len(CHANNELS)],
                status="archived" if (i // USERS) % 25 == 0 else "active",
                created_at=moment,
                last_active_at=moment,
                display_name=f"Thread {i}: refactor module {i % 97}",
                source={"kind": "user"},
                configuration={"mode": "agent"} if i % 2 else None,
                turn_count=0,
            )
        )
    started = time.perf_counter()
    async with db.transaction() as conn:
        await conn.executemany(INSERT_THREAD, [thread_row(thread) for thread in threads])
    # The thread read in the bench: the newest active thread of u0.
    target = next(t for t in reversed(threads) if t.user_id == "u0" and t.status == "active")
    text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 6
    later = base + timedelta(seconds=count)
    for n in range(1, 21):
        turn_id = f"turn_{n:03d}"
        at = _iso(later + timedelta(seconds=n))
        await repo.add_turn(
            TurnRecord(
                thread_id=target.id,
                id=turn_id,
                seq=n,
                status="completed",
                started_at=at,
                completed_at=at,
                token_usage={"inputTokens": 1200, "outputTokens": 300, "totalTokens": 1500},
                origin_channel="cli",
            ),
            touched_at=at,
        )
        kinds = [
            ("userMessage", {"text": f"Question {n}: {text[:120]}"}),
            ("reasoningContent", {"text": text}),
            ("toolCall", {"toolName": "ReadFile", "callId": f"c{n}", "arguments": {"p": "a.py"}}),
            ("toolResult", {"callId": f"c{n}", "result": text, "success": True}),
            ("agentMessage", {"text": text}),
            ("agentMessage", {"text": text[:80]}),
        ]
        for k, (kind, payload) in enumerate(kinds):
            await repo.save_item(
                ItemRecord(
                    thread_id=target.id,
                    turn_id=turn_id,
                    id=f"item_{n:03d}_{k}",
                    seq=(n - 1) * len(kinds) + k + 1,
                    type=kind,
                    status="completed",
                    created_at=at,
                    completed_at=at,
                    payload=payload,
                )
            )
    build_seconds = time.perf_counter() - started
    await db.close()
    visible = sum(1 for t in threads if t.user_id == "u0" and t.status == "active")
    return {"read_thread": target.id, "visible_u0": visible, "build_seconds": build_seconds}


async def bench_big(plan: Plan, workspace: Path) -> dict[str, Any]:
    info = await build_big_workspace(workspace, plan.big_threads)
    identity = {"channelName": "cli", "userId": "u0"}
    results: dict[str, Any] = {"info": info}
    listen = ("--listen", "ws://127.0.0.1:0")
    async with ws_server(appserver_command(workspace, *listen)) as open_client:
        client = await open_client()
        await client.initialize()
        first = {"identity": identity, "limit": 50}
        page = await client.call("thread/list", first)
        results["first_page_len"] = len(page["data"])
        cursor = page["nextCursor"]
        for _ in range(9):  # walk to page 11 (threads 501-550)
            cursor = (await client.call("thread/list", {**first, "cursor": cursor}))["nextCursor"]
        later = {**first, "cursor": cursor}
        full = {"identity": identity}
        results["full_len"] = len((await client.call("thread/list", full))["data"])
        read = {"threadId": info["read_thread"], "includeTurns": True}
        reply = await client.call("thread/read", read)
        results["read_turns"] = len(reply["thread"]["turns"])
        results["read_bytes"] = len(json.dumps(reply))
        cases = [
            ("thread/list limit 50, first page", "thread/list", first, plan.big_calls),
            ("thread/list limit 50, page 11 (cursor)", "thread/list", later, plan.big_calls),
            ("thread/read includeTurns (20 turns)", "thread/read", read, plan.big_calls),
            (
                f"thread/list unpaged ({results['full_len']})",
                "thread/list",
                full,
                plan.big_full_calls,
            ),
        ]
        for label, method, params, count in cases:
            await client.sequential(method, params, 10)
            results[label] = summarize(await client.sequential(method, params, count))
    return results


# --- report -----------------------------------------------------------------------


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report_pairs(pairs: dict[str, dict[str, Any]], plan: Plan, verdicts: list[str]) -> None:
    rows = []
    for name, result in pairs.items():
        app, echo = result["app"], result["echo"]
        for stat in ("median", "p95"):
            a, e = app["latency"][stat], echo["latency"][stat]
            rows.append((name, f"latency {stat}", ms(a), ms(e), f"{a / e:.2f}x"))
        a, e = app["rps"], echo["rps"]
        rows.append(
            (name, f"pipelined req/s (window {WINDOW})", f"{a:,.0f}", f"{e:,.0f}", f"{a / e:.2f}x")
        )
        spread = [f"{lo:,.0f}-{hi:,.0f}" for lo, hi in (app["rps_range"], echo["rps_range"])]
        rows.append((name, "  req/s range over rounds", *spread, ""))
        lat_ratio = app["latency"]["median"] / echo["latency"]["median"]
        p95_ratio = app["latency"]["p95"] / echo["latency"]["p95"]
        verdicts.append(
            f"{name}: latency <= {LATENCY_TARGET:g}x floor: median {lat_ratio:.2f}x "
            f"{_verdict(lat_ratio <= LATENCY_TARGET)}, p95 {p95_ratio:.2f}x "
            f"{_verdict(p95_ratio <= LATENCY_TARGET)}"
        )
        verdicts.append(
            f"{name}: throughput >= {THROUGHPUT_TARGET:g}x floor: {a / e:.2f}x "
            f"{_verdict(a / e >= THROUGHPUT_TARGET)}"
        )
        if app["errors"] or echo["errors"]:
            verdicts.append(f"{name}: error responses: app {app['errors']}, echo {echo['errors']}")
    print(
        f"thread/read: {plan.sequential} sequential round trips and {plan.pipelined} "
        f"pipelined requests per server, in {plan.rounds} alternating rounds"
    )
    if not rows:
        return
    head = ("transport", "metric", "appserver", "echo floor", "ratio")
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(5)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def report_big(big: dict[str, Any], plan: Plan, verdicts: list[str]) -> None:
    info = big["info"]
    print(
        f"{plan.big_threads:,} threads ({USERS} identities, 4% archived; built in "
        f"{info['build_seconds']:.2f} s), WebSocket, one client, sequential calls"
    )
    print(
        f"  identity u0: {info['visible_u0']} visible threads; first page "
        f"{big['first_page_len']}, unpaged {big['full_len']}; read: {big['read_turns']} turns, "
        f"{big['read_bytes']:,} bytes"
    )
    labels = [key for key in big if isinstance(big[key], dict) and "p95" in big[key]]
    width = max(len(label) for label in labels)
    print(f"  {'call'.ljust(width)}  {'n':>4}  {'median':>10}  {'p95':>10}  {'max':>10}  target")
    for label in labels:
        s = big[label]
        unpaged = "unpaged" in label
        ok = s["p95"] < BIG_P95_TARGET
        target = "(reported)" if unpaged else _verdict(ok)
        print(
            f"  {label.ljust(width)}  {int(s['n']):>4}  {ms(s['median']):>10}  "
            f"{ms(s['p95']):>10}  {ms(s['max']):>10}  {target}"
        )
        if not unpaged:
            verdicts.append(
                f"{label}: p95 {ms(s['p95'])} < {BIG_P95_TARGET * 1000:g} ms {_verdict(ok)}"
            )


async def main(plan: Plan) -> None:
    started = time.perf_counter()
    pairs: dict[str, dict[str, Any]] = {}
    big: dict[str, Any] | None = None
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="appserver-bench-") as tmp:
        root = Path(tmp)
        parts = [("stdio", bench_stdio), ("websocket", bench_ws), ("big", bench_big)]
        for name, run in parts:
            (root / name).mkdir()
            try:
                result = await run(plan, root / name)
            except Exception as exc:  # a broken part must not hide the others' figures
                failures.append(f"{name}: FAILED: {type(exc).__name__}: {exc}")
                continue
            if name == "big":
                big = result
            else:
                pairs[name] = result
    verdicts: list[str] = []
    report_pairs(pairs, plan, verdicts)
    print()
    if big is not None:
        report_big(big, plan, verdicts)
        print()
    print("Targets")
    for line in [*verdicts, *failures]:
        print(f"  {line}")
    print()
    print(
        f"total {time.perf_counter() - started:.1f} s; python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {platform.system()} {platform.machine()}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (~10 s)")
    args = parser.parse_args()
    asyncio.run(main(QUICK if args.quick else FULL))
