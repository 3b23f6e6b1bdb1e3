"""A Codex app-server session with a text turn loads no pydantic: its streams
read the runtime's events as data, a new thread is shaped from its record, text
input goes in as data, and the models of a turn's events are not built ahead
(``HostOptions.build_turn_models``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.faces.zene.test_zene_warm import PROBE
from tests.support.servers import child_env


def test_a_codex_session_with_a_text_turn_loads_no_pydantic(tmp_path: Path) -> None:
    command = [sys.executable, "-c", PROBE, "codex", "app-server", "--provider", "offline"]
    frames = [
        {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "probe"}}},
        {"method": "initialized"},
        {"id": 2, "method": "thread/start", "params": {}},
    ]
    with subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=child_env(),
        text=True,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("".join(json.dumps(frame) + "\n" for frame in frames))
        process.stdin.flush()
        thread_id = None
        for line in process.stdout:
            frame = json.loads(line)
            if frame.get("id") == 2:
                thread_id = frame["result"]["thread"]["id"]
                turn = {"threadId": thread_id, "input": [{"type": "text", "text": "hello"}]}
                process.stdin.write(json.dumps({"id": 3, "method": "turn/start", "params": turn}))
                process.stdin.write("\n")
                process.stdin.flush()
            if frame.get("method") == "turn/completed":
                assert frame["params"]["turn"]["status"] == "completed"
                break
        _, stderr = process.communicate(timeout=60)
    assert thread_id is not None
    modules = set(stderr.split("MODULES ")[1].split())
    assert "appserver.runtime.host" in modules  # a turn ran here
    assert "pydantic" not in modules
