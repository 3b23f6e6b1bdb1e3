"""Every face's outbound queue is bounded, with the JSON-RPC outbox's policy.

``appserver host`` with a client that never read took 300 prompts from 41 MB
to 1.17 GB: responses waited in memory behind a blocked write. Now each face
queues its output in a bounded :class:`PeerWriter`: streamed deltas coalesce
when the client lags, and a client past ``--max-client-backlog`` (or whose
reading makes no progress for 30 s) is dropped: the process ends with exit 1,
one line on stderr, and the runtime settles the turns in flight as at any
shutdown, so what was stored stays intact.

The process tests assert on the bound and on the process dropping the client,
never on timing or memory figures.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from appserver.transport.base import TransportClosed
from appserver.transport.outbox import text_merger
from appserver.transport.peer_writer import PeerWriter
from tests.support.json_lines import piped_process
from tests.support.line_peer import appserver_command, face_env, line_peer

BACKLOG = 64 * 1024
TIMEOUT = 120.0
PROMPT = "word " * 4_000  # 20 kB: its echo alone is most of a pipe's buffer


# --- the shared writer -----------------------------------------------------------------


class StuckPeer:
    """A ``send_batch`` whose first write never completes until ``release``."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.sending = anyio.Event()
        self.released = anyio.Event()

    async def send_batch(self, frames: list[str]) -> None:
        self.batches.append(frames)
        self.sending.set()
        await self.released.wait()


async def test_a_client_past_the_backlog_is_dropped_and_its_queue_freed() -> None:
    peer = StuckPeer()
    drops: list[str] = []
    writer = PeerWriter(peer.send_batch, max_bytes=1_000, on_stall=lambda: drops.append("x"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        assert writer.put("first")
        await peer.sending.wait()  # the write in progress does not count
        queued = 0
        while writer.put("y" * 100):
            queued += 1
        assert queued == 10  # exactly the budget behind the write in progress
        assert writer.dropped == "more than 1000 bytes unread"
        assert writer.stalled.is_set() and drops == ["x"]
        assert writer.outbox.queued_bytes == 0  # freed at once
        assert not writer.put("later")  # nothing is queued any more
        with anyio.fail_after(5):
            assert await writer.flushed()  # the stuck write was abandoned
    assert peer.batches == [["first"]]


async def test_a_write_that_makes_no_progress_drops_the_client() -> None:
    peer = StuckPeer()
    writer = PeerWriter(peer.send_batch, send_timeout=0.05)
    writer.put("frame")
    with anyio.fail_after(5):
        await writer.run()  # returns: the peer never reads
    assert writer.dropped == "no write progress for 0.05 s"
    assert writer.stalled.is_set() and not writer.put("more")


async def test_deltas_coalesce_while_the_client_lags() -> None:
    peer = StuckPeer()
    merge = text_merger("delta")
    writer = PeerWriter(peer.send_batch, max_bytes=100_000, soft_bytes=10)
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        writer.put('{"type":"start"}')
        await peer.sending.wait()
        writer.put('{"type":"note","text":"past the soft bound"}')
        for word in ("a", "b", "c"):
            assert writer.put(json.dumps({"type": "text_delta", "delta": word}), ("k", merge))
        writer.put('{"type":"done"}')
        writer.close()
        peer.released.set()
    assert [json.loads(frame) for frame in peer.batches[1]] == [
        {"type": "note", "text": "past the soft bound"},
        {"type": "text_delta", "delta": "abc"},
        {"type": "done"},
    ]
    assert writer.outbox.coalesced == 2 and writer.dropped is None


async def test_a_client_that_closed_its_end_is_gone_not_stalled() -> None:
    async def closed(frames: list[str]) -> None:
        raise TransportClosed

    writer = PeerWriter(closed)
    writer.put("frame")
    with anyio.fail_after(5):
        await writer.run()
    assert writer.gone and writer.dropped is None and not writer.stalled.is_set()
    assert not writer.put("more")


async def test_close_writes_everything_queued_then_ends() -> None:
    written: list[str] = []

    async def send_batch(frames: list[str]) -> None:
        written.extend(frames)

    writer = PeerWriter(send_batch)
    for index in range(5):
        writer.put(str(index))
    writer.close()
    with anyio.fail_after(5):
        await writer.run()
    assert written == ["0", "1", "2", "3", "4"] and not writer.put("late")


# --- each face with a client that never reads -----------------------------------------


def never_read(argv: list[str], cwd: Path, stderr: Path) -> AbstractAsyncContextManager[Process]:
    """A face process whose stdout nobody reads."""
    return piped_process(argv, cwd, face_env(), stderr, timeout=TIMEOUT)


async def feed_until_exit(process: Process, lines: list[Any]) -> int:
    """Write ``lines`` (as long as the process reads them) and wait for its exit code."""

    async def feed() -> None:
        assert process.stdin is not None
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            for line in lines:
                text = line if isinstance(line, str) else json.dumps(line)
                await process.stdin.send(text.encode() + b"\n")

    async with anyio.create_task_group() as tg:
        tg.start_soon(feed)
        with anyio.fail_after(TIMEOUT):
            code = await process.wait()
        tg.cancel_scope.cancel()
    return code


def check_dropped(stderr: Path) -> None:
    log = stderr.read_text(errors="replace")
    assert f"dropping client stdout: more than {BACKLOG} bytes unread" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def stored_turns(workspace: Path) -> list[tuple[str, str, str]]:
    """(thread, turn, status) of every stored turn; the database must be sound."""
    with contextlib.closing(sqlite3.connect(workspace / ".craft" / "appserver.db")) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = db.execute("SELECT thread_id, id, status FROM turns ORDER BY thread_id, seq")
        return [(str(thread), str(turn), str(status)) for thread, turn, status in rows]


def check_stored_turns_intact(workspace: Path) -> None:
    """No turn is left running, and each completed one has its whole answer stored."""
    turns = stored_turns(workspace)
    assert turns, "no turn was stored"
    assert {status for _, _, status in turns} <= {"completed", "cancelled", "failed"}, turns
    completed = [(thread, turn) for thread, turn, status in turns if status == "completed"]
    assert completed, turns
    with contextlib.closing(sqlite3.connect(workspace / ".craft" / "appserver.db")) as db:
        for thread, turn in completed:
            texts = [
                json.loads(payload).get("text", "")
                for (payload,) in db.execute(
                    "SELECT payload_json FROM items WHERE thread_id = ? AND turn_id = ?"
                    " AND type = 'agentMessage' AND status = 'completed'",
                    (thread, turn),
                )
            ]
            assert any(text.startswith("You said: ") for text in texts), texts


def zene_request(index: int) -> dict[str, Any]:
    return {
        "protocol_version": 1,
        "type": "run",
        "request_id": f"r{index}",
        "session_id": f"s{index}",
        "prompt": PROMPT,
        "idempotency_key": f"k{index}",
    }


async def test_zene_host_drops_a_client_that_never_reads_and_keeps_what_was_stored(
    workspace: Path,
) -> None:
    stderr = workspace.parent / "host.log"
    argv = appserver_command(
        "host", "--workspace", str(workspace), "--protocol", "v1", "--bridge-compat",
        "--max-client-backlog", str(BACKLOG),
    )  # fmt: skip
    async with never_read(argv, workspace, stderr) as process:
        # Far more than the backlog holds: 80 answers of 20 kB each.
        code = await feed_until_exit(process, [zene_request(index) for index in range(80)])
    assert code == 1
    check_dropped(stderr)
    check_stored_turns_intact(workspace)
    # A stored reply is intact: a retry of that request replays it.
    with contextlib.closing(sqlite3.connect(workspace / ".craft" / "appserver.db")) as db:
        keys = [str(key) for (key,) in db.execute("SELECT key FROM face_replies")]
    assert keys
    session, idempotency_key = json.loads(keys[0])
    index = int(session.removeprefix("s"))
    assert idempotency_key == f"k{index}"
    retry = appserver_command(
        "host", "--workspace", str(workspace), "--protocol", "v1", "--bridge-compat",
        "--single-request",
    )  # fmt: skip
    async with line_peer(retry, workspace, workspace.parent / "retry.log") as peer:
        await peer.send(zene_request(index))
        reply = await peer.frame()
        assert reply["ok"] is True and reply.get("replayed") is True, reply
        assert reply["text"] == f"You said: {PROMPT.strip()}"
        assert await peer.finish() == 0


FaceLines = Callable[[Path], tuple[list[str], list[Any]]]

FACES: dict[str, FaceLines] = {
    "rpc (zot)": lambda ws: (
        appserver_command("rpc", "--workspace", str(ws)),
        [{"type": "prompt", "id": f"p{index}", "message": PROMPT} for index in range(40)],
    ),
    "qwen (stream-json)": lambda ws: (
        appserver_command("--input-format", "stream-json", "--output-format", "stream-json"),
        [
            {
                "type": "user",
                "session_id": "",
                "message": {"role": "user", "content": PROMPT},
                "parent_tool_use_id": None,
            }
            for _ in range(40)
        ],
    ),
}


@pytest.mark.parametrize("face", list(FACES))
async def test_a_face_drops_a_client_that_never_reads(workspace: Path, face: str) -> None:
    argv, lines = FACES[face](workspace)
    stderr = workspace.parent / "face.log"
    async with never_read([*argv, "--max-client-backlog", str(BACKLOG)], workspace, stderr) as proc:
        code = await feed_until_exit(proc, lines)
    assert code == 1
    check_dropped(stderr)
    check_stored_turns_intact(workspace)


async def test_acp_drops_a_client_that_stops_reading(workspace: Path) -> None:
    stderr = workspace.parent / "acp.log"
    argv = appserver_command(
        "acp", "--workspace", str(workspace), "--provider", "offline",
        "--max-client-backlog", str(BACKLOG),
    )  # fmt: skip
    async with line_peer(argv, workspace, stderr) as peer:
        # The client reads the handshake, then stops reading for good.
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": 1}})  # fmt: skip
        assert "result" in await peer.frame()
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                         "params": {"cwd": str(workspace), "mcpServers": []}})  # fmt: skip
        session = (await peer.frame())["result"]["sessionId"]

        def prompt(request_id: int, text: str) -> dict[str, Any]:
            params = {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
            return {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "session/prompt",
                "params": params,
            }

        await peer.send(prompt(3, "hello"))
        done = await peer.until(lambda frame: frame.get("id") == 3)
        assert done["result"]["stopReason"] == "end_turn", done
        # One answer of 400 kB: far past the backlog, and nobody reads it.
        code = await feed_until_exit(peer.process, [prompt(4, PROMPT * 20)])
    assert code == 1
    check_dropped(stderr)
    check_stored_turns_intact(workspace)
