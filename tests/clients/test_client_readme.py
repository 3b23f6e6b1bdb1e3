"""The client README's examples run, against real servers, and print what the
README says they print (each ```python block is followed by its ```text output)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import anyio
import pytest

from tests.support.servers import child_env, running_server

README = Path(__file__).resolve().parents[2] / "clients" / "python" / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```\s*(?:.*?\n)??```text\n(.*?)```", re.DOTALL)


def examples() -> list[tuple[str, str]]:
    text = README.read_text("utf-8")
    found = [(code, output) for code, output in BLOCK.findall(text)]
    assert len(found) == text.count("```python"), "every python block needs its output block"
    return found


def test_the_readme_has_examples() -> None:
    assert len(examples()) >= 3


@pytest.mark.parametrize("index", range(len(examples())))
async def test_readme_example_prints_what_the_readme_says(
    index: int, workspace: Path, tmp_path: Path
) -> None:
    code, expected = examples()[index]
    script = tmp_path / f"example_{index}.py"
    script.write_text(code, "utf-8")
    here = tmp_path / "cwd"  # a spawned server's workspace (the current directory)
    here.mkdir()
    env = child_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    async with running_server("websocket", workspace) as sut:
        assert sut.url is not None
        env["APPSERVER_URL"] = sut.url
        with anyio.fail_after(30):
            done = await anyio.run_process(
                [sys.executable, str(script)], cwd=here, env=env, check=False
            )
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, stderr
    assert stdout == expected, f"README example {index + 1} printed:\n{stdout}"
