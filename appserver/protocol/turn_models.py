"""The wire models a turn's doors parse or build, in the order a session first
needs them, built in the background once a server is up (pydantic's deferred
schema build), so the first turn does not build them itself.

The runtime hands what every turn says as data (``runtime/wire.py``): the
DotCraft door sends it as JSON and builds only what a turn still makes typed
(:data:`TURN_MODELS`); a face that reads events typed parses them
(:data:`EVERY_TURN`); the Zene and Codex faces read data and build neither.

Kept apart from the method table (``protocol/methods.py``), which loads every
family's wire models: a face's lean runtime needs only these."""

from pydantic import BaseModel

from appserver.protocol import plans
from appserver.protocol import threads as thread_wire
from appserver.protocol import turns as turn_wire

# What a face that reads a turn's events typed parses on every turn (the rest, for
# tools, approvals and failures, would mostly go unused there).
EVERY_TURN: tuple[type[BaseModel], ...] = (
    turn_wire.TextPart,
    thread_wire.ThreadRenamedNotification,
    thread_wire.ThreadRuntimeChangedNotification,
    thread_wire.Turn,
    turn_wire.TurnNotification,  # turn/started, turn/completed
    thread_wire.Item,
    turn_wire.ItemNotification,  # item/started, item/completed
    turn_wire.DeltaNotification,
    turn_wire.UsageDeltaNotification,
    thread_wire.TokenUsage,
)

# What a DotCraft turn makes typed: its input's text part (written back as the
# userMessage), an approval's request and answer, a plan's update.
TURN_MODELS: tuple[type[BaseModel], ...] = (
    turn_wire.TextPart,
    turn_wire.ApprovalRequestParams,
    turn_wire.ApprovalRequestResult,
    plans.PlanUpdatedNotification,
)
