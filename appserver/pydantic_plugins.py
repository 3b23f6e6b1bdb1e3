"""Skip pydantic's search for plugins when no installed distribution declares one.

The first time pydantic builds a validator it imports its plugin loader, which
imports :mod:`importlib.metadata` (``email``, ``zipfile``, ``csv``: ~15 ms
here) and reads the entry points of every installed distribution (~5 ms for
~75 of them), looking for the ``pydantic`` group. Every start of every door
paid that, though a server's environment almost never has such a plugin.

:func:`install` puts a finder first on ``sys.meta_path``. When pydantic
imports its loader, the finder lists the same places :mod:`importlib.metadata`
would look (the directories on ``sys.path``) and reads each distribution's
``entry_points.txt`` for a ``[pydantic]`` section, in ~1 ms. Only when it can
tell that there is none does it load a stand-in as
``pydantic.plugin._loader`` that answers "no plugins", which is what
pydantic's own loader would answer. Whenever it cannot tell (a zip or
egg on ``sys.path``, another finder of distributions on ``sys.meta_path``, a
file it cannot read) or a plugin is declared, pydantic searches as usual.
"""

from __future__ import annotations

import os
import sys

# Not `typing`: this runs before anything else is imported.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

LOADER_MODULE = "pydantic.plugin._loader"
ENTRY_POINT_GROUP = "pydantic"


def install() -> bool:
    """Have pydantic's plugin loader, when pydantic first imports it, answer
    "no plugins" if no distribution declares one (the question is asked then,
    so a command that never validates, such as ``--help``, never asks it).
    ``False`` if the loader is already imported."""
    if LOADER_MODULE in sys.modules or any(isinstance(each, _Finder) for each in sys.meta_path):
        return False
    sys.meta_path.insert(0, _Finder())
    return True


class _Finder:
    """Finds pydantic's plugin loader once: the stand-in when no plugin is
    declared, else nothing (the import goes on as usual)."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != LOADER_MODULE:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if not no_plugin_declared():
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(LOADER_MODULE, _StandIn())  # type: ignore[arg-type]  # a Loader


def no_plugin_declared(paths: Iterable[str] | None = None) -> bool:
    """Whether it is certain that no distribution on ``paths`` (default
    ``sys.path``) declares an entry point of pydantic's group."""
    if _other_distribution_finders():
        return False
    for entry in sys.path if paths is None else paths:
        if not isinstance(entry, str):
            return False  # a path object some .pth file put there: not ours to read
        root = entry or "."
        if root.lower().endswith(".egg"):
            return False  # an egg keeps its metadata its own way
        try:
            with os.scandir(root) as children:
                names = [child.name for child in children]
        except NotADirectoryError:
            return False  # a zip file: importlib.metadata reads inside it
        except OSError:
            continue  # a missing directory holds nothing
        for name in names:
            if name.lower().endswith((".dist-info", ".egg-info")) and _declares_plugin(
                os.path.join(root, name, "entry_points.txt")
            ):
                return False
    return True


def _declares_plugin(path: str) -> bool:
    """Whether an ``entry_points.txt`` has pydantic's section (or cannot be read)."""
    try:
        with open(path, encoding="utf-8") as entry_points:
            text = entry_points.read()
    except (FileNotFoundError, NotADirectoryError):
        return False  # most distributions have no entry points; an .egg-info may be a file
    except (OSError, ValueError):
        return True  # unreadable: let pydantic look for itself
    # importlib.metadata's sections: a line in brackets, every bracket and space
    # around the name stripped ("[[pydantic]]" names the group too).
    return any(
        line.startswith("[") and line.endswith("]") and line.strip("[] \t") == ENTRY_POINT_GROUP
        for line in (raw.strip() for raw in text.splitlines())
    )


def _other_distribution_finders() -> bool:
    """Whether something besides the standard path finder can list distributions."""
    from importlib.machinery import PathFinder

    return any(
        finder is not PathFinder and hasattr(finder, "find_distributions")
        for finder in sys.meta_path
    )


class _StandIn:
    """Makes the stand-in for pydantic's plugin loader: its answer when none is installed."""

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        module.__doc__ = "pydantic's plugin loader: none are installed."
        module.PYDANTIC_ENTRY_POINT_GROUP = ENTRY_POINT_GROUP  # type: ignore[attr-defined]
        module._plugins = {}  # type: ignore[attr-defined]
        module._loading_plugins = False  # type: ignore[attr-defined]
        module.get_plugins = _no_plugins  # type: ignore[attr-defined]


def _no_plugins() -> tuple[()]:
    """pydantic's ``get_plugins`` when none is installed."""
    return ()
