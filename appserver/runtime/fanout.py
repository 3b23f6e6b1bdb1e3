"""A broadcast's fan-out to the joined participants that want it, prepared once.

The bus keeps one :class:`Fanout` per event kind and topic until someone joins
or leaves (:meth:`EventBus.joined_fanout
<appserver.runtime.bus.EventBus.joined_fanout>`). It holds the participants
grouped by class, and what each class's fan-out path sends to (a front door's
connections), so a broadcast to 200 connections makes no list of 200
participants, groups nothing and looks up no connection: it hands each class
its prepared list, less the few participants the event skips (the thread's
subscribers, who get it as subscribers).

A participant class may prepare its fan-out with two static methods:
``fanout_targets(participants) -> list`` (what to send to, one per
participant, in order) and ``deliver_prepared(event, targets)``. A class with
``deliver_many(event, participants)`` only gets its participants; any other
has ``deliver`` called for each. The lists handed over are the kept ones when
nothing is skipped: read them, never change them.

Only the journal's thread broadcasts go this way; a workspace-wide event
(:meth:`EventBus.publish <appserver.runtime.bus.EventBus.publish>`, rare) asks
each participant.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from typing import Any

from appserver.runtime.events import Event, Participant

_Deliver = Callable[[Event, list[Any]], None]


def _one_by_one(event: Event, participants: list[Any]) -> None:
    for participant in participants:
        participant.deliver(event)


class Fanout:
    """The participants one kind of broadcast goes to, ready to send."""

    __slots__ = ("_groups", "_members", "participants")

    def __init__(self, participants: list[Participant]) -> None:
        #: Every participant it goes to, in join order.
        self.participants = participants
        self._members = frozenset(participants)
        by_class: dict[type[Any], list[Participant]] = {}
        for participant in participants:
            by_class.setdefault(type(participant), []).append(participant)
        # (deliver, the targets it takes, each participant's index among them)
        self._groups: list[tuple[_Deliver, list[Any], dict[Participant, int]]] = []
        for kind, group in by_class.items():
            index = {participant: at for at, participant in enumerate(group)}
            prepare = getattr(kind, "fanout_targets", None)
            if prepare is not None:
                self._groups.append((kind.deliver_prepared, prepare(group), index))
            else:
                deliver_many = getattr(kind, "deliver_many", None)
                self._groups.append((deliver_many or _one_by_one, group, index))

    def deliver(self, event: Event, skip: Set[Participant]) -> None:
        """Hand ``event`` to every participant but those in ``skip``, each once."""
        skipped = self._members.intersection(skip) if skip else None
        for deliver, targets, index in self._groups:
            if skipped:
                drop = sorted((index[each] for each in skipped if each in index), reverse=True)
                if drop:
                    targets = list(targets)
                    for at in drop:
                        del targets[at]
                    if not targets:
                        continue
            deliver(event, targets)
