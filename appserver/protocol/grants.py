"""``grant/list`` and ``grant/revoke``: the approvals remembered for good.

Ours, not DotCraft's. An ``acceptAlways`` answer is stored with the workspace's
database (``approval_grants``) and covers that exact operation in every later
session; these methods show them and take one back.
"""

from pydantic import ConfigDict

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Empty, Flag, WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec


class ApprovalGrant(WireModel):
    """One remembered approval: what it covers, exactly."""

    kind: str
    """`shell`, `file`, `network`, a client tool's kind, or a variant that keeps one grant from
    covering another (`shell+background`, `shell+interactive`, `shell+stdin`, `file+outside`)."""
    operation: str
    """The command (shell), `read`/`write`/`edit`/`patch`/`list` (file), `fetch` (network)."""
    target: str
    """The working directory, path, origin or terminal it applies to."""
    created_at: str
    """When it was remembered (ISO 8601)."""


class GrantListResult(WireModel):
    """Every remembered grant, oldest first."""

    grants: list[ApprovalGrant]
    """The grants."""
    honoured: Flag
    """`false` while the workspace is not trusted: remembered grants then ask again."""


class GrantRevokeParams(WireModel):
    """``grant/revoke``: forget one remembered grant (as `grant/list` names it)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"kind": "shell", "operation": "make test", "target": "/work/project"}]
        }
    )

    kind: str
    """The grant's `kind`."""
    operation: str
    """The grant's `operation`."""
    target: str
    """The grant's `target`."""


class GrantRevokeResult(WireModel):
    """Whether it was remembered."""

    revoked: Flag
    """`false`: no such grant (already revoked, or never remembered)."""


METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "grant/list",
        Empty,
        GrantListResult,
        "approvalGrants",
        "The approvals remembered for good (`acceptAlways`), oldest first. Ours, not DotCraft's.",
        access="read",
    ),
    MethodSpec(
        "grant/revoke",
        GrantRevokeParams,
        GrantRevokeResult,
        "approvalGrants",
        "Forget one remembered approval: the next such operation asks again, in sessions already "
        "running too. Ours, not DotCraft's.",
        (rpc_errors.INVALID_PARAMS,),
    ),
]
NOTIFICATION_SPECS: list[NotificationSpec] = []
SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
