"""A router session injecting text loads no pydantic: its relay reads the
runtime's events as data (faces/common.py ``item_of``), the injection goes in
as data, and the models of a turn's events are not built ahead."""

from __future__ import annotations

import json
from pathlib import Path

from tests.faces.codeswarm.test_face_codeswarm import inject
from tests.support.session_modules import session_modules


def test_a_router_injecting_text_loads_no_pydantic(tmp_path: Path) -> None:
    frames, modules = session_modules(
        ["router", "--workspace", str(tmp_path), "--provider", "offline"],
        tmp_path,
        [json.dumps(inject("job", 0, "hello"))],
        lambda frame: None if frame.get("event") == "turn_complete" else [],
    )
    events = [frame.get("event") for frame in frames]
    assert "assistant" in events and events[-1] == "turn_complete", events
    assert "appserver.runtime.host" in modules  # a turn ran here
    assert "pydantic" not in modules
