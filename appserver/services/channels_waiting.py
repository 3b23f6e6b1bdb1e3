"""The channels family at start: installed when a channel adapter connects.

The family (the adapter hub, external channel management and their wire models:
~5 ms of a server's start) waits for the first call of one of its methods, or
for the first client whose ``initialize`` declares the ``channelAdapter``
capability. Until then it has nothing to do: its hooks act only on adapter
connections (and turns they start), and with no hub a turn's channel tools are
none, as with a hub that has no adapter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appserver.protocol.initialize import InitializeParams
    from appserver.rpc.connection import RequestContext
    from appserver.services.context import FamilyContext


def prepare(server: FamilyContext, wait: Callable[[], Callable[[], None]]) -> None:
    """Set the family up on ``server`` (see the module's docstring)."""
    install = wait()
    hooks = server.router.initialize_hooks

    def on_initialize(ctx: RequestContext, request: InitializeParams) -> None:
        if request.capabilities.channel_adapter is None:
            return
        before = len(hooks)
        install()
        for hook in hooks[before:]:  # the family's own: this client is its first
            hook(ctx, request)

    hooks.append(on_initialize)
