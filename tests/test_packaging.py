"""One install gives the server, the web page and the terminal chat (issue 27):
the appserver wheel carries ``appserver_client`` and both commands, with the
chat's dependencies; the licence and the changelog exist; ``pipx`` is documented."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def requirement_name(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (built,) = out.glob("appserver-*.whl")
    return zipfile.ZipFile(built)


def dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in wheel.namelist() if n.endswith(f".dist-info/{name}")]
    return wheel.read(path).decode()


def test_the_wheel_carries_the_chat_and_both_commands(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert {"appserver/cli.py", "appserver_client/cli.py", "appserver/web/index.html"} <= names
    assert "appserver/migrations/0001_threads.sql" in names
    scripts = dist_info(wheel, "entry_points.txt")
    assert "appserver = appserver.launch:main" in scripts
    assert "appserver-client = appserver_client.cli:main" in scripts


def test_the_wheel_needs_what_the_chat_needs(wheel: zipfile.ZipFile) -> None:
    metadata = dist_info(wheel, "METADATA")
    required = {
        requirement_name(line.removeprefix("Requires-Dist: "))
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    }
    client = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text("utf-8"))
    assert {requirement_name(r) for r in client["project"]["dependencies"]} <= required


def test_the_licence_is_in_the_wheel_and_the_checkout(wheel: zipfile.ZipFile) -> None:
    text = (ROOT / "LICENSE").read_text("utf-8")
    assert text.startswith("MIT License")
    assert "Copyright (c) 2026 appserver contributors" in text
    assert dist_info(wheel, "licenses/LICENSE") == text
    assert "License-Expression: MIT" in dist_info(wheel, "METADATA")


def test_the_changelog_keeps_an_unreleased_section() -> None:
    text = (ROOT / "CHANGELOG.md").read_text("utf-8")
    assert "keepachangelog.com" in text
    assert re.search(r"^## \[Unreleased\]$", text, re.M)


def test_pipx_install_is_documented() -> None:
    for doc in (ROOT / "README.md", ROOT / "docs" / "quickstart.md"):
        assert "pipx install" in doc.read_text("utf-8"), doc
