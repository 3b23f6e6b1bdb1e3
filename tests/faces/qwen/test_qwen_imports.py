"""A Qwen stream-json session with a text message loads no pydantic: its turn
reads the runtime's events as data (faces/common.py ``item_of``), the message
goes in as data, and the models of a turn's events are not built ahead."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.faces.zene.test_zene_warm import PROBE
from tests.support.servers import child_env

SDK_ARGS = ["--input-format", "stream-json", "--output-format", "stream-json", "--channel=SDK"]


def test_a_qwen_session_with_a_text_message_loads_no_pydantic(tmp_path: Path) -> None:
    command = [sys.executable, "-c", PROBE, *SDK_ARGS, "--provider", "offline"]
    message = {"role": "user", "content": "hello"}
    line = json.dumps({"type": "user", "session_id": "s", "message": message}) + "\n"
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
        process.stdin.write(line)
        process.stdin.flush()
        result = None
        for out in process.stdout:
            frame = json.loads(out)
            if frame.get("type") == "result":
                result = frame
                break
        _, stderr = process.communicate(timeout=60)
    assert result is not None and result["subtype"] == "success", result
    modules = set(stderr.split("MODULES ")[1].split())
    assert "appserver.runtime.host" in modules  # a turn ran here
    assert "pydantic" not in modules
