"""Why a use case refused: typed, protocol-free. Each front door maps these to
its own errors (the JSON-RPC front door to DotCraft's ``-320xx`` codes)."""

from __future__ import annotations

from typing import Any


class Refusal(Exception):
    """A use case refused the request; ``message`` says why in one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(Refusal):
    """The request itself is wrong (a bad field, an unknown cursor, ...)."""


class ThreadNotFound(Refusal):
    def __init__(self, thread_id: str) -> None:
        super().__init__(f"Thread not found: {thread_id}")


class ThreadNotActive(Refusal):
    def __init__(self, thread_id: str) -> None:
        super().__init__(f"Thread is not active: {thread_id}")


class TurnInProgress(Refusal):
    def __init__(self, thread_id: str) -> None:
        super().__init__(f"A turn is already in progress on thread: {thread_id}")


class TurnNotFound(Refusal):
    def __init__(self, turn_id: str) -> None:
        super().__init__(f"Turn not found: {turn_id}")


class TurnNotRunning(Refusal):
    def __init__(self, turn_id: str) -> None:
        super().__init__(f"Turn is not running: {turn_id}")


def reject_lone_surrogates(*values: Any, what: str = "input") -> None:
    """:class:`InvalidInput` when a string in ``values`` (walking lists, dicts
    and pydantic models) holds a lone surrogate: a JSON ``"\\ud800"`` escape
    any front door may receive, which can be neither stored nor sent as UTF-8.
    The JSON-RPC core refuses such params itself; other protocols rely on this."""
    for value in values:
        if _has_lone_surrogate(value):
            raise InvalidInput(f"{what} contains a lone UTF-16 surrogate, which is not text")


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_lone_surrogate(item) for item in value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _has_lone_surrogate(dump())
    content = getattr(value, "content", None)  # a provider Message
    return isinstance(content, str) and _has_lone_surrogate(content)
