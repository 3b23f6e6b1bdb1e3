"""A zot session with a text prompt loads no pydantic: its streams read the
runtime's events as data (faces/common.py ``item_of``), the prompt goes in as
data, and the models of a turn's events are not built ahead."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.faces.zene.test_zene_warm import PROBE
from tests.support.servers import child_env


def test_a_zot_session_with_a_text_prompt_loads_no_pydantic(tmp_path: Path) -> None:
    command = [sys.executable, "-c", PROBE, "rpc", "--workspace", str(tmp_path)]
    command += ["--provider", "offline"]
    prompt = json.dumps({"id": "1", "type": "prompt", "message": "hello"}) + "\n"
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
        process.stdin.write(prompt)
        process.stdin.flush()
        seen = []
        for line in process.stdout:
            seen.append(json.loads(line)["type"])
            if seen[-1] == "done":
                break
        _, stderr = process.communicate(timeout=60)
    assert "assistant_message" in seen and seen[-1] == "done", seen
    modules = set(stderr.split("MODULES ")[1].split())
    assert "appserver.runtime.host" in modules  # a turn ran here
    assert "pydantic" not in modules
