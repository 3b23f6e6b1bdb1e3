"""The `workspace` method family (not implemented yet: nothing is registered)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appserver.server import AppServer


def install(server: AppServer) -> None:
    """Register this family's handlers and background work on ``server``."""
