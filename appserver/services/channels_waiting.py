"""The channels family at start: installed when a channel adapter connects.

The family (the adapter hub, external channel management and their wire models:
~5 ms of a server's start) waits for the first call of one of its methods, or
for the first client whose ``initialize`` declares the ``channelAdapter``
capability. Until then it has nothing to do: its hooks act only on adapter
connections (and turns they start), and with no hub a turn's channel tools are
none, as with a hub that has no adapter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from appserver.services.peer import Peer, peer_of

if TYPE_CHECKING:
    from appserver.protocol.initialize import InitializeParams
    from appserver.rpc.connection import RequestContext
    from appserver.services.context import FamilyContext

log = logging.getLogger("appserver.channels")
REJECT_CLOSE_CODE = 1008  # policy violation


def prepare(server: FamilyContext, wait: Callable[[], Callable[[], None]]) -> None:
    """Set the family up on ``server`` (see the module's docstring)."""
    install = wait()
    hooks = server.router.initialize_hooks

    def on_initialize(ctx: RequestContext, request: InitializeParams) -> None:
        raw = request.capabilities.channel_adapter
        if raw is None:
            return
        before = len(hooks)
        try:
            install()
        except Exception as exc:  # the adapter is told, as a rejected one is
            log.exception("could not load the channels family for an adapter")
            peer, message = peer_of(ctx), f"channels are not available: {exc}"
            name = str(raw.get("channelName", "")) if isinstance(raw, dict) else ""
            ctx.after_response(lambda: reject_adapter(peer, name, message))
            return
        for hook in hooks[before:]:  # the family's own: this client is its first
            hook(ctx, request)

    hooks.append(on_initialize)


def reject_adapter(peer: Peer, name: str, message: str) -> None:
    """``system/event channelRejected``, then close (code 1008): how an adapter
    is refused, by the family or here when the family cannot load."""
    log.warning("rejected channel adapter %r: %s", name, message)
    event = {"kind": "channelRejected", "channelName": name, "message": message}
    peer.connection.notify("system/event", event)
    peer.connection.close(message, code=REJECT_CLOSE_CODE)
