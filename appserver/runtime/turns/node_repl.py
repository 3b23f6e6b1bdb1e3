"""The desktop's Node REPL as the model's ``NodeReplJs`` tool (``ext/nodeRepl/*``).

A client that declared both ``nodeRepl`` and ``browserUse`` (DotCraft Desktop)
keeps a persistent JavaScript REPL per thread that drives its embedded
browser. On the threads bound to it (the seat of
:class:`~appserver.runtime.turns.client_tools.ClientToolCalls`; while the seat
is empty, the client that started the turn) the model is offered
``NodeReplJs {code, timeoutSeconds?}``; a call is the server->client request
``ext/nodeRepl/evaluate`` and one ``pluginFunctionCall`` item (DotCraft's
projection: ``pluginId: "browser-use"``, ``namespace: "node_repl"``), whose
content is the text the REPL printed and the images it produced (the model
sees those images).

Never a hung turn: the request goes through the approval machinery
(:class:`PendingEvaluation`: asked again of a client that takes the seat
within the reconnect grace) and waits the evaluation's own timeout plus a
margin; no answer, a client gone for good, an error or an invalid answer fail
the call and the turn goes on. An evaluation the server stops waiting for (its
timeout, an interrupted turn) is followed by ``ext/nodeRepl/cancel``, best
effort, as DotCraft does.
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from appserver.providers.base import ImagePart, ToolCall, ToolSpec
from appserver.runtime.approvals import ApprovalBroker, PendingApproval
from appserver.runtime.events import (
    Participant,
    QuestionRefused,
    QuestionUnanswered,
    is_node_repl_host,
)
from appserver.runtime.history import client_tool_images, client_tool_text
from appserver.runtime.subagent_roles import tool_offered
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import ActiveTurn

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel  # noqa: F401 (in a quoted base class)
    from appserver.protocol.node_repl import (
        NodeReplCancelParams,
        NodeReplEvaluateParams,
        NodeReplEvaluateResult,
    )

# The REPL's wire models are imported at the first evaluation: most processes
# never have a Node REPL host, and they were ~1 ms of every start.

log = logging.getLogger("appserver.turns")

NODE_REPL_TOOL = "NodeReplJs"
EVALUATE = "ext/nodeRepl/evaluate"
CANCEL = "ext/nodeRepl/cancel"
# DotCraft's numbers: the evaluation's timeout (the tool's timeoutSeconds) is
# 30 s unless the model asks, clamped to 1-120 s; cancel is waited for 2 s.
DEFAULT_TIMEOUT_S = 30
MAX_TIMEOUT_S = 120
CANCEL_TIMEOUT_S = 2.0
NO_OUTPUT = "(Node REPL completed with no text output)"

NODE_REPL_SPEC = ToolSpec(
    NODE_REPL_TOOL,
    "Run JavaScript in the desktop app's persistent Node REPL for this thread. State "
    "(variables, open pages) stays between calls; top-level await works. The REPL drives "
    "the app's embedded browser through `agent.browser`, shows values with `display()` and "
    "returns screenshots as images. `timeoutSeconds` (1-120, default 30) bounds one call.",
    {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "The JavaScript to evaluate."},
            "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S},
        },
        "required": ["code"],
    },
)


@dataclass
class PendingEvaluation(PendingApproval["WireModel"]):
    """An ``ext/nodeRepl/evaluate`` waiting for the client's answer (asked once
    per participant, timeout, reconnect grace)."""

    answer: Mapping[str, object] | None = None
    error: str = ""

    async def _put(self, participant: Participant) -> object:
        assert is_node_repl_host(participant)
        return await participant.node_repl_request(EVALUATE, self.params, self.timeout)

    def _refused(self, participant: Participant, message: str) -> None:
        self.error = message
        self.resolve("refused", participant)

    def _answered(self, participant: Participant, answer: object) -> None:
        self.answer = answer if isinstance(answer, Mapping) else {}
        self.resolve("answered", participant)


def hosts_repl(participant: Participant | None) -> bool:
    """``participant`` is a ready client that hosts a Node REPL."""
    return (
        participant is not None
        and not participant.closed
        and is_node_repl_host(participant)
        and participant.node_repl()
    )


def timeout_seconds(value: object) -> int:
    """The evaluation's timeout from the tool's ``timeoutSeconds``: a whole
    number clamped to 1-120, anything else the default 30 (as DotCraft)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return DEFAULT_TIMEOUT_S
    return min(max(value, 1), MAX_TIMEOUT_S)


def _failure(code: str, message: str) -> dict[str, Any]:
    return {
        "contentItems": [{"type": "text", "text": f"Error: {message}"}],
        "success": False,
        "errorCode": code,
        "errorMessage": message,
    }


def evaluation_fields(result: NodeReplEvaluateResult) -> dict[str, Any]:
    """The ``pluginFunctionCall`` result fields of an answer, as DotCraft builds
    them: one text part (``text``, ``resultText``, the logs, ``Error: error``),
    then one part per valid image; ``error`` fails the call."""
    lines = [part for part in (result.text, result.result_text) if part and part.strip()]
    if result.logs:
        lines.append("\n".join(result.logs))
    if result.error and result.error.strip():
        lines.append(f"Error: {result.error}")
    images: list[dict[str, Any]] = []
    for image in result.images or []:
        if not image.data_base64.strip():
            continue
        if not _valid_image(image.media_type, image.data_base64):
            lines.append("[an image the REPL returned was not a base64-encoded image]")
            continue
        images.append(
            {"type": "image", "dataBase64": image.data_base64, "mediaType": image.media_type}
        )
    text = "\n".join(lines) if lines else NO_OUTPUT
    fields: dict[str, Any] = {"contentItems": [{"type": "text", "text": text}, *images]}
    if result.error and result.error.strip():
        fields.update(success=False, errorCode="NodeReplError", errorMessage=result.error)
    else:
        fields["success"] = True
    return fields


def _valid_image(media_type: str, data: str) -> bool:
    if not media_type.startswith("image/"):
        return False
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


class NodeRepl:
    """``NodeReplJs`` calls of the threads' turns, to each thread's REPL host."""

    def __init__(
        self,
        items: ItemLog,
        approvals: ApprovalBroker,
        bound_client: Callable[[str], Participant | None],
    ) -> None:
        self.items = items
        self.approvals = approvals
        self.bound_client = bound_client
        # How long past an evaluation's own timeout the client may take to answer
        # (EngineConfig.node_repl_answer_margin; DotCraft's is 5 s).
        self.answer_margin = 5.0
        self.pending: dict[str, PendingEvaluation] = {}  # by thread

    def host(self, active: ActiveTurn) -> Participant | None:
        """The thread's bound client if it hosts a REPL (while the seat is empty:
        the client that started the turn)."""
        owner = self.bound_client(active.thread_id)
        if owner is None or owner.closed:
            owner = active.origin
        return owner if hosts_repl(owner) else None

    def offers(self, active: ActiveTurn, name: str) -> bool:
        """Whether this turn offers the tool ``name`` (``NodeReplJs``)."""
        return (
            name == NODE_REPL_TOOL
            and self.host(active) is not None
            and tool_offered(active.thread, NODE_REPL_TOOL)
        )

    def specs(self, active: ActiveTurn, taken: set[str]) -> list[ToolSpec]:
        """``NodeReplJs`` when this turn offers it and no built-in tool has the name."""
        offered = NODE_REPL_TOOL not in taken and self.offers(active, NODE_REPL_TOOL)
        return [NODE_REPL_SPEC] if offered else []

    def offer(self, thread_id: str, participant: Participant) -> None:
        """``participant`` took the thread's seat: it is asked the thread's pending
        evaluation if nobody is being asked any more and it hosts a REPL."""
        asked = self.pending.get(thread_id)
        if asked is not None and not asked.live and hosts_repl(participant):
            asked.ask(participant)

    async def call(self, active: ActiveTurn, call: ToolCall) -> tuple[str, list[ImagePart]]:
        """Run one call; record its ``pluginFunctionCall`` item; the model's text
        and images."""
        args = dict(call.arguments) if isinstance(call.arguments, Mapping) else {}
        item = await self.items.open(
            active,
            "pluginFunctionCall",
            {
                "pluginId": "browser-use",
                "namespace": "node_repl",
                "functionName": NODE_REPL_TOOL,
                "callId": call.call_id,
                "arguments": args,
            },
        )
        code = args.get("code")
        if call.arguments_error is not None:  # not run: the model is told why
            fields = _failure("invalidArguments", call.arguments_error)
        elif not isinstance(code, str) or not code.strip():
            fields = _failure("NodeReplError", "NodeReplJs requires non-empty code.")
        else:
            try:
                fields = await self._evaluate(
                    active, code, timeout_seconds(args.get("timeoutSeconds"))
                )
            except anyio.get_cancelled_exc_class():
                # The turn ends; the item is completed with it, saying why.
                item.payload.update(
                    _failure("NodeReplError", "Node REPL evaluation was cancelled.")
                )
                raise
        item.payload.update(fields)
        await self.items.complete(active, item)
        return client_tool_text(fields), client_tool_images(fields)

    async def _evaluate(self, active: ActiveTurn, code: str, timeout_s: int) -> dict[str, Any]:
        assert active.tg is not None
        from appserver.protocol.node_repl import NodeReplEvaluateParams, NodeReplEvaluateResult

        params = NodeReplEvaluateParams(
            thread_id=active.thread_id,
            evaluation_id=f"node-repl-{secrets.token_hex(16)}",
            code=code,
            timeout_ms=timeout_s * 1000,
        )
        wait = timeout_s + self.answer_margin
        pending = PendingEvaluation(params, active.tg, wait, self.approvals.reconnect_grace)
        self.pending[active.thread_id] = pending
        try:
            host = self.host(active)
            if host is not None:
                pending.ask(host)
            decided, reason = await pending.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._cancel(pending, params)
            raise
        finally:
            if self.pending.get(active.thread_id) is pending:
                del self.pending[active.thread_id]
        if decided is None:
            if reason == "approval_timeout":
                await self._cancel(pending, params)
                return _failure(
                    "NodeReplError",
                    f"the client did not answer {EVALUATE} within {wait:g}s "
                    "(the evaluation was cancelled)",
                )
            return _failure(
                "NodeReplUnavailable",
                f"the Node REPL's client disconnected and did not come back within "
                f"{self.approvals.reconnect_grace:g}s",
            )
        if decided == "refused":
            return _failure("NodeReplError", f"the client refused {EVALUATE}: {pending.error}")
        from pydantic import ValidationError

        from appserver.protocol.base import first_error

        try:
            result = NodeReplEvaluateResult.model_validate(dict(pending.answer or {}))
        except ValidationError as exc:
            return _failure("NodeReplError", f"invalid answer to {EVALUATE}: {first_error(exc)}")
        return evaluation_fields(result)

    async def _cancel(self, pending: PendingEvaluation, evaluated: NodeReplEvaluateParams) -> None:
        """``ext/nodeRepl/cancel`` to the clients still connected that were asked
        the evaluation; best effort, at most :data:`CANCEL_TIMEOUT_S`."""
        from appserver.protocol.node_repl import NodeReplCancelParams

        params = NodeReplCancelParams(
            thread_id=evaluated.thread_id, evaluation_id=evaluated.evaluation_id
        )
        hosts = [asked for asked in pending.asked if hosts_repl(asked)]
        with anyio.move_on_after(CANCEL_TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                for host in hosts:
                    tg.start_soon(self._send_cancel, host, params)

    async def _send_cancel(self, host: Participant, params: NodeReplCancelParams) -> None:
        assert is_node_repl_host(host)
        try:
            await host.node_repl_request(CANCEL, params, CANCEL_TIMEOUT_S)
        except (QuestionRefused, QuestionUnanswered) as exc:
            log.info("%s %s failed: %s", CANCEL, params.evaluation_id, exc)
