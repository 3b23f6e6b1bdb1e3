"""The ``appserver`` command's entry point.

A Zene one-shot (``appserver host ... --single-request``) whose command has a
warm process listening (``--keep-warm``) is handed to it from here, before
anything but the standard library is imported
(:mod:`appserver.faces.zene.warm`). Everything else is :func:`appserver.cli.main`.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Run the ``appserver`` command; returns the process exit status."""
    argv = sys.argv[1:]
    if argv[:1] == ["host"]:
        from appserver.faces.zene import warm

        code = warm.forward(argv)
        if code is not None:
            return code
        warm.remember_launch(argv)
    from appserver.cli import main as cli_main

    return cli_main()
