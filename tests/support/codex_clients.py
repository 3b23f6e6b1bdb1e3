"""Codex clients and Codex's own schema for the Codex face's tests, kept outside
the repository in the user's cache (``$XDG_CACHE_HOME/appserver``, else
``~/.cache/appserver``), made once and reused.

* ``codex-app-server-sdk`` (PyPI) needs Python 3.12 or later and the project runs
  on 3.11, so it gets its own virtual environment made with the first Python >= 3.12
  found (``$APPSERVER_PYTHON312``, ``python3.12``/``python3.13`` on PATH, pyenv's
  versions); the tests run a small client script in it.
* Codex 0.169's JSON Schema comes from the ``@openai/codex`` npm package pinned in
  bench/peer/package-lock.json (``codex app-server generate-json-schema --out DIR``),
  installed as ``make bench-peer`` installs it (``npm ci``), into the cache.

Each returns ``None`` with the reason in :data:`MISSING` when it cannot be made,
so a test can skip saying why.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

APP_SERVER_SDK = "codex-app-server-sdk==0.4.1"
PINNED = Path(__file__).resolve().parents[2] / "bench" / "peer"
MISSING: dict[str, str] = {}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    path = Path(base) / "appserver"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _python312() -> str | None:
    candidates = [os.environ.get("APPSERVER_PYTHON312", "")]
    candidates += [shutil.which(name) or "" for name in ("python3.12", "python3.13")]
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(f"{pyenv}/versions/3.1[2-9]*/bin/python3"))
    for candidate in candidates:
        if not candidate:
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info >= (3, 12))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


def app_server_sdk_python() -> str | None:
    """A Python with ``codex-app-server-sdk`` installed, or ``None`` (see :data:`MISSING`)."""
    venv = cache_dir() / APP_SERVER_SDK.replace("==", "-")
    python = venv / "bin" / "python"
    if python.exists():
        return str(python)
    base = _python312()
    if base is None:
        MISSING["app-server-sdk"] = f"{APP_SERVER_SDK} needs Python >= 3.12 and none was found"
        return None
    steps = [
        [base, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", APP_SERVER_SDK],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            MISSING["app-server-sdk"] = f"cannot install {APP_SERVER_SDK}: {done.stderr[-500:]}"
            return None
    return str(python)


def codex_schema() -> Path | None:
    """The directory of Codex 0.169's generated JSON Schema, or ``None``."""
    schema = cache_dir() / "codex-0.169.0-schema"
    bundle = schema / "codex_app_server_protocol.v2.schemas.json"
    if bundle.exists():
        return schema
    npm = shutil.which("npm")
    if npm is None:
        MISSING["schema"] = "npm is not installed: cannot get @openai/codex 0.169.0"
        return None
    package = cache_dir() / "codex-0.169.0"
    package.mkdir(exist_ok=True)
    binary = _codex_binary(package)
    if binary is None:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(PINNED / name, package / name)
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=package,
            capture_output=True,
            text=True,
            check=False,
        )
        binary = _codex_binary(package)
        if done.returncode != 0 or binary is None:
            MISSING["schema"] = f"cannot install @openai/codex 0.169.0: {done.stderr[-500:]}"
            return None
    partial = schema.with_suffix(".partial")
    shutil.rmtree(partial, ignore_errors=True)
    done = subprocess.run(
        [str(binary), "app-server", "generate-json-schema", "--out", str(partial)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        MISSING["schema"] = f"codex generate-json-schema failed: {done.stderr[-500:]}"
        return None
    partial.rename(schema)
    return schema


def _codex_binary(package: Path) -> Path | None:
    """The native binary of the npm package (as bench/peer.py finds it)."""
    for candidate in sorted(package.glob("node_modules/@openai/codex-*/vendor/*/bin/codex")):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


if __name__ == "__main__":  # make the caches by hand: python -m tests.support.codex_clients
    sys.stderr.write(f"{app_server_sdk_python() or MISSING} {codex_schema() or MISSING}\n")
