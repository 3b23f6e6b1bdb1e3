"""A router session injecting text loads no pydantic: its relay reads the
runtime's events as data (faces/common.py ``item_of``), the injection goes in
as data, and the models of a turn's events are not built ahead."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.faces.codeswarm.test_face_codeswarm import inject
from tests.faces.zene.test_zene_warm import PROBE
from tests.support.servers import child_env


def test_a_router_injecting_text_loads_no_pydantic(tmp_path: Path) -> None:
    command = [sys.executable, "-c", PROBE, "router", "--workspace", str(tmp_path)]
    command += ["--provider", "offline", "--allow-missing-timestamp"]
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
        process.stdin.write(json.dumps(inject("job", 0, "hello")) + "\n")
        process.stdin.flush()
        events = []
        for line in process.stdout:
            events.append(json.loads(line).get("event"))
            if events[-1] == "turn_complete":
                break
        _, stderr = process.communicate(timeout=60)
    assert "assistant" in events and events[-1] == "turn_complete", events
    modules = set(stderr.split("MODULES ")[1].split())
    assert "appserver.runtime.host" in modules  # a turn ran here
    assert "pydantic" not in modules
