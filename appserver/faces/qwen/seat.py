"""The ``qwen`` face's seat: approvals become ``can_use_tool`` control requests.

:class:`Control` pairs the control requests this face sends (``can_use_tool``)
with the SDK's ``control_response`` lines. :class:`QwenSeat` is the face's
participant: it receives the events of the turns the face starts, and when the
runtime asks it about a gated tool call it first applies the approval mode and
the tool rules (``rules``; in a workspace that is not trusted they only
decline), then asks the SDK and maps its answer:
``allow`` -> ``accept``, ``deny`` -> ``decline`` (``cancel`` with
``interrupt: true``), an error answer or a malformed one naming the request
-> :class:`QuestionRefused` (declined at once), no answer in time ->
:class:`QuestionUnanswered`. Input typed into a background terminal
is asked as what it is: ``tool_name`` ``write_stdin``, ``input`` its
``session_id`` and ``input``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from appserver.faces.common import item_of
from appserver.faces.qwen.annotations import confirmation, tool_display
from appserver.faces.qwen.rules import (
    FILE_TOOLS,
    TERMINAL_INPUT,
    Call,
    ToolRules,
    decides_locally,
    local_decision,
)
from appserver.faces.seat import HIDDEN_TOPICS, Seat
from appserver.runtime.events import Event, QuestionRefused, QuestionUnanswered

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel

log = logging.getLogger("appserver.faces.qwen")

Frame = dict[str, Any]
CATCH_UP_LIMIT = 10.0  # seconds an approval waits for the stream to show its tool call
# The grant key of input to a background terminal (runtime/grant_keys.py): the
# default scope's starts ``shell:stdin-``, the wider one is ``shell:stdin:<session id>``.
_INPUT_KEY = "shell:stdin-"
_TERMINAL_KEY = "shell:stdin:"


class ControlClosed(Exception):
    """stdin closed: no answer can come."""


class ControlError(Exception):
    """The SDK answered with ``subtype: "error"``."""


@dataclass
class _Pending:
    done: anyio.Event = field(default_factory=anyio.Event)
    response: Frame | None = None
    error: str | None = None


Check = Callable[[Frame], str | None]  # what is wrong with a success body


class Control:
    """Control requests to the SDK and their answers."""

    def __init__(self, send: Callable[[Frame], Awaitable[None]]) -> None:
        self._send = send
        self._pending: dict[str, _Pending] = {}
        self._checks: dict[str, Check] = {}
        self.closed = False

    async def request(self, payload: Frame, timeout: float, check: Check | None = None) -> Frame:
        """Send ``{"type":"control_request","request_id",request: payload}``
        and return the ``response`` of its success answer (``check`` names
        what is wrong with a success body, or ``None``)."""
        if self.closed:
            raise ControlClosed
        request_id = str(uuid.uuid4())
        pending = self._pending[request_id] = _Pending()
        if check is not None:
            self._checks[request_id] = check
        try:
            await self._send(
                {"type": "control_request", "request_id": request_id, "request": payload}
            )
            with anyio.fail_after(timeout):
                await pending.done.wait()
        finally:
            self._pending.pop(request_id, None)
            self._checks.pop(request_id, None)
        if pending.error is not None:
            raise ControlError(pending.error)
        if pending.response is None:
            raise ControlClosed
        return pending.response

    def answer(self, frame: Frame) -> str | None:
        """Settle the request a ``control_response`` frame answers; what is
        wrong with the frame (for an ``input_error``), or ``None``.

        An answer nobody waits for (late, or repeated) is checked as an
        envelope only (``response`` object, ``request_id`` string, ``subtype``)
        and, if that holds, dropped quietly. A malformed answer that names a waiting request (in
        ``response.request_id``, or at the top as the RFC puts it) settles it
        as an error answer at once: the approval is declined, not left to
        time out."""
        response = frame.get("response")
        request_id = response.get("request_id") if isinstance(response, dict) else None
        if not isinstance(request_id, str):
            request_id = frame.get("request_id")
        pending = check = None
        if isinstance(request_id, str):
            pending, check = self._pending.get(request_id), self._checks.get(request_id)
        if pending is not None and pending.done.is_set():
            pending = None
        problem = _malformed(response, pending is not None, check)
        if problem is None:
            assert isinstance(response, dict)  # _malformed checked it
            if pending is not None:
                if response["subtype"] == "success":
                    pending.response = response["response"]
                else:
                    error = response["error"]
                    pending.error = str(error.get("message") if isinstance(error, dict) else error)
                    pending.error = pending.error or "error"
                pending.done.set()
            return None
        if pending is None:
            return f"malformed control_response: {problem} (it answers no waiting request)"
        pending.error = f"malformed control_response: {problem}"
        pending.done.set()
        return f"malformed control_response: {problem}; request {request_id} is declined"

    def close(self) -> None:
        """stdin closed: every waiting request ends (:class:`ControlClosed`)."""
        self.closed = True
        for pending in self._pending.values():
            pending.done.set()


def _malformed(response: object, waited: bool, check: Check | None) -> str | None:
    """What is wrong with a ``control_response``'s ``response``, or ``None``.
    The body is checked only when a request ``waited`` for it (its shape
    depends on that request): an answer to none is checked as an envelope."""
    if not isinstance(response, dict):
        return "it needs a 'response' object"
    request_id = response.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        return "it needs a 'response.request_id' string"
    subtype = response.get("subtype")
    if subtype in ("success", "error") and not waited:
        return None
    if subtype == "success":
        body = response.get("response")
        if not isinstance(body, dict):
            return "a success answer needs a 'response.response' object"
        return check(body) if check is not None else None
    if subtype == "error":
        error = response.get("error")
        if isinstance(error, str) or (
            isinstance(error, dict) and isinstance(error.get("message"), str)
        ):
            return None
        return "an error answer needs an 'error' string (or an object with a 'message')"
    return "'response.subtype' must be 'success' or 'error'"


def permission_problem(body: Frame) -> str | None:
    """What is wrong with the answer to ``can_use_tool``, or ``None``."""
    behavior = body.get("behavior")
    if not isinstance(behavior, str) or behavior.lower() not in ("allow", "deny"):
        return "'behavior' must be 'allow' or 'deny'"
    if "updatedInput" in body and not isinstance(body["updatedInput"], dict | None):
        return "'updatedInput' must be an object"
    return None


class SeatOwner(Protocol):
    """What the seat needs from the session."""

    control: Control
    mode: str
    rules: ToolRules
    workspace: Path
    session_id: str

    async def annotate(self, annotation: Frame) -> None:
        """Write one of the RFC's annotations (stream-chunk-json only)."""

    def interactive(self) -> bool:
        """The client reads control requests and can answer them."""

    def trusted(self) -> bool:
        """The workspace is trusted: the mode and rules may accept calls."""

    def others_can_answer(self, thread_id: str) -> bool:
        """Another participant watching the thread may answer approvals."""


class QwenSeat(Seat):
    """The face's participant (see the module docstring)."""

    def __init__(self, owner: SeatOwner, show_commands: bool = False) -> None:
        # show_commands: also the opt-in commandExecution items and their output.
        super().__init__("qwen", topics_hidden=frozenset() if show_commands else HIDDEN_TOPICS)
        self.owner = owner
        self.delivered = 0
        self.processed = 0
        self._progress = anyio.Event()
        # Tool calls announced and not yet answered by a result: (call id, tool, arguments).
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def deliver(self, event: Event) -> None:
        if self.closed:
            return
        self.delivered += 1
        item = item_of(event) if event.kind == "item/completed" else None
        if item is not None:
            payload = item.payload
            if item.type == "toolCall":
                arguments = payload.get("arguments")
                self.calls.append(
                    (
                        str(payload.get("callId", "")),
                        str(payload.get("toolName", "")),
                        arguments if isinstance(arguments, dict) else {},
                    )
                )
            elif item.type == "toolResult":
                call_id = str(payload.get("callId", ""))
                self.calls = [call for call in self.calls if call[0] != call_id]
        elif event.kind in ("turn/completed", "turn/failed", "turn/cancelled"):
            self.calls.clear()
        super().deliver(event)

    def mark_processed(self) -> None:
        """The session wrote out what one more delivered event produced."""
        self.processed += 1
        self._progress.set()
        self._progress = anyio.Event()

    async def _catch_up(self, target: int) -> None:
        """Wait until the stream shows every event delivered before ``target``
        (so ``can_use_tool`` follows the ``tool_use`` it is about)."""
        with anyio.move_on_after(CATCH_UP_LIMIT):
            while self.processed < target and not self.closed:
                await self._progress.wait()

    def can_answer_approvals(self) -> bool:
        owner = self.owner
        return owner.interactive() or decides_locally(owner.mode, owner.rules)

    def _pending(self, tool: str, fits: Callable[[dict[str, Any]], bool]) -> tuple[str, Frame]:
        """The id and arguments of the first announced call of ``tool`` that fits."""
        for pending_id, name, args in self.calls:
            if name == tool and fits(args):
                return pending_id, args
        return "", {}

    def _call(self, request: Any) -> Call:
        kind = str(request.approval_type)
        scope_key = str(request.scope_key)
        outside = scope_key.count(":") >= 2  # the key names the place outside
        operation = str(request.operation)
        if kind == "shell" and scope_key.startswith(_INPUT_KEY):
            return self._terminal_input(request, operation, outside)
        tool = "shell" if kind == "shell" else FILE_TOOLS.get(operation, kind)
        call_id, arguments = self._pending(tool, lambda args: True)
        subject = operation if tool == "shell" else str(request.target)
        return Call(tool, call_id, arguments, subject, outside)

    def _terminal_input(self, request: Any, typed: str, outside: bool) -> Call:
        """A ``write_stdin`` call: ``typed`` into the terminal its wider scope names."""
        terminal = ""
        for scope in getattr(request, "session_scopes", None) or []:
            key = str(getattr(scope, "scope_key", ""))
            if key.startswith(_TERMINAL_KEY):
                terminal = key[len(_TERMINAL_KEY) :].split(":", 1)[0]
                break
        call_id, arguments = self._pending(
            TERMINAL_INPUT,
            lambda args: (
                args.get("input") == typed and (not terminal or args.get("session_id") == terminal)
            ),
        )
        if not arguments:  # not announced (yet): what the runtime will do, as it showed it
            arguments = {"session_id": terminal, "input": typed}
        return Call(TERMINAL_INPUT, call_id, arguments, typed, outside)

    async def ask_approval(self, request: WireModel, timeout: float) -> str:
        owner = self.owner
        call = self._call(request)
        trusted = owner.trusted()
        decision = local_decision(owner.mode, call, owner.rules, owner.workspace, trusted=trusted)
        if decision is not None:
            log.info("%s %s by the approval mode or tool rules", call.tool, decision)
            return decision
        if not trusted and local_decision(
            owner.mode, call, owner.rules, owner.workspace, trusted=True
        ):
            log.warning(
                "%s: the workspace is not trusted, so the approval mode and tool rules "
                "accept nothing; asking (--trust-workspace trusts it)",
                call.tool,
            )
        thread_id = str(getattr(request, "thread_id", ""))
        if not owner.interactive() or owner.control.closed:
            if owner.others_can_answer(thread_id):
                raise QuestionUnanswered("the Qwen client cannot answer")
            raise QuestionRefused("the Qwen client cannot answer approval requests")
        await self._catch_up(self.delivered)
        await owner.annotate(
            tool_display(
                owner.session_id,
                call.call_id,
                "confirming",
                confirmation=confirmation(call.tool, request),
            )
        )
        payload: Frame = {
            "subtype": "can_use_tool",
            "tool_name": call.tool,
            "tool_use_id": call.call_id,
            "input": call.arguments,
            "permission_suggestions": None,
            "blocked_path": str(getattr(request, "target", "")) if call.outside else None,
        }
        try:
            answer = await owner.control.request(payload, timeout, permission_problem)
        except TimeoutError:
            raise QuestionUnanswered("no answer to can_use_tool") from None
        except ControlError as exc:
            raise QuestionRefused(str(exc)) from None
        except ControlClosed:
            if owner.others_can_answer(thread_id):
                raise QuestionUnanswered("stdin closed") from None
            raise QuestionRefused("stdin closed") from None
        behavior = str(answer.get("behavior", "")).lower()
        if behavior == "allow":
            updated = answer.get("updatedInput")
            if isinstance(updated, dict) and updated != call.arguments:
                # The runtime runs the call the model made; a changed one is not it.
                log.warning("can_use_tool answered with a changed input: declined")
                return "decline"
            return "accept"
        if answer.get("interrupt") is True:
            return "cancel"
        return "decline"
