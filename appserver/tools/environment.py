"""The environment tool commands run with: the server's, minus its secrets.

A variable is a secret when its name contains ``KEY``, ``TOKEN``, ``SECRET``
(Codex's shell environment policy's default), ``PASSWORD``, ``PASSWD``,
``CREDENTIAL`` or the word ``AUTH``, or ends with ``_PWD``, ``_PASS``, ``_PAT`` or
``_DSN`` (any case): ``APPSERVER_TOKEN``, ``OPENAI_API_KEY``, ``MYSQL_PWD``,
``DOCKER_AUTH_CONFIG``, ``SENTRY_DSN`` and the like; ``SSH_AUTH_SOCK`` (a
socket path git needs) is not. Credentials inside other values (a
``DATABASE_URL`` with a password) cannot be told apart by name. A user who
wants a command to see one (``GITHUB_TOKEN`` for ``gh``, say) passes it on
deliberately with ``appserver app-server --tool-env NAME``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
AUTH_WORD = re.compile(r"(?:^|_)AUTH(?:_|$)")  # DOCKER_AUTH_CONFIG, not GIT_AUTHOR_NAME
SECRET_SUFFIXES = ("_PWD", "_PASS", "_PAT", "_DSN")
# Not secrets though they match: a socket path tools need for git over ssh.
NOT_SECRETS = frozenset({"SSH_AUTH_SOCK"})
# The server's own switches for how it was started, not for what it runs: a
# command (an ``appserver`` the agent runs, say) starts as it would in a shell.
SERVER_ONLY = frozenset({"APPSERVER_KEEP_WARM", "APPSERVER_WARM_SOCKET"})


def is_secret(name: str) -> bool:
    """Whether the variable ``name`` looks like it holds a secret."""
    upper = name.upper()
    if upper in NOT_SECRETS:
        return False
    return (
        any(marker in upper for marker in SECRET_MARKERS)
        or upper.endswith(SECRET_SUFFIXES)
        or AUTH_WORD.search(upper) is not None
    )


def tool_environment(
    passed_on: Collection[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``environ`` (default: the server's) without secrets, except those in
    ``passed_on``, and without the server's own start switches."""
    source = os.environ if environ is None else environ
    return {
        name: value
        for name, value in source.items()
        if (name in passed_on or not is_secret(name)) and name not in SERVER_ONLY
    }
