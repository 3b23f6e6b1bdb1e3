"""The ACP door: an answer with neither ``result`` nor ``error`` refuses at once
(issue 24, "one answer per approval"; the JSON-RPC door's twin is in
tests/runtime/test_trust_approvals.py)."""

from __future__ import annotations

from pathlib import Path

import anyio

from tests.support.line_peer import appserver_command, line_peer


async def test_an_empty_answer_to_a_permission_request_refuses_at_once(
    workspace: Path, tmp_path: Path
) -> None:
    argv = appserver_command("acp", "--workspace", str(workspace), "--provider", "offline")
    async with line_peer(argv, workspace, tmp_path / "acp.err") as peer:
        await peer.send(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
        )
        await peer.until(lambda frame: frame.get("id") == 1)
        new = {"cwd": str(workspace), "mcpServers": []}
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": new})
        session = (await peer.until(lambda frame: frame.get("id") == 2))["result"]["sessionId"]
        prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "!touch made.txt"}]}
        await peer.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt})
        asked = await peer.until(lambda frame: frame.get("method") == "session/request_permission")
        # The default approval timeout is minutes: the prompt ending within the
        # test's bound shows the empty answer was taken as a refusal.
        await peer.send({"jsonrpc": "2.0", "id": asked["id"]})
        with anyio.fail_after(30):
            done = await peer.until(lambda frame: frame.get("id") == 3)
        assert done["result"]["stopReason"] == "end_turn"
        assert not (workspace / "made.txt").exists()
        assert "neither result nor error" in peer.stderr()
