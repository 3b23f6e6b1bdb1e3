"""The environment tool commands run with: the server's, minus its secrets.

A variable is a secret when its name contains ``KEY``, ``TOKEN``, ``SECRET``,
``PASSWORD`` or ``CREDENTIAL`` (any case) — the same default as Codex's shell
environment policy — which covers ``APPSERVER_TOKEN``, ``OPENAI_API_KEY``,
``ANTHROPIC_AUTH_TOKEN`` and the like. A user who wants a command to see one
(``GITHUB_TOKEN`` for ``gh``, say) passes it on deliberately with
``appserver app-server --tool-env NAME``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


def is_secret(name: str) -> bool:
    """Whether the variable ``name`` looks like it holds a secret."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def tool_environment(
    passed_on: Collection[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``environ`` (default: the server's) without secrets, except those in ``passed_on``."""
    source = os.environ if environ is None else environ
    return {
        name: value for name, value in source.items() if name in passed_on or not is_secret(name)
    }
