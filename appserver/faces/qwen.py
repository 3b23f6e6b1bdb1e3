"""Placeholder: being written."""

from __future__ import annotations

import argparse
from typing import IO, Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This face's own flags (the shared ones are added by the CLI)."""


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Serve the protocol on ``stdin``/``stdout``; returns the exit code."""
    raise NotImplementedError
