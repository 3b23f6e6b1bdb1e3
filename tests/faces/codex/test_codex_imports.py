"""A Codex app-server session with a text turn loads no pydantic: its streams
read the runtime's events as data, a new thread is shaped from its record, text
input goes in as data, and the models of a turn's events are not built ahead
(``HostOptions.build_turn_models``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.session_modules import session_modules

HELLO = [
    {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "probe"}}},
    {"method": "initialized"},
    {"id": 2, "method": "thread/start", "params": {}},
]


def _step(frame: dict[str, Any]) -> list[str] | None:
    if frame.get("id") == 2:  # the thread: its turn
        turn = {
            "threadId": frame["result"]["thread"]["id"],
            "input": [{"type": "text", "text": "hi"}],
        }
        return [json.dumps({"id": 3, "method": "turn/start", "params": turn})]
    return None if frame.get("method") == "turn/completed" else []


def test_a_codex_session_with_a_text_turn_loads_no_pydantic(tmp_path: Path) -> None:
    frames, modules = session_modules(
        ["codex", "app-server", "--provider", "offline"],
        tmp_path,
        [json.dumps(frame) for frame in HELLO],
        _step,
    )
    assert frames[-1]["method"] == "turn/completed", frames[-1]
    assert frames[-1]["params"]["turn"]["status"] == "completed"
    assert "appserver.runtime.host" in modules  # a turn ran here
    assert "pydantic" not in modules
