"""Argument checks shared by the built-in tools.

Models produce the arguments, so every message here is written for a model
to read and correct its call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from appserver.tools.base import ToolError


def check_keys(arguments: dict[str, Any], allowed: Iterable[str]) -> None:
    """Refuse arguments the schema does not declare (a typo would be silently ignored)."""
    allowed = set(allowed)
    unknown = sorted(set(arguments) - allowed)
    if unknown:
        raise ToolError(
            f"unknown argument(s): {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )


def get_str(
    arguments: dict[str, Any], key: str, *, required: bool = True, allow_empty: bool = True
) -> str | None:
    """A string argument; ``None`` when optional and absent (or null)."""
    value = arguments.get(key)
    if value is None:
        if required:
            raise ToolError(f"missing required argument: {key}")
        return None
    if not isinstance(value, str):
        raise ToolError(f"argument {key} must be a string")
    if not allow_empty and not value.strip():
        raise ToolError(f"argument {key} must not be empty")
    return value


def require_str(arguments: dict[str, Any], key: str, *, allow_empty: bool = True) -> str:
    """A required string argument."""
    value = get_str(arguments, key, required=True, allow_empty=allow_empty)
    assert value is not None  # get_str raised otherwise
    return value


def get_int(arguments: dict[str, Any], key: str, *, minimum: int) -> int | None:
    """An optional integer argument of at least ``minimum``."""
    value = arguments.get(key)
    if value is None:
        return None
    # bool is an int subclass; a model sending true means something else.
    # Integral floats (10.0) are accepted: some models emit every number so.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"argument {key} must be an integer")
    if value < minimum:
        raise ToolError(f"argument {key} must be at least {minimum}")
    return value


def get_bool(arguments: dict[str, Any], key: str, *, default: bool = False) -> bool:
    """An optional boolean argument."""
    value = arguments.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ToolError(f"argument {key} must be a boolean")
    return value
