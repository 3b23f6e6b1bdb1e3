"""``appserver router`` as the Codeswarm CLI and web backend use it over TCP: a client
that half-closes after its commands gets their replies and then EOF (``codeswarm
stop-all``), terminated swarms leave ``swarm_list`` with ``swarm_removed``, and the
backend's polled ``approvals_list`` / ``queue_list`` / ``project_list`` are answered in
the router's own shapes, never ``command_rejected``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from tests.faces.codeswarm.test_face_codeswarm import (
    TIMEOUT,
    command,
    event_lines,
    is_event,
    names,
    router,
    stop,
    tcp_client,
)


async def test_a_half_closing_client_gets_its_replies_then_eof(workspace: Path) -> None:
    """``codeswarm stop-all``: list, terminate each swarm, half-close, wait for EOF."""
    async with router(workspace, tcp=True) as sut:
        port = await sut.tcp_port()
        async with tcp_client(port) as setup:
            await setup.send(command("swarm_launch", {"nodes": 1, "system_prompt": "x"}, "l"))
            launched = await setup.frames.until(is_event("swarm_launched"))
            swarm_id = launched[-1]["data"]["swarm_id"]
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            frames = event_lines(lambda: stream.receive(1 << 16))
            lines = [
                command("swarm_list", {}, "list"),
                command("inject", {"swarm_id": swarm_id, "nodes": 0, "content": "?stream 3"}, "i"),
                command("swarm_terminate", {"swarm_id": swarm_id}, "stop"),
            ]
            await stream.send(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
            await stream.send_eof()  # shutdown(SHUT_WR), as the CLI's socket.end()
            with anyio.fail_after(TIMEOUT):
                events = await frames.rest()  # everything up to the router's close
        kinds = names(events)
        assert "swarm_list" in kinds and "swarm_terminated" in kinds
        assert kinds.index("swarm_terminated") < kinds.index("swarm_removed")
        assert "turn_complete" in kinds or "inject_failed" in kinds  # the injection ended
        assert await stop(sut) == 0


async def test_terminated_swarms_leave_swarm_list_with_swarm_removed(workspace: Path) -> None:
    async with router(workspace, tcp=True) as sut:
        port = await sut.tcp_port()
        async with tcp_client(port) as backend:
            await backend.send(command("swarm_launch", {"nodes": 1, "system_prompt": "x"}, "l"))
            gone = (await backend.frames.until(is_event("swarm_launched")))[-1]["data"]
            await backend.send(command("swarm_launch", {"nodes": 1, "system_prompt": "y"}, "m"))
            kept = (await backend.frames.until(is_event("swarm_launched")))[-1]["data"]
            await backend.send(command("swarm_terminate", {"swarm_id": gone["swarm_id"]}, "t"))
            ending = await backend.frames.until(is_event("swarm_removed"))
            assert names(ending)[-2:] == ["swarm_terminated", "swarm_removed"]
            assert ending[-1]["data"] == {"swarm_id": gone["swarm_id"], "reason": "terminated"}
            await backend.send(command("swarm_list", {}, "poll"))
            listed = (await backend.frames.until(is_event("swarm_list")))[-1]["data"]["swarms"]
            assert list(listed) == [kept["swarm_id"]]
            # Still known by id: its status is answered, an injection refused.
            await backend.send(command("swarm_status", {"swarm_id": gone["swarm_id"]}, "s"))
            status = (await backend.frames.until(is_event("swarm_status")))[-1]["data"]
            assert status["status"] == "terminated"
            payload = {"swarm_id": gone["swarm_id"], "nodes": 0, "content": "x"}
            await backend.send(command("inject", payload, "late"))
            refused = (await backend.frames.until(is_event("command_rejected")))[-1]["data"]
            assert refused["request_id"] == "late" and "terminated" in refused["reason"]
        assert await stop(sut) == 0
    # A new process does not list it either.
    async with router(workspace, tcp=True) as sut:
        async with tcp_client(await sut.tcp_port()) as backend:
            await backend.send(command("swarm_list", {}, "poll"))
            listed = (await backend.frames.until(is_event("swarm_list")))[-1]["data"]["swarms"]
            assert list(listed) == [kept["swarm_id"]]
        assert await stop(sut) == 0


async def test_the_backends_polled_commands_are_answered(workspace: Path) -> None:
    async with router(workspace, tcp=True) as sut:
        async with tcp_client(await sut.tcp_port()) as backend:
            answers: dict[str, dict[str, Any]] = {}
            for name in ("swarm_list", "queue_list", "project_list", "approvals_list"):
                await backend.send(command(name, {}, f"poll-{name}"))
                got = await backend.frames.until(
                    lambda e, n=name: e["data"].get("request_id") == f"poll-{n}"
                )
                assert got[-1]["event"] == name, got[-1]  # never command_rejected
                answers[name] = got[-1]["data"]
            assert answers["queue_list"]["items"] == []
            assert answers["project_list"]["projects"] == {}
            approvals = answers["approvals_list"]
            assert approvals["approvals"] == {} and isinstance(approvals["approvals_version"], int)
            # Unchanged (nothing pending) between polls: the same version.
            await backend.send(command("approvals_list", {}, "again"))
            again = (await backend.frames.until(is_event("approvals_list")))[-1]["data"]
            assert again["approvals_version"] == approvals["approvals_version"]
        assert await stop(sut) == 0
