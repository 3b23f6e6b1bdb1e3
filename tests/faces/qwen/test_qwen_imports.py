"""A Qwen stream-json session with a text message loads no pydantic: its turn
reads the runtime's events as data (faces/common.py ``item_of``), the message
goes in as data, and the models of a turn's events are not built ahead."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.session_modules import session_modules

SDK_ARGS = ["--input-format", "stream-json", "--output-format", "stream-json", "--channel=SDK"]


def test_a_qwen_session_with_a_text_message_loads_no_pydantic(tmp_path: Path) -> None:
    message = {"role": "user", "content": "hello"}
    line = json.dumps({"type": "user", "session_id": "s", "message": message})
    frames, modules = session_modules(
        [*SDK_ARGS, "--provider", "offline"],
        tmp_path,
        [line],
        lambda frame: None if frame.get("type") == "result" else [],
    )
    assert frames[-1].get("type") == "result" and frames[-1]["subtype"] == "success", frames[-1]
    assert "appserver.runtime.host" in modules  # a turn ran here
    assert "pydantic" not in modules
