"""Skip pydantic's search for plugins when no installed distribution declares one.

The first time pydantic builds a validator it imports its plugin loader, which
imports :mod:`importlib.metadata` (``email``, ``zipfile``, ``csv``: ~15 ms
here) and reads the entry points of every installed distribution (~5 ms for
~75 of them), looking for the ``pydantic`` group. Every start of every door
paid that, though a server's environment almost never has such a plugin.

:func:`install` lists the same places :mod:`importlib.metadata` would look
(the directories on ``sys.path``) and reads each distribution's
``entry_points.txt`` for a ``[pydantic]`` section, in ~1 ms. Only when it can
tell that there is none does it put a loader in
``sys.modules["pydantic.plugin._loader"]`` that answers "no plugins", which is
what pydantic's own loader would answer. Whenever it cannot tell (a zip or
egg on ``sys.path``, another finder of distributions on ``sys.meta_path``, a
file it cannot read) or a plugin is declared, pydantic searches as usual.
"""

from __future__ import annotations

import os
import sys

# Not `typing`: this runs before anything else is imported.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import ModuleType

LOADER_MODULE = "pydantic.plugin._loader"
ENTRY_POINT_GROUP = "pydantic"


def install() -> bool:
    """Answer "no plugins" for pydantic if no distribution declares one;
    returns whether it did. Call it before pydantic builds its first validator."""
    if LOADER_MODULE in sys.modules or not no_plugin_declared():
        return False
    sys.modules[LOADER_MODULE] = _no_plugins_loader()
    return True


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


def _no_plugins_loader() -> ModuleType:
    """A stand-in for pydantic's plugin loader with its answer when none is installed."""
    import types
    from importlib.machinery import ModuleSpec

    loader = types.ModuleType(LOADER_MODULE, "pydantic's plugin loader: none are installed.")
    loader.__spec__ = ModuleSpec(LOADER_MODULE, None)
    loader.PYDANTIC_ENTRY_POINT_GROUP = ENTRY_POINT_GROUP  # type: ignore[attr-defined]
    loader._plugins = {}  # type: ignore[attr-defined]
    loader._loading_plugins = False  # type: ignore[attr-defined]
    loader.get_plugins = _no_plugins  # type: ignore[attr-defined]
    return loader


def _no_plugins() -> tuple[()]:
    """pydantic's ``get_plugins`` when none is installed."""
    return ()
