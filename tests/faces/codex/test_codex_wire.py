"""Codex's envelope over a real ``appserver codex app-server`` process: frames
without ``"jsonrpc"``, answers without it, Codex's refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.servers import child_env


def _exchange(workspace: Path, *frames: str) -> list[dict[str, object]]:
    command = [sys.executable, "-m", "appserver", "codex", "app-server", "--provider", "offline"]
    done = subprocess.run(
        command,
        input="\n".join(frames) + "\n",
        capture_output=True,
        text=True,
        cwd=workspace,
        env=child_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_requests_without_jsonrpc_are_answered_without_it(workspace: Path) -> None:
    out = _exchange(
        workspace,
        '{"id": 1, "method": "thread/list", "params": {}}',
        '{"id": "a", "method": "initialize", "params": {"clientInfo": {"name": "probe"}}}',
        '{"id": 2, "method": "initialize", "params": {}}',
        "not json",
        '{"id": 3.5, "method": "thread/list"}',
        '{"id": 4, "method": "fuzzy/none", "params": {}}',
        '{"id": 5, "method": "turn/interrupt", "params": {"threadId": "t", "turnId": "t:x"}}',
        '{"jsonrpc": "2.0", "id": 6, "method": "thread/list"}',
    )
    by_id = {frame["id"]: frame for frame in out}
    assert all("jsonrpc" not in frame for frame in out)
    assert by_id[1]["error"] == {"code": -32600, "message": "Not initialized"}
    result = by_id["a"]["result"]
    assert isinstance(result, dict) and str(result["userAgent"]).startswith("probe/0.169.0 ")
    assert by_id[2]["error"] == {"code": -32600, "message": "Already initialized"}
    assert by_id[4]["error"]["code"] == -32601  # type: ignore[index]
    assert by_id[5]["error"]["code"] == -32600  # type: ignore[index]
    assert by_id[6]["result"] == {"data": [], "nextCursor": None}
    assert set(by_id) == {1, "a", 2, 4, 5, 6}  # the bad lines got no answer


def test_a_cwd_other_than_the_workspace_is_refused(workspace: Path, tmp_path: Path) -> None:
    out = _exchange(
        workspace,
        '{"id": 1, "method": "initialize", "params": {}}',
        json.dumps({"id": 2, "method": "thread/start", "params": {"cwd": str(tmp_path)}}),
    )
    error = out[-1]["error"]
    assert isinstance(error, dict) and "workspace" in str(error["message"])
