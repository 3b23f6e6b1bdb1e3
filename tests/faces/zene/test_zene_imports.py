"""A cold Zene one-shot loads what its turn uses. It loads no wire model, nor
pydantic: the runtime hands its events as data and the face reads data
(runtime/wire.py). The wire models and tools of what a plain turn never
touches load with their first use: background
terminals with the first terminal, an editor's request families with the
first editor that serves one, SubAgents' runtime with the first control tool
call (tests/runtime/test_editor_families.py, the terminal and SubAgent tests
run those)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

from tests.faces.zene.test_face_zene import (
    ONE_SHOT,
    clawbridge_request,
    env,
    host_command,
    line,
)
from tests.faces.zene.test_zene_warm import PROBE

LOADED_AT_FIRST_USE = {
    "pydantic",
    "appserver.protocol.base",
    "appserver.protocol.threads",
    "appserver.protocol.turns",
    "appserver.protocol.plans",
    "appserver.protocol.subagent_profiles",
    "appserver.protocol.editor_families",
    "appserver.protocol.terminals",
    "appserver.tools.editor_families",
    # The SubAgents' runtime, external agent CLIs and all (Runtime.subagents).
    "appserver.runtime.subagents",
    "appserver.runtime.subagent_external",
    "appserver.runtime.subagent_cli_run",
    "appserver.protocol.subagent_sessions",
}


async def test_a_plain_one_shot_loads_nothing_it_does_not_use(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-c", PROBE, *host_command(tmp_path, *ONE_SHOT)[3:]]
    with anyio.fail_after(60):
        done = await anyio.run_process(
            command, input=line(clawbridge_request()), check=False, env=env()
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True
    modules = set(done.stderr.decode().split("MODULES ")[1].split())
    assert "appserver.runtime.host" in modules  # a turn ran here, cold
    assert not modules & LOADED_AT_FIRST_USE


async def test_a_timed_out_one_shot_loads_no_wire_model_either(tmp_path: Path) -> None:
    # Its interrupted turn's end imported pydantic once, stalling the loop past the deadline.
    request = clawbridge_request(prompt="?stream 1000\n?delay 20", timeout_ms=1000)
    command = [sys.executable, "-c", PROBE, *host_command(tmp_path, *ONE_SHOT)[3:]]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, input=line(request), check=False, env=env())
    assert json.loads(done.stdout)["error_code"] == "TIMEOUT"
    modules = set(done.stderr.decode().split("MODULES ")[1].split())
    assert "appserver.runtime.host" in modules and "pydantic" not in modules
