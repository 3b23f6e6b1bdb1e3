"""Why a use case refused: typed, protocol-free. Each front door maps these to
its own errors (the JSON-RPC front door to DotCraft's ``-320xx`` codes)."""

from __future__ import annotations


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
