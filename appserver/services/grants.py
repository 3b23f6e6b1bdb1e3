"""The grants family: ``grant/list`` and ``grant/revoke``
(:mod:`appserver.protocol.grants`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from appserver.protocol import grants as grant_wire
from appserver.protocol.base import Empty
from appserver.rpc.connection import RequestContext

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext


class GrantService:
    """Handlers over the runtime's approval broker."""

    def __init__(self, server: FamilyContext) -> None:
        self.server = server

    async def list(self, ctx: RequestContext, params: Empty) -> BaseModel:
        approvals = self.server.runtime.approvals
        grants = [
            grant_wire.ApprovalGrant(kind=kind, operation=operation, target=target, created_at=at)
            for kind, operation, target, at in await approvals.events.grants()
        ]
        return grant_wire.GrantListResult(grants=grants, honoured=self.server.trust.trusted)

    async def revoke(self, ctx: RequestContext, params: grant_wire.GrantRevokeParams) -> BaseModel:
        revoked = await self.server.runtime.approvals.revoke(
            params.kind, params.operation, params.target
        )
        return grant_wire.GrantRevokeResult(revoked=revoked)


def install(server: FamilyContext) -> None:
    """Register ``grant/list`` and ``grant/revoke``."""
    service = GrantService(server)
    server.router.register("grant/list", service.list)
    server.router.register("grant/revoke", service.revoke)
