"""The workspace's .craft/config.json as the server reads it: a broken file is
ignored with one warning while it stays broken, not one per read."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from appserver.storage.workspace_config import load_workspace_config


@pytest.mark.parametrize(
    ("text", "said"), [("[1, 2]", "holds no JSON object"), ("{oops", "ignoring unreadable")]
)
def test_a_broken_file_is_ignored_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, said: str
) -> None:
    craft = tmp_path / ".craft"
    craft.mkdir()
    (craft / "config.json").write_text(text)
    with caplog.at_level(logging.WARNING):
        assert load_workspace_config(craft) == {}
        assert load_workspace_config(craft) == {}
    assert [r.getMessage() for r in caplog.records if said in r.getMessage()] == [
        caplog.records[0].getMessage()
    ]
    (craft / "config.json").write_text('{"Model": "m"}')
    assert load_workspace_config(craft) == {"Model": "m"}
    (craft / "config.json").write_text(text)  # broken again: said again
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_workspace_config(craft)
    assert len(caplog.records) == 1
