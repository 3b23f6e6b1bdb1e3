"""The entry points of the ``appserver`` and ``appserver-codex`` commands.

Before anything but the standard library is imported, a command that a warm
process serves is handed to it: a Zene one-shot (``appserver host ...
--single-request``) whose command has one listening (``--keep-warm``,
:mod:`appserver.faces.zene.warm`), and, with ``APPSERVER_KEEP_WARM`` set, any
other command (:mod:`appserver.warm_launch`). Everything else runs here:
:func:`appserver.cli.main` and :func:`appserver.cli.codex_main`.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Run the ``appserver`` command; returns the process exit status."""
    from appserver import quick_exit

    return quick_exit.run(_run)


def codex_main() -> int:
    """Run the ``appserver-codex`` command (Codex's command line); returns the
    process exit status."""
    from appserver import quick_exit

    return quick_exit.run(_run_codex)


def _run() -> int:
    from appserver import startup

    startup.note_launch()
    argv = sys.argv[1:]
    if argv[:1] == ["host"]:
        from appserver.faces.zene import warm

        code = warm.forward(argv)
        if code is not None:
            return code
        warm.remember_launch(argv)
    code = _warm_start("appserver", argv)
    if code is not None:
        return code
    _keep_compiled_methods()
    from appserver.cli import main as cli_main

    return cli_main()


def _run_codex() -> int:
    code = _warm_start("appserver-codex", sys.argv[1:])
    if code is not None:
        return code
    _keep_compiled_methods()
    from appserver.cli import codex_main as cli_codex_main

    return cli_codex_main()


def _keep_compiled_methods() -> None:
    """Dataclasses' generated methods come compiled from the last run
    (:mod:`appserver.dataclass_cache`); first, before anything makes one. And
    pydantic does not search the installed distributions for plugins when none
    declares one (:mod:`appserver.pydantic_plugins`)."""
    from appserver import dataclass_cache, pydantic_plugins

    dataclass_cache.install()
    pydantic_plugins.install()


def _warm_start(entry: str, argv: list[str]) -> int | None:
    """The exit status of this command run by a warm parent, or ``None`` (run it here)."""
    import os

    if not os.environ.get("APPSERVER_KEEP_WARM") or os.environ.get("APPSERVER_WARM_SOCKET"):
        # Off (not even the launcher's module is loaded), or this is a Zene
        # warm process being started, which serves on its own.
        return None
    from appserver import warm_launch

    return warm_launch.launch(entry, argv)
