"""Background terminal events, as ``terminal/*`` events to the clients that want them.

The terminal manager (``tools/terminals.py``) reports ``started``,
``outputDelta``, ``completed`` and ``cleaned``; :class:`TerminalEvents` turns
each into a ``terminal/<event>`` event with ``{terminal, delta?}`` for every
connected participant that can show background terminals (``wants_terminals``:
the front door's rule, for DotCraft clients ``initialize.capabilities.
backgroundTerminals``), minus its opted-out methods. As in DotCraft, they are
workspace-wide broadcasts, not thread events: not numbered, stored or replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from appserver.runtime.bus import EventBus
from appserver.runtime.events import Participant

if TYPE_CHECKING:
    # The terminals' wire models load with the first terminal (a plain turn runs none).
    from appserver.protocol.terminals import BackgroundTerminal


class TerminalEvents:
    """A :data:`~appserver.tools.terminals.TerminalListener` that publishes on the bus."""

    def __init__(self, bus: EventBus, wants_terminals: Callable[[Participant], bool]) -> None:
        self.bus = bus
        self.wants_terminals = wants_terminals

    def __call__(self, event: str, terminal: BackgroundTerminal, delta: str | None) -> None:
        targets = [p for p in self.bus.targets(broadcast=True) if self.wants_terminals(p)]
        if targets:
            from appserver.protocol.terminals import TerminalNotification

            self.bus.publish(
                f"terminal/{event}",
                TerminalNotification(terminal=terminal, delta=delta),
                include=targets,
            )
