"""Logging configuration for every command: level, format, quiet libraries.

Logs go to stderr only (stdout carries protocol frames). Two formats:

* ``text`` (default): ``TIME LEVEL LOGGER: message``, for people;
* ``json``: one JSON object per line (``time``, ``level``, ``logger``,
  ``message``, plus the structured fields a call passed with ``extra=``, such
  as ``threadId``, ``turnId``, ``method``, ``durationMs``), for log shippers.

Third-party libraries (:data:`QUIET_LOGGERS`) log at WARNING and above only,
whatever the level: at debug their internals would drown the server's own lines.
See docs/logging.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
LEVEL_VARIABLE = "APPSERVER_LOG_LEVEL"
FORMAT_VARIABLE = "APPSERVER_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Loggers of libraries we use whose debug (and info) output is about their own
# internals, not what the server did: aiosqlite alone wrote 502 of 591 lines
# of a debug session.
QUIET_LOGGERS = (
    "aiosqlite",
    "websockets",
    "asyncio",
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "h11",
    "mcp",
    "openai",
    "anthropic",
)

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
) | {"message", "asctime", "taskName"}


class LogConfigError(ValueError):
    """An unusable level or format (from a flag's default: an environment variable)."""


def add_arguments(parser: argparse.ArgumentParser, default_level: str) -> None:
    """``--log-level`` and ``--log-format``, defaulting to their environment variables.

    A bad variable is not refused here (argparse does not check defaults):
    :func:`configure` says which variable is wrong, in one line.
    """
    parser.add_argument(
        "--log-level",
        default=os.environ.get(LEVEL_VARIABLE, default_level),
        choices=LEVELS,
        help=f"stderr log level (default: {default_level}, or ${LEVEL_VARIABLE})",
    )
    parser.add_argument(
        "--log-format",
        default=os.environ.get(FORMAT_VARIABLE, "text"),
        choices=FORMATS,
        help=(
            "stderr log format: text, or json for one JSON object per line "
            f"(default: text, or ${FORMAT_VARIABLE})"
        ),
    )


def check(level: str, fmt: str) -> None:
    """Raise :class:`LogConfigError` naming the variable and the valid values."""
    if level.lower() not in LEVELS:
        raise LogConfigError(
            f"{LEVEL_VARIABLE}={level} is not a log level; use one of {', '.join(LEVELS)}"
        )
    if fmt.lower() not in FORMATS:
        raise LogConfigError(
            f"{FORMAT_VARIABLE}={fmt} is not a log format; use one of {', '.join(FORMATS)}"
        )


def configure(level: str, fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Send logs at ``level`` and above to ``stream`` (stderr) in ``fmt``.

    Raises :class:`LogConfigError` for an unknown level or format.
    """
    check(level, fmt)
    handler = logging.StreamHandler(stream or sys.stderr)
    formatter: logging.Formatter
    formatter = JsonFormatter() if fmt.lower() == "json" else TextFormatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet = max(logging.WARNING, root.level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(quiet)


# Control characters (C0, DEL, C1): a message that carries one from a peer
# (a client's name, a path) must not break its line or drive the terminal.
_CONTROL = "[\x00-\x1f\x7f-\x9f]"


def _escaped(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, one line per message: control characters in the
    message (a newline, a terminal escape sequence a client put in its name)
    are written escaped (``\\n``, ``\\x1b``). A traceback still follows on
    its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        if not record.message.isprintable():  # rare: no pattern compiled before
            escaped = re.sub(_CONTROL, _escaped, record.message)
            if escaped != record.message:
                record = logging.makeLogRecord(record.__dict__)
                record.message = escaped
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(
            (key, value)
            for key, value in vars(record).items()
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_")
        )
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: a field that is no JSON value still leaves a line, never an error.
        return json.dumps(entry, ensure_ascii=False, default=str)
