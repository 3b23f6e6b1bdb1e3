"""Lifecycle events emitted together (:meth:`ThreadJournal.emit_all
<appserver.runtime.journal.ThreadJournal.emit_all>`): one commit for all of
them where the shared event log numbers and stores events, then each
delivered in order.

A turn's lifecycle events are each stored before anyone sees them, and each
used to be a commit of its own, with its own turn of the loop and owner check:
~13 for a thread's start and a short turn. Those that nothing can come
between (an instant item's ``item/started`` and ``item/completed``; a turn's
``turn/started`` and the thread's running flags; its terminal event and the
idle flags) are written together: all stored or none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appserver.runtime.events import Participant
from appserver.storage.events import companion_statements
from appserver.storage.records import ItemRecord, TurnRecord

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel


@dataclass(frozen=True)
class Emission:
    """One lifecycle event of a group: the fields of :meth:`ThreadJournal.emit
    <appserver.runtime.journal.ThreadJournal.emit>`."""

    kind: str
    params: WireModel | dict[str, Any]  # a typed model, or its wire form (events.Event)
    broadcast: bool = False
    include: tuple[Participant, ...] = ()
    topic: str | None = None
    turn: TurnRecord | None = None
    new_turn: bool = False
    item: ItemRecord | None = None
    rows: tuple[tuple[str, Sequence[Any]], ...] = ()  # other statements it stands for

    def owner(self) -> str | None:
        """The turn whose rows it writes and that this node must still run
        (none for a new turn: it is inserted, and refused if another has it)."""
        if self.turn is not None and not self.new_turn:
            return self.turn.id
        return self.item.turn_id if self.item is not None else None


def group_owner(group: Sequence[Emission]) -> str | None:
    """The turn whose rows the group writes and that this node must still run:
    none when the group starts the turn (its row is inserted, and refused when
    another node has the thread's running turn), whatever else it holds."""
    if any(emission.new_turn for emission in group):
        return None
    return next((owner for owner in (emission.owner() for emission in group) if owner), None)


def group_statements(
    thread_id: str, group: Sequence[Emission], node_id: str
) -> list[list[tuple[str, Sequence[Any]]]]:
    """Each emission's rows; a turn's or item's row that a later emission of the
    group writes again is left to that one (one transaction: the last state stands)."""
    written: list[list[tuple[str, Sequence[Any]]]] = []
    for index, emission in enumerate(group):
        later = group[index + 1 :]
        turn = emission.turn
        if turn is not None and not emission.new_turn and any(e.turn is turn for e in later):
            turn = None
        item = emission.item
        if item is not None and any(e.item is item for e in later):
            item = None
        rows = companion_statements(
            thread_id, turn=turn, new_turn=emission.new_turn, item=item, node_id=node_id
        )
        written.append([*rows, *emission.rows])
    return written
