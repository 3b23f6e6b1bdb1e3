"""The JSON-RPC connection's outbox: the bounded queue every door shares,
defined in :mod:`appserver.transport.outbox` (the faces use it too)."""

from __future__ import annotations

from appserver.transport.outbox import Merge, Outbox, OutboxClosed

__all__ = ["Merge", "Outbox", "OutboxClosed"]
