"""The shell examples in docs/faces.md run as written, with the offline model.

Blocks marked ``<!-- tested: tests/faces/test_faces_docs.py -->`` of one face's
section (a ``## `` heading) run in order as one ``bash -e`` script, in an empty
directory with a private ``HOME`` and the installed ``appserver`` on ``PATH``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import anyio
import pytest

from tests.support.servers import child_env

DOC = Path(__file__).resolve().parents[2] / "docs" / "faces.md"
MARK = "<!-- tested: tests/faces/test_faces_docs.py -->"


def sections() -> dict[str, str]:
    """Face heading -> its marked shell blocks joined into one script."""
    scripts: dict[str, str] = {}
    for section in re.split(r"^## ", DOC.read_text("utf-8"), flags=re.M)[1:]:
        title = section.splitlines()[0]
        blocks = re.findall(re.escape(MARK) + r"\n```sh\n(.*?)\n```", section, re.S)
        if blocks:
            scripts[title] = "\n".join(blocks)
    return scripts


SCRIPTS = sections()


def test_every_face_has_a_tested_example() -> None:
    titles = " ".join(SCRIPTS)
    for face in ("appserver host", "appserver rpc", "appserver router"):
        assert face in titles, face


@pytest.mark.parametrize("title", sorted(SCRIPTS))
async def test_the_example_runs(title: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = child_env()
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("ZOTCORE_RPC_TOKEN", None)
    with anyio.fail_after(60):
        done = await anyio.run_process(
            ["bash", "-e", "-c", SCRIPTS[title]], cwd=tmp_path, env=env, check=False
        )
    output = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "You said:" in output, output[-2000:]
