"""Running a stdio door as a real process and seeing what it had imported when it
wrote its first answer early (appserver/transport/early.py).

The door runs as ``python -c PROBE ARGS``: PROBE wraps
``appserver.transport.early.answer_first_line`` (every door's early answer goes
through it), and once that has written an answer, writes the names of the
modules loaded at that moment to stderr as one ``EARLY-MODULES [...]`` line;
then the door goes on as usual (``appserver.cli.main``, or ``codex_main`` for
``appserver-codex``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.servers import child_env

PROBE = """\
import json, sys
from appserver.transport import early
answer_first_line = early.answer_first_line
def probe(*args, **kwargs):
    answered = answer_first_line(*args, **kwargs)
    if answered.answer is not None:
        sys.stderr.write("EARLY-MODULES " + json.dumps(sorted(sys.modules)) + "\\n")
        sys.stderr.flush()
    return answered
early.answer_first_line = probe
from appserver import cli
sys.exit(getattr(cli, sys.argv.pop(1))())
"""

# What no door may have loaded when it answers early: the validation library, the
# wire models, the JSON-RPC core, the runtime, the database driver and schema,
# the providers, the event loop, the ACP package and the network libraries.
HEAVY = (
    "pydantic",
    "pydantic_core",
    "anyio",
    "asyncio",
    "aiosqlite",
    "acp",
    "websockets",
    "httpx2",
    "appserver.protocol",
    "appserver.rpc",
    "appserver.runtime",
    "appserver.providers",
    "appserver.server",
    "appserver.hosting",
)
# Modules of those packages that are the standard library only and needed first
# (appserver/early_start.py): the workspace lock and its database's creation ahead
# (a thread), the workspace config (the capabilities depend on it), and the user's
# settings and the provider settings' resolution (a bad one must fail the start
# before anything is answered), the bounded JSON decoder every door reads with,
# and the protocol's timestamps (the Codeswarm router's events carry their send time).
LIGHT = {
    "appserver.protocol",
    "appserver.protocol.decoding",
    "appserver.protocol.ids",
    "appserver.storage",
    "appserver.storage.lock",
    "appserver.storage.preparation",
    "appserver.storage.sqlite_setup",
    "appserver.storage.user_settings",
    "appserver.storage.workspace_config",
    "appserver.providers",
}


@dataclass
class Door:
    """What the door wrote to stdout and stderr, and its modules at the early answer."""

    stdout: list[str]
    stderr: str
    modules: list[str] | None  # None: it answered nothing early


def run_door(entry: str, argv: list[str], lines: list[str], cwd: Path) -> Door:
    """Run ``appserver.cli.<entry>`` (``main`` or ``codex_main``) with ``argv``,
    write ``lines`` and close its input; what it answered."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, entry, *argv],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=cwd,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    modules = None
    for line in done.stderr.splitlines():
        if line.startswith("EARLY-MODULES "):
            modules = json.loads(line.removeprefix("EARLY-MODULES "))
    return Door(done.stdout.splitlines(), done.stderr, modules)


def heavy_modules(modules: list[str]) -> list[str]:
    """The modules of ``modules`` that an early answer must come without."""
    heavy = ("appserver.storage", *HEAVY)
    return [
        name
        for name in modules
        if name not in LIGHT and any(name == h or name.startswith(h + ".") for h in heavy)
    ]
