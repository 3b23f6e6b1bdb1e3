"""The recorder the Codex face's SDK tests run the face behind: a ``codex_bin``
that starts ``appserver-codex`` through tests/support/codex_tee.py, so every
frame of a session can be checked against Codex 0.169's own JSON Schema."""

from __future__ import annotations

import gc
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai_codex import CodexConfig

from tests.support.codex_clients import codex_schema
from tests.support.codex_frames import CodexSchema, check_frames
from tests.support.servers import child_env

TEE = Path(__file__).resolve().parents[2] / "support" / "codex_tee.py"


@pytest.fixture(autouse=True)
def collect_the_sdks_pipes() -> Iterator[None]:
    """The SDK's close() leaves its subprocess pipes to the garbage collector
    (openai-codex 0.163.0): collect them here, in the test that made them (whose
    module ignores the warning), not in whichever test the worker runs next."""
    yield
    gc.collect()


def codex_bin() -> str:
    """The installed ``appserver-codex`` console script next to this interpreter."""
    path = Path(sys.executable).parent / "appserver-codex"
    assert path.exists(), "the appserver-codex console script is not installed (make)"
    return str(path)


@pytest.fixture
def frames(tmp_path: Path) -> Path:
    """Where the recorder writes the face's frames (``.in``: the client's)."""
    return tmp_path / "frames.jsonl"


@pytest.fixture
def teed_bin(tmp_path: Path, frames: Path) -> str:
    """A ``codex_bin`` that is ``appserver-codex`` behind the recorder: the SDK
    builds its command line (``-c`` pairs, ``app-server --listen``) as for Codex."""
    script = tmp_path / "appserver-codex-teed"
    script.write_text(
        f'#!/bin/sh\nCODEX_FRAMES_FILE="{frames}" exec "{sys.executable}" "{TEE}" '
        f'"{codex_bin()}" "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.fixture(scope="session")
def optional_schema() -> CodexSchema | None:
    """Codex 0.169's schema, or ``None`` where it cannot be made (no npm)."""
    root = codex_schema()
    return CodexSchema(root) if root is not None else None


@pytest.fixture
def codex_cwd(workspace: Path) -> Path:
    """Where the SDK's sessions run (a module may give another directory)."""
    return workspace


@pytest.fixture
def config(codex_cwd: Path, teed_bin: str) -> CodexConfig:
    """OpenAI's SDK configured for ``appserver-codex`` (offline model) behind the recorder."""
    env = child_env()
    env["APPSERVER_PROVIDER"] = "offline"
    return CodexConfig(codex_bin=teed_bin, cwd=str(codex_cwd), env=env)


@pytest.fixture
def every_frame_checked(frames: Path, optional_schema: CodexSchema | None) -> Iterator[None]:
    """Every frame of the test's sessions, checked against Codex 0.169's own schema
    (where it can be made: it needs npm)."""
    yield
    assert frames.stat().st_size > 0  # the recorder was in the way
    if optional_schema is not None:
        assert check_frames(optional_schema, frames) == []
