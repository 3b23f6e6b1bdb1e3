"""The Node client installs from a checkout into another project, as
docs/clients.md says: ``npm install ../appserver/clients/node`` (a folder: npm
links it and runs its ``prepare``, which builds dist/) and from ``npm pack``'s
tarball (issue 27: both failed with ERR_MODULE_NOT_FOUND, dist/ being unbuilt).

The client is copied from the files git tracks, as a fresh clone has them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parents[2] / "clients" / "node"
IMPORT = (
    "const client = await import('appserver-client');"
    "if (typeof client.AppServerClient !== 'function') process.exit(1);"
    "console.log('AppServerClient is a class');"
)

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None, reason="needs node and npm"
)


def npm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["npm", *args, "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def imports(project: Path) -> bool:
    """Whether ``import('appserver-client')`` works in ``project`` (and gives the client)."""
    done = subprocess.run(
        ["node", "--input-type=module", "-e", IMPORT],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout == "AppServerClient is a class\n"


def fresh_clone(destination: Path) -> Path:
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "."],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in tracked:
        if (NODE_DIR / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(NODE_DIR / name, destination / name)
    return destination


def new_project(path: Path) -> Path:
    path.mkdir()
    (path / "package.json").write_text('{"name": "consumer", "version": "1.0.0"}\n')
    return path


def test_a_folder_install_and_a_packed_tarball_import(tmp_path: Path) -> None:
    client = fresh_clone(tmp_path / "appserver" / "clients" / "node")
    assert not (client / "dist").exists()

    linked = new_project(tmp_path / "linked")
    npm("install", "../appserver/clients/node", cwd=linked)
    assert imports(linked)

    packed = npm("pack", "--pack-destination", str(tmp_path), cwd=client)
    tarball = tmp_path / packed.stdout.strip().splitlines()[-1]
    from_tarball = new_project(tmp_path / "from-tarball")
    npm("install", str(tarball), cwd=from_tarball)
    assert imports(from_tarball)
