"""The search tools (tools/search.py): grep and find_files, with ripgrep and with the Python walk.

Every test runs with both engines and expects the same output.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from appserver.tools.base import ToolContext, ToolError, ToolOutcome
from appserver.tools.registry import default_tools
from appserver.tools.search import MAX_MATCHES, FindFilesTool, GrepTool
from appserver.tools.search_rg import ENGINE_VARIABLE, find_rg

ENGINES = ["rg", "python"]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    if request.param == "rg" and find_rg("rg") is None:
        pytest.fail("no rg binary: the ripgrep wheel is a dependency (pyproject.toml)")
    return str(request.param)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    files = {
        ".gitignore": "build/\n*.log\n",
        "src/app.py": "import os\n\ndef main():\n    return os.getcwd()\n\nmain()\n",
        "src/util.py": "def helper():\n    return 'Main'\n",
        "src/web/page.ts": "export const main = 1;\n",
        "src/.ignore": "generated.py\n",
        "src/generated.py": "def main(): pass\n",
        "build/out.py": "def main(): pass\n",
        "debug.log": "main\n",
        ".hidden/secret.py": "def main(): pass\n",
        ".git/config": "main\n",
        ".craft/config.json": '{"main": 1}\n',
        "notes.md": "nothing here\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "src/blob.bin").write_bytes(b"main\0\x01\x02")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.py").write_text("def main(): pass\n")
    os.symlink(outside, root / "src/linked")
    os.symlink(outside / "leak.py", root / "src/leak.py")
    # Distinct modification times: newest first is notes.md, then util.py, then app.py.
    for path in root.rglob("*"):
        os.utime(path, (1_600_000_000, 1_600_000_000), follow_symlinks=False)
    for age, name in enumerate(["notes.md", "src/util.py", "src/app.py", "src/web/page.ts"]):
        stamp = 1_700_000_000 - age * 100
        os.utime(root / name, (stamp, stamp))
    return root


def _ctx(root: Path) -> ToolContext:
    return ToolContext(workspace=root, thread_id="t", turn_id="u", call_id="c")


def _run(tool: GrepTool | FindFilesTool, root: Path, **arguments: object) -> ToolOutcome:
    async def go() -> ToolOutcome:
        plan = tool.plan(dict(arguments), _ctx(root))
        assert plan.approval is None  # never asks
        return await tool.run(plan, _ctx(root))

    return anyio.run(go)


def test_grep_groups_by_file_and_respects_ignores(workspace: Path, engine: str) -> None:
    outcome = _run(GrepTool(engine=engine), workspace, pattern=r"def main|main\(\)")
    assert outcome.success
    # Not: build/ and *.log (.gitignore), src/generated.py (.ignore), hidden files, .git,
    # .craft, the binary file, the symlinks out of the workspace.
    assert outcome.output == "src/app.py\n3:def main():\n--\n6:main()"
    assert outcome.details == {"engine": engine, "matches": 2, "files": 1, "truncated": False}


def test_grep_context_ignore_case_and_glob(workspace: Path, engine: str) -> None:
    tool = GrepTool(engine=engine)
    outcome = _run(tool, workspace, pattern="main", ignore_case=True, glob="*.py", context=1)
    assert outcome.output == (
        "src/app.py\n2-\n3:def main():\n4-    return os.getcwd()\n5-\n6:main()\n\n"
        "src/util.py\n1-def helper():\n2:    return 'Main'"
    )
    outcome = _run(tool, workspace, pattern="getcwd", before=0, after=2, path="src")
    assert outcome.output == "src/app.py\n4:    return os.getcwd()\n5-\n6-main()"
    # A glob with a slash is relative to the workspace root.
    outcome = _run(tool, workspace, pattern="main", glob="src/web/*.ts")
    assert outcome.output == "src/web/page.ts\n1:export const main = 1;"


def test_grep_context_separator(workspace: Path, engine: str) -> None:
    outcome = _run(GrepTool(engine=engine), workspace, pattern="^main|^import", path="src/app.py")
    assert outcome.output == "src/app.py\n1:import os\n--\n6:main()"


def test_grep_hidden_when_asked_but_never_git_or_craft(workspace: Path, engine: str) -> None:
    outcome = _run(GrepTool(engine=engine), workspace, pattern="main", hidden=True)
    assert ".hidden/secret.py\n1:def main(): pass" in outcome.output
    assert ".git" not in outcome.output and ".craft" not in outcome.output


def test_grep_caps_with_a_truncated_marker(workspace: Path, engine: str) -> None:
    (workspace / "many.txt").write_text("hit\n" * (MAX_MATCHES + 50))
    outcome = _run(GrepTool(engine=engine), workspace, pattern="hit")
    assert outcome.output.endswith(
        f"[truncated: showing the first {MAX_MATCHES} matches; more were not shown]"
    )
    assert outcome.output.count("\n") == MAX_MATCHES + 1
    assert outcome.details["truncated"] is True
    outcome = _run(GrepTool(engine=engine, max_bytes=1024), workspace, pattern="hit")
    assert outcome.output.endswith("[truncated: output cut at 1 KiB; more matches were not shown]")
    assert len(outcome.output.encode()) < 1024 + 100
    outcome = _run(GrepTool(engine=engine), workspace, pattern="hit", max_matches=3)
    assert outcome.output.startswith("many.txt\n1:hit\n2:hit\n3:hit\n[truncated:")


def test_grep_no_match_and_bad_pattern(workspace: Path, engine: str) -> None:
    outcome = _run(GrepTool(engine=engine), workspace, pattern="zzz_nothing")
    assert outcome.success and outcome.output == "No matches."
    outcome = _run(GrepTool(engine=engine), workspace, pattern="(unclosed")
    assert not outcome.success and outcome.output.startswith("Error:")


def test_a_pattern_is_never_a_flag(workspace: Path, engine: str) -> None:
    (workspace / "flags.txt").write_text("--files\n-v\n")
    outcome = _run(GrepTool(engine=engine), workspace, pattern="--files")
    assert outcome.output == "flags.txt\n1:--files"


def test_paths_outside_are_refused_not_asked(workspace: Path, engine: str) -> None:
    for tool in (GrepTool(engine=engine), FindFilesTool(engine=engine)):
        for path in ("..", "/etc", "src/linked", ".craft"):
            with pytest.raises(ToolError, match="outside the workspace"):
                tool.plan({"pattern": "x", "path": path}, _ctx(workspace))
        with pytest.raises(ToolError):
            tool.plan({"pattern": "x", "bogus": 1}, _ctx(workspace))


def test_lines_are_counted_as_ripgrep_counts_them(workspace: Path, engine: str) -> None:
    """Only \\n ends a line: a form feed, a lone CR or U+2028 does not."""
    (workspace / "odd.txt").write_bytes("one\x0ctwo\nthree\rfour\u2028five\nmain\n".encode())
    outcome = _run(GrepTool(engine=engine), workspace, pattern="^main", path="odd.txt")
    assert outcome.output == "odd.txt\n3:main"


def test_a_path_that_is_no_file_or_directory_is_refused(workspace: Path, engine: str) -> None:
    os.mkfifo(workspace / "pipe")  # reading it would wait for a writer
    for tool in (GrepTool(engine=engine), FindFilesTool(engine=engine)):
        with pytest.raises(ToolError, match="neither a regular file nor a directory"):
            tool.plan({"pattern": "x", "path": "pipe"}, _ctx(workspace))


def test_find_files_newest_first(workspace: Path, engine: str) -> None:
    tool = FindFilesTool(engine=engine)
    outcome = _run(tool, workspace, pattern="*.py")
    assert outcome.output == "src/util.py\nsrc/app.py"
    outcome = _run(tool, workspace, pattern="*")
    assert outcome.output.splitlines()[:4] == [
        "notes.md",
        "src/util.py",
        "src/app.py",
        "src/web/page.ts",
    ]
    assert "debug.log" not in outcome.output and "build/out.py" not in outcome.output
    outcome = _run(tool, workspace, pattern="src/**/*.ts", path="src")
    assert outcome.output == "src/web/page.ts"
    outcome = _run(tool, workspace, pattern="*.py", hidden=True)
    assert ".hidden/secret.py" in outcome.output and ".git" not in outcome.output
    outcome = _run(tool, workspace, pattern="*.nothing")
    assert outcome.output == "No files found."


def test_find_files_caps(workspace: Path, engine: str) -> None:
    outcome = _run(FindFilesTool(engine=engine), workspace, pattern="*", max_results=2)
    assert outcome.output.splitlines()[:2] == ["notes.md", "src/util.py"]
    assert outcome.output.splitlines()[2].startswith("[truncated: showing the newest 2 of ")
    assert outcome.details["truncated"] is True


def test_the_environment_forces_the_python_engine(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENGINE_VARIABLE, "python")
    assert _run(GrepTool(), workspace, pattern="getcwd").details["engine"] == "python"
    monkeypatch.delenv(ENGINE_VARIABLE)
    assert _run(GrepTool(), workspace, pattern="getcwd").details["engine"] == "rg"


def test_registered_after_list_dir() -> None:
    names = [tool.name for tool in default_tools()]
    assert names[names.index("list_dir") + 1 : names.index("list_dir") + 3] == [
        "grep",
        "find_files",
    ]
