"""Code examples in docs/ run against a real server, so they cannot rot.

A Python block preceded by ``<!-- tested: tests/test_docs.py -->`` is run as
a script with ``APPSERVER_URL`` pointing at a live WebSocket server.
"""

from __future__ import annotations

import os
import re
import shlex
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


# --- every shell command in the set-up docs runs as written (issue 27) ----------------------

SETUP_DOCS = ("README.md", "docs/quickstart.md", "docs/clients.md")
SETUP_DOCS += ("clients/python/README.md", "clients/node/README.md")
VENV_BIN = Path(sys.executable).parent  # the venv `make` builds, as the tests run in it
# What a reader brings (the quickstart names them), and shell builtins.
OUTSIDE = {"make", "pipx", "pip", "npm", "node", "cd", "export"}
ACTIVATE = re.compile(r"(^|[\s`(])\. (\S*/)?\.venv/bin/activate\b", re.M)
NEEDS_VENV = re.compile(
    r"spawn\(\s*\[?\s*[\"']appserver[\"']|^(from|import) (websockets|appserver_client)\b", re.M
)
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def shell_commands(code: str) -> list[list[str]]:
    """Each line's words, without the comment, ``VAR=value`` prefixes and ``$`` prompts."""
    commands = []
    for line in code.splitlines():
        words = shlex.split(line.split(" #", 1)[0].strip().removeprefix("$ "), comments=True)
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words.pop(0)
        if words:
            commands.append(words)
    return commands


def make_targets() -> set[str]:
    text = (DOCS.parent / "Makefile").read_text("utf-8")
    return {
        target
        for line in re.findall(r"^([\w .$()-]+):(?!=)", text, re.M)
        for target in line.split()
    }


@pytest.mark.parametrize("doc", SETUP_DOCS)
def test_every_setup_command_exists_after_make(doc: str) -> None:
    """A command in a ``sh`` block is a make target, a prerequisite the docs name,
    a path into .venv/bin, or a .venv/bin command after the doc said to activate
    the venv; code that spawns ``appserver`` or imports what the venv holds also
    comes after that."""
    text = (DOCS.parent / doc).read_text("utf-8")
    activated = ACTIVATE.search(text)
    activated_at = activated.start() if activated else len(text)
    problems = []
    for block in BLOCK.finditer(text):
        language, code = block.group(1), block.group(2)
        after_activation = block.start() > activated_at
        if language in ("python", "ts", "js") and NEEDS_VENV.search(code) and not after_activation:
            problems.append(f"{language} block at {block.start()} needs the venv: say so first")
        if language != "sh":
            continue
        for words in shell_commands(code):
            command = words[0]
            if command == "make":
                assert set(words[1:]) <= make_targets(), (doc, words)
            elif command in (".", "source"):
                assert words[1].endswith(".venv/bin/activate"), (doc, words)
            elif ".venv/bin/" in command:
                name = command.rsplit(".venv/bin/", 1)[1]
                if not (VENV_BIN / name).exists():
                    problems.append(f"{command}: no {name} in the venv")
            elif command not in OUTSIDE:
                if not (VENV_BIN / command).exists():
                    problems.append(f"{command}: not a command the venv or the docs provide")
                elif not after_activation:
                    problems.append(f"{command}: on PATH only once the venv is activated")
    assert not problems, f"{doc}: {problems}"


def test_the_readme_keeps_two_setup_commands() -> None:
    first = BLOCK.search((DOCS.parent / "README.md").read_text("utf-8"))
    assert first is not None
    assert [words[:2] for words in shell_commands(first.group(2))] == [
        ["make", "run"],
        ["make", "test"],
    ]
