"""Keep the server's secrets out of what its tool commands can read about it.

A shell command the agent runs is a child of the server, running as the same
user: it can read ``/proc/$PPID/cmdline`` and ``/proc/$PPID/environ``. Those
show the process's *original* argument and environment memory, which neither
``del os.environ[...]`` nor editing ``sys.argv`` changes. So once the CLI has
read the token, :func:`hide_secrets` overwrites that memory in place:

* the ``--token`` (or ``--api-key``) value on the command line (``--token T``
  or ``--token=T``);
* the value of every secret-looking environment variable
  (``tools.environment.is_secret``: ``APPSERVER_TOKEN``, API keys, ...).

``APPSERVER_TOKEN`` is also removed from ``os.environ`` (the listener has its
copy). Other secrets stay in ``os.environ``, because providers read their API
keys from it, and are handed back to the C library with fresh memory, so
libraries that call ``getenv`` still see them; ``/proc`` does not. Commands
never get them in their environment either (``tools.environment``).

Linux only (``/proc/self/mem``); elsewhere, or if the kernel refuses, the
server logs a warning and carries on. A same-user process allowed to ptrace
the server (``kernel.yama.ptrace_scope = 0``) can still read its memory:
run tools as another user or in a container for isolation against that.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence

from appserver.tools.environment import is_secret

log = logging.getLogger("appserver")

# Field numbers (1-based, man 5 proc) of /proc/self/stat: arg_start .. env_end.
_ARG_START, _ENV_END = 48, 51

# A finder yields (offset, length) spans of a region to blank.
Finder = Callable[[bytes], Iterator[tuple[int, int]]]


def hide_secrets(*values: str | None) -> bool:
    """Blank ``values`` (the token, an API key given as a flag) in this
    process's original argv, and secret variables in its original environment
    memory; returns ``False`` if that was not possible."""
    os.environ.pop("APPSERVER_TOKEN", None)
    kept = {name: value for name, value in os.environ.items() if is_secret(name)}
    try:
        arg_start, arg_end, env_start, env_end = _regions()
        regions: list[tuple[int, int, Finder]] = [
            (arg_start, arg_end, lambda region: _argv_spans(region, values)),
            (env_start, env_end, _environ_spans),
        ]
        with open("/proc/self/mem", "r+b", buffering=0) as memory:
            for start, end, find in regions:
                memory.seek(start)
                region = memory.read(end - start)
                for offset, length in list(find(region)):
                    memory.seek(start + offset)
                    memory.write(b"*" * length)
    except Exception as exc:
        # Never fatal: an unusual kernel or sandbox (no /proc/self/mem, a short
        # stat line) only means the protection is missing, which we say.
        log.warning("could not hide secrets from /proc (%s): tools may be able to read them", exc)
        return False
    finally:
        for name, value in kept.items():
            os.putenv(name, value)  # fresh memory for getenv(); /proc shows the blanked copy
    return True


# The options whose value is a secret, on any of appserver's command lines.
SECRET_FLAGS = ("--token", "--api-key", "--openai-api-key")


def flag_secrets(argv: Sequence[str]) -> list[str]:
    """The values of the secret options in ``argv`` (``--token T`` or
    ``--token=T``), for :func:`hide_secrets` in a process that does not parse
    its own command line (a warm launch's)."""
    found = []
    for index, argument in enumerate(argv):
        name, equals, value = argument.partition("=")
        # argparse takes any unambiguous prefix (``--api-k``) for the option.
        if len(name) <= 2 or not any(flag.startswith(name) for flag in SECRET_FLAGS):
            continue
        if equals:
            found.append(value)
        elif index + 1 < len(argv):
            found.append(argv[index + 1])
    return found


def _regions() -> tuple[int, int, int, int]:
    with open("/proc/self/stat", "rb") as handle:
        stat = handle.read()
    # The command name may contain spaces and ')'; field 3 follows the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    arg_start, arg_end, env_start, env_end = (
        int(fields[number - 3]) for number in range(_ARG_START, _ENV_END + 1)
    )
    return arg_start, arg_end, env_start, env_end


def _entries(region: bytes) -> Iterator[tuple[int, bytes]]:
    """``(offset, entry)`` of each NUL-terminated string in ``region``."""
    offset = 0
    for entry in region.split(b"\0"):
        yield offset, entry
        offset += len(entry) + 1


def _argv_spans(region: bytes, secrets: tuple[str | None, ...]) -> Iterator[tuple[int, int]]:
    """Each secret as an argument of its own (``--token T``) or after ``=``
    in an option (``--token=T``)."""
    for secret in secrets:
        if not secret:
            continue
        value = os.fsencode(secret)
        for offset, entry in _entries(region):
            if entry == value:
                yield offset, len(value)
            elif entry.startswith(b"--") and entry.endswith(b"=" + value):
                yield offset + len(entry) - len(value), len(value)


def _environ_spans(region: bytes) -> Iterator[tuple[int, int]]:
    """The value of every ``NAME=value`` entry whose name looks secret."""
    for offset, entry in _entries(region):
        name, sep, value = entry.partition(b"=")
        if sep and value and is_secret(os.fsdecode(name)):
            yield offset + len(name) + 1, len(value)
