"""JSON-RPC error codes and the one exception type that reaches the wire.

Standard codes come from JSON-RPC 2.0; the ``-320xx`` band is DotCraft's
application range, kept number-for-number so DotCraft clients understand us.
"""

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

SERVER_OVERLOADED = -32001
NOT_INITIALIZED = -32002
ALREADY_INITIALIZED = -32003
THREAD_NOT_FOUND = -32010
THREAD_NOT_ACTIVE = -32011
TURN_IN_PROGRESS = -32012
TURN_NOT_FOUND = -32013
TURN_NOT_RUNNING = -32014
APPROVAL_TIMEOUT = -32020
CHANNEL_REJECTED = -32030
CRON_JOB_NOT_FOUND = -32031
SKILL_NOT_FOUND = -32040
TASK_NOT_FOUND = -32051
TASK_INVALID_STATUS = -32052
TASK_ALREADY_EXISTS = -32054
THREAD_BINDING_INVALID = -32055  # DotCraft's spec names it; its code never sends it
COMMAND_NOT_FOUND = -32060
COMMAND_PERMISSION_DENIED = -32061
COMMAND_SERVICE_UNAVAILABLE = -32062
MCP_SERVER_NOT_FOUND = -32070
MCP_SERVER_VALIDATION_FAILED = -32072
MCP_SERVER_TEST_FAILED = -32073
MCP_SERVER_NAME_CONFLICT = -32074
MCP_SERVER_READ_ONLY = -32075
EXTERNAL_CHANNEL_NOT_FOUND = -32080
EXTERNAL_CHANNEL_VALIDATION_FAILED = -32081
EXTERNAL_CHANNEL_NAME_CONFLICT = -32082
SUBAGENT_PROFILE_NOT_FOUND = -32083
SUBAGENT_PROFILE_VALIDATION_FAILED = -32084
SUBAGENT_PROFILE_PROTECTED = -32085
# Ours (DotCraft has no code for these; its terminal service throws).
TERMINAL_NOT_FOUND = -32090
TERMINAL_NOT_WRITABLE = -32091


class RpcError(Exception):
    """An error answered to the peer as a JSON-RPC error object.

    ``data`` is sent as-is; by convention it is ``{"detail": "..."}``.
    """

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member for this error."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    def __repr__(self) -> str:
        return f"RpcError({self.code}, {self.message!r}, {self.data!r})"


def invalid_params(detail: str) -> RpcError:
    """``-32602`` with a short human-readable ``data.detail``."""
    return RpcError(INVALID_PARAMS, "Invalid params", {"detail": detail})


def invalid_request(detail: str) -> RpcError:
    """``-32600`` with a short ``data.detail``."""
    return RpcError(INVALID_REQUEST, "Invalid request", {"detail": detail})


def thread_not_found(thread_id: str) -> RpcError:
    return RpcError(THREAD_NOT_FOUND, f"Thread not found: {thread_id}")


def thread_not_active(thread_id: str) -> RpcError:
    return RpcError(THREAD_NOT_ACTIVE, f"Thread is not active: {thread_id}")


def turn_in_progress(thread_id: str) -> RpcError:
    return RpcError(TURN_IN_PROGRESS, f"A turn is already in progress on thread: {thread_id}")


def subagent_profile_not_found(name: str) -> RpcError:
    """``-32083``: no such profile (DotCraft's message)."""
    return RpcError(SUBAGENT_PROFILE_NOT_FOUND, f"SubAgent profile not found: {name}")


def subagent_profile_validation_failed(detail: str) -> RpcError:
    """``-32084``: the definition has validation warnings (``detail`` joins them)."""
    return RpcError(
        SUBAGENT_PROFILE_VALIDATION_FAILED, "SubAgent profile validation failed", {"detail": detail}
    )


def subagent_profile_protected(detail: str) -> RpcError:
    """``-32085``: the change is not allowed on this profile."""
    return RpcError(SUBAGENT_PROFILE_PROTECTED, "SubAgent profile is protected", {"detail": detail})


def task_not_found(task_id: str) -> RpcError:
    """``-32051``: no such automation task (DotCraft's message)."""
    return RpcError(TASK_NOT_FOUND, f"Task not found: {task_id}")


def task_invalid_status(detail: str) -> RpcError:
    """``-32052``: not while the task is in its present status (``detail`` is the message)."""
    return RpcError(TASK_INVALID_STATUS, detail)


def task_already_exists(task_id: str) -> RpcError:
    """``-32054``: a task with this id exists."""
    return RpcError(TASK_ALREADY_EXISTS, f"Task already exists: {task_id}")


def thread_binding_invalid(detail: str) -> RpcError:
    """``-32055``: the bound thread does not exist, is archived or cannot run server turns."""
    return RpcError(THREAD_BINDING_INVALID, "Thread binding invalid", {"detail": detail})
