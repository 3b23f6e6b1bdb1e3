"""The layer contracts in pyproject.toml hold, and they do catch a runtime
module that imports the JSON-RPC core."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(source_root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=source_root,
        env={"PYTHONPATH": str(source_root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_runtime_module_importing_rpc_breaks_them(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "appserver", tmp_path / "appserver")
    bus = tmp_path / "appserver" / "runtime" / "bus.py"
    bus.write_text(bus.read_text() + "\nfrom appserver.rpc import framing  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "The runtime speaks no wire protocol" in result.stdout
    assert "appserver.runtime.bus -> appserver.rpc.framing" in result.stdout
