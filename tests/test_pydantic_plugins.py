"""pydantic's plugin search skipped when no distribution declares a plugin
(appserver/pydantic_plugins.py).

The probes are fresh interpreters: what pydantic does depends on what was
imported before its first validator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from appserver import pydantic_plugins

ROOT = Path(__file__).resolve().parent.parent

# Installs the stand-in as the entry points do, then builds and uses a model.
PROBE = r"""
import importlib.util, json, sys
from appserver import launch
launch._keep_compiled_methods()
import pydantic

class Probe(pydantic.BaseModel):
    name: str
    count: int = 0

value = Probe.model_validate({"name": "x", "count": "3"})
try:
    Probe.model_validate({"count": "many"})
    refused = False
except pydantic.ValidationError:
    refused = True
print(json.dumps({
    "count": value.count,
    "refused": refused,
    "metadata_imported": "importlib.metadata" in sys.modules,
    "stand_in": sys.modules["pydantic.plugin._loader"].__doc__,
    "spec": importlib.util.find_spec("pydantic.plugin._loader").name,
    "attribute": pydantic.plugin._loader.get_plugins() == (),
}))
"""

# A pydantic plugin that says on stderr which schemas it was shown.
PLUGIN = """
import sys

class _Plugin:
    def new_schema_validator(self, schema, schema_type, schema_type_path, *_rest):
        sys.stderr.write(f"plugin saw {schema_type_path.name}\\n")
        return None, None, None

plugin = _Plugin()
"""


def run_probe(extra_path: Path | None = None) -> tuple[dict[str, object], str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (ROOT, extra_path) if p is not None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def declare_plugin(directory: Path) -> Path:
    info = directory / "demo_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\ndemo = demo_plugin:plugin\n")
    (directory / "demo_plugin.py").write_text(PLUGIN)
    return directory


def test_without_a_plugin_pydantic_validates_and_never_imports_the_metadata_reader() -> None:
    result, _ = run_probe()
    assert result["count"] == 3 and result["refused"] is True
    assert result["metadata_imported"] is False
    assert "none are installed" in str(result["stand_in"])
    assert result["spec"] == "pydantic.plugin._loader"
    assert result["attribute"] is True  # the package has it, as any submodule


def test_a_declared_plugin_is_loaded_by_pydantic_as_usual(tmp_path: Path) -> None:
    result, stderr = run_probe(declare_plugin(tmp_path / "site"))
    assert "plugin saw Probe" in stderr
    assert result["count"] == 3 and result["refused"] is True
    assert "none are installed" not in str(result["stand_in"])


def test_the_sections_of_entry_points_are_read_not_their_words(tmp_path: Path) -> None:
    info = tmp_path / "other-1.0.dist-info"
    info.mkdir()
    (info / "entry_points.txt").write_text("[console_scripts]\npydantic = other:main\n")
    assert pydantic_plugins.no_plugin_declared([str(tmp_path)])
    (info / "entry_points.txt").write_text("[console_scripts]\nx = y:z\n\n[ pydantic ]\nd = e:f\n")
    assert not pydantic_plugins.no_plugin_declared([str(tmp_path)])
    (info / "entry_points.txt").write_text("  [[pydantic]]\nd = e:f\n")  # importlib's reading
    assert not pydantic_plugins.no_plugin_declared([str(tmp_path)])


def test_egg_info_entry_points_count_too(tmp_path: Path) -> None:
    info = tmp_path / "Legacy.egg-info"
    info.mkdir()
    (info / "entry_points.txt").write_text("[pydantic]\nd = e:f\n")
    assert not pydantic_plugins.no_plugin_declared([str(tmp_path)])
    (tmp_path / "Single.egg-info").write_text("Name: single\n")  # a file, not a directory
    (info / "entry_points.txt").unlink()
    assert pydantic_plugins.no_plugin_declared([str(tmp_path)])


def test_what_cannot_be_listed_cheaply_leaves_the_search_to_pydantic(tmp_path: Path) -> None:
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("demo-1.0.dist-info/entry_points.txt", "[console_scripts]\nx = y:z\n")
    assert not pydantic_plugins.no_plugin_declared([str(archive)])
    egg = tmp_path / "thing-1.0.egg"
    egg.mkdir()
    assert not pydantic_plugins.no_plugin_declared([str(egg)])
    unreadable = tmp_path / "site" / "odd-1.0.dist-info" / "entry_points.txt"
    unreadable.mkdir(parents=True)  # a directory where the file should be
    assert not pydantic_plugins.no_plugin_declared([str(tmp_path / "site")])
    assert pydantic_plugins.no_plugin_declared([str(tmp_path / "missing"), ""])
    assert not pydantic_plugins.no_plugin_declared([tmp_path])  # type: ignore[list-item]


def test_another_finder_of_distributions_leaves_the_search_to_pydantic(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    class Finder:
        @staticmethod
        def find_spec(*_args: object) -> None:
            return None

        @staticmethod
        def find_distributions(*_args: object) -> list[object]:
            return []

    assert pydantic_plugins.no_plugin_declared([str(tmp_path)])
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder])
    assert not pydantic_plugins.no_plugin_declared([str(tmp_path)])


def test_install_leaves_a_loader_that_is_already_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    import pydantic.plugin._loader as real_loader  # this process's pydantic has built validators

    monkeypatch.setitem(sys.modules, pydantic_plugins.LOADER_MODULE, real_loader)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    assert pydantic_plugins.install() is False
    assert sys.modules[pydantic_plugins.LOADER_MODULE] is real_loader


def test_a_command_that_never_validates_never_searches() -> None:
    probe = (
        "import sys; from appserver import pydantic_plugins as p; p.install(); p.install(); "
        "import argparse; print(sum(type(f).__name__ == '_Finder' for f in sys.meta_path), "
        "'pydantic' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert done.stdout.split() == ["1", "False"], done.stderr
