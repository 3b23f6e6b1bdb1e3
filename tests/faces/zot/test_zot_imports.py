"""A zot session with a text prompt loads no pydantic: its streams read the
runtime's events as data (faces/common.py ``item_of``), the prompt goes in as
data, and the models of a turn's events are not built ahead."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.session_modules import session_modules


def test_a_zot_session_with_a_text_prompt_loads_no_pydantic(tmp_path: Path) -> None:
    prompt = json.dumps({"id": "1", "type": "prompt", "message": "hello"})
    frames, modules = session_modules(
        ["rpc", "--workspace", str(tmp_path), "--provider", "offline"],
        tmp_path,
        [prompt],
        lambda frame: None if frame["type"] == "done" else [],
    )
    seen = [frame["type"] for frame in frames]
    assert "assistant_message" in seen and seen[-1] == "done", seen
    assert "appserver.runtime.host" in modules  # a turn ran here
    assert "pydantic" not in modules
