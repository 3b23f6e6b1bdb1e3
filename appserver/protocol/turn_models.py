"""The wire models a turn constructs, whatever door it came through, in the
order a session first needs them: the runtime's notifications (a turn with
tools: a command, an approval, a diff), its approval request, and the models
it builds directly. Built in the background once a server is up (pydantic's
deferred schema build), so the first turn does not build them itself.

Kept apart from the method table (``protocol/methods.py``), which loads every
family's wire models: a face's lean runtime needs only these."""

from pydantic import BaseModel

from appserver.protocol import plans
from appserver.protocol import threads as thread_wire
from appserver.protocol import turns as turn_wire

# The part every turn builds, whatever it does (a face builds only these ahead:
# the rest, for tools, approvals and failures, would mostly go unused there).
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

TURN_MODELS: tuple[type[BaseModel], ...] = (
    thread_wire.ThreadStartedNotification,
    thread_wire.ThreadResumedNotification,
    thread_wire.ThreadStatusChangedNotification,
    *EVERY_TURN,
    turn_wire.ApprovalRequestParams,
    turn_wire.ApprovalRequestResult,
    turn_wire.ApprovalResolvedNotification,
    turn_wire.TurnDiffUpdatedNotification,
    plans.PlanUpdatedNotification,
    turn_wire.TurnFailedNotification,
    turn_wire.TurnCancelledNotification,
)
