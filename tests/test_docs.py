"""Code examples in docs/ run against a real server, so they cannot rot.

A Python block preceded by ``<!-- tested: tests/test_docs.py -->`` is run as
a script with ``APPSERVER_URL`` pointing at a live WebSocket server.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import anyio
import pytest

from tests.support.servers import running_server

DOCS = Path(__file__).resolve().parents[1] / "docs"
MARK = "<!-- tested: tests/test_docs.py -->"
BLOCKS = [
    (path.name, index, code)
    for path in sorted(DOCS.glob("*.md"))
    for index, code in enumerate(
        re.findall(re.escape(MARK) + r"\n```python\n(.*?)\n```", path.read_text("utf-8"), re.S)
    )
]


def test_there_are_tested_examples() -> None:
    assert BLOCKS, "no docs example is marked as tested"


@pytest.mark.parametrize(("doc", "index", "code"), BLOCKS, ids=[f"{d}#{i}" for d, i, _ in BLOCKS])
async def test_example_runs(doc: str, index: int, code: str, workspace: Path) -> None:
    script = workspace / f"example_{index}.py"
    script.write_text(code, "utf-8")
    async with running_server("websocket", workspace) as sut:
        assert sut.url is not None
        env = {**os.environ, "APPSERVER_URL": sut.url}
        with anyio.fail_after(30):
            done = await anyio.run_process([sys.executable, str(script)], env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert "You said: hello" in done.stdout.decode()


def test_security_promises_name_tests_that_exist() -> None:
    """docs/security.md links each promise to a test: every one must exist."""
    root = DOCS.parent
    text = (DOCS / "security.md").read_text("utf-8")
    references = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", text)
    assert len(references) > 20
    for path, name in references:
        assert (root / path).is_file(), path
        if name:
            source = (root / path).read_text("utf-8")
            assert re.search(rf"^(async )?def {name}\(", source, re.M), f"{path}::{name}"
