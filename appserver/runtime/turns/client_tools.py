"""Tools that clients provide, and their calls.

A call of a tool the thread's client declared (``thread/start.dynamicTools``)
is asked of that client (``item/tool/call``) with the approval machinery
(:class:`PendingToolCall`: timeout, reconnect grace, asked again of a client
that takes the seat) and recorded as a ``dynamicToolCall`` item; see
docs/tools.md. A tool an external channel adapter registered
(``channelAdapter.channelTools``, offered through a :class:`ChannelToolSource`)
goes the same way as ``ext/channel/toolCall`` to the adapter and a
``pluginFunctionCall`` item; see docs/channels.md. A tool's ``approval`` hint
becomes an :class:`~appserver.tools.base.ApprovalNeed` (:func:`client_tool_need`).

:class:`ClientToolCalls` also keeps each thread's seat (its bound client),
which the editor proxy (``runtime.turns.editor_proxy``) and the Node REPL
(``runtime.turns.node_repl``) ask too. A declared tool with an ``acpMethod``
is not sent as ``item/tool/call`` but as ``ext/acp/<family>/<method>`` to the
thread's editor (``runtime.turns.editor_families``), and offered only while
the editor serves that family.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from appserver.providers.base import ToolSpec
from appserver.runtime.approvals import ApprovalBroker, PendingApproval
from appserver.runtime.bounded import make_room
from appserver.runtime.events import Participant, is_tool_caller
from appserver.runtime.history import client_tool_text as model_text
from appserver.runtime.turns.editor_families import declared_tool_result, declared_tool_served
from appserver.runtime.turns.editor_proxy import EditorProxy
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import ActiveTurn
from appserver.runtime.turns.node_repl import NodeRepl
from appserver.tools.base import ApprovalNeed, ToolError
from appserver.tools.sandbox import Sandbox

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel

log = logging.getLogger("appserver.turns")


# --- client tools (thread/start.dynamicTools -> item/tool/call) ----------------------

CLIENT_TOOL_ERRORS = {
    "toolCallTimeout": "the client did not answer the tool call within {timeout:g}s",
    "toolCallClientGone": (
        "the client that owns this thread disconnected and did not come back within {grace:g}s"
    ),
    "toolCallUnavailable": "no connected client can run this tool",
}

#: Threads without tools remembered as read (past it, the tenth read first is
#: forgotten: their next turn reads them again). A thread with tools is in
#: ``tools`` and never read twice.
LOADED_THREADS = 10_000
DYNAMIC_METHOD = "item/tool/call"
CHANNEL_METHOD = "ext/channel/toolCall"


@dataclass(frozen=True)
class ClientTool:
    """A tool a client declared for a thread; the model sees it as :attr:`model_name`."""

    namespace: str | None
    name: str
    description: str
    input_schema: dict[str, Any]
    # Set: a tool of this external channel's adapter (``ext/channel/toolCall``).
    channel: str | None = None
    # DotCraft's ``approval`` hint: ``{kind, targetArgument, operation?, operationArgument?}``.
    approval: Mapping[str, Any] | None = None
    # Set (``_family/method``): a call is ``ext/acp/<acp_method>`` to the thread's editor.
    acp_method: str | None = None

    @property
    def model_name(self) -> str:
        """``namespace__name``, or ``name`` without a namespace."""
        return f"{self.namespace}__{self.name}" if self.namespace else self.name

    def spec(self) -> ToolSpec:
        return ToolSpec(self.model_name, self.description, self.input_schema)


@dataclass
class PendingToolCall(PendingApproval["WireModel"]):
    """An ``item/tool/call`` (or ``ext/channel/toolCall``) waiting for the
    owner's answer (the approval machinery: asked once per participant,
    timeout, reconnect grace)."""

    answer: Mapping[str, object] | None = None
    method: str = DYNAMIC_METHOD
    channel: str | None = None  # a channel tool's channel: only its adapters are asked

    async def _put(self, participant: Participant) -> object:
        assert is_tool_caller(participant)
        return await participant.call_tool(self.params, self.timeout, self.method)

    def _refused(self, participant: Participant, message: str) -> None:
        self.answer = {"success": False, "errorCode": "clientError", "errorMessage": message}
        self.resolve("answered", participant)

    def _answered(self, participant: Participant, answer: object) -> None:
        self.answer = answer if isinstance(answer, Mapping) else {}  # invalid: no `success`
        self.resolve("answered", participant)


def client_tool_need(tool: ClientTool, arguments: Any, workspace: Path) -> ApprovalNeed | None:
    """The approval a call of ``tool`` needs by its ``approval`` hint (DotCraft's
    ``{kind, targetArgument, operation?, operationArgument?}``), ``None`` without one.

    ``approvalType`` is the hint's ``kind`` (``file``, ``shell``,
    ``remoteResource``, ...); the target is the argument ``targetArgument``
    names; the operation the argument ``operationArgument`` names, else
    ``operation``, else the tool's name. A ``file`` or ``shell`` target that
    resolves outside the workspace (or cannot be judged) counts as outside
    (the boundary rules and ``requireApprovalOutsideWorkspace`` apply as to
    the built-in tools).
    """
    hint = tool.approval
    if not hint or not hint.get("kind"):
        return None
    args = arguments if isinstance(arguments, Mapping) else {}
    kind = str(hint["kind"])
    target = _argument_text(args.get(str(hint.get("targetArgument") or "")))
    operation = _argument_text(args.get(str(hint.get("operationArgument") or "")))
    operation = operation or str(hint.get("operation") or "") or tool.name
    outside = False
    if kind in ("file", "shell"):
        value = args.get(str(hint.get("targetArgument") or ""))
        outside = _outside_workspace(value, workspace, command=kind == "shell")
    return ApprovalNeed(
        kind=kind,
        operation=operation,
        target=target,
        reason=f"The client's tool {tool.model_name} wants to {operation} {target}".rstrip(),
        outside_workspace=outside,
    )


def _outside_workspace(target: object, workspace: Path, *, command: bool = False) -> bool:
    """Whether a client tool's path target is outside the workspace, as the
    built-in tools judge it (symlinks followed, ``.craft/`` outside); what
    cannot be judged (missing, not a string, ``~``, a NUL) counts as outside.
    A ``shell`` target is judged as a working directory only when it is one
    word; a command line (spaces, shell syntax) cannot be judged."""
    if not isinstance(target, str) or not target or target.startswith("~"):
        return True  # the client may expand `~`, or read a path out of a list
    if command and any(c.isspace() or c in "|&;<>()$`'\"*?![]{}" for c in target):
        return True
    try:
        return not Sandbox(workspace).resolve(target).inside
    except (ToolError, ValueError, OSError):
        return True


def _argument_text(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def can_call_tools(participant: Participant | None) -> bool:
    return (
        participant is not None
        and not participant.closed
        and is_tool_caller(participant)
        and participant.can_call_tools()
    )


class ChannelToolSource(Protocol):
    """The external channels' tools (implemented by the channel adapter hub)."""

    def channel_tools(self, active: ActiveTurn) -> list[ClientTool]:
        """The channel tools offered on this turn (``ClientTool.channel`` set)."""

    def channel_caller(self, active: ActiveTurn, channel: str) -> Participant | None:
        """The adapter connection to ask a call of ``channel``'s tool (``None``: none attached)."""

    def channel_call_params(
        self, active: ActiveTurn, tool: ClientTool, call_id: str, arguments: dict[str, Any]
    ) -> WireModel:
        """The ``ext/channel/toolCall`` params of one call."""


class ClientToolCalls:
    """The tools clients declared per thread, and their calls.

    A thread's tools are stored with it (read back at its first turn after a
    restart) and run by the thread's **owner**: the participant that started it, or
    that resumed it last, or, while the owner is gone, the first client able
    to run tools that subscribes to it or starts a turn on it. A pending call
    is asked again of a new owner. No answer within the approval timeout, an owner gone past the
    reconnect grace, or an invalid answer fail the call; the turn goes on.
    """

    def __init__(self, items: ItemLog, approvals: ApprovalBroker) -> None:
        self.items = items
        self.approvals = approvals
        self.tools: dict[str, dict[str, ClientTool]] = {}  # thread -> model name -> tool
        # Each thread's bound client, held weakly: a client that left (its
        # connection closed) is not kept alive by the threads it started, with its
        # connection and buffers, for as long as the server runs. Gone and
        # closed read alike here: an empty seat.
        self.owners: weakref.WeakValueDictionary[str, Participant] = weakref.WeakValueDictionary()
        self.pending: dict[str, PendingToolCall] = {}
        # Threads read and found without tools, in the order read (a thread with
        # tools is in ``tools``).
        self._loaded: dict[str, None] = {}
        # The external channels' tools (set by the channel adapter hub).
        self.channel_source: ChannelToolSource | None = None
        approvals.offer_listeners.append(self._offered)
        # The thread's editor (ext/acp/*) and Node REPL host (ext/nodeRepl/*): the
        # same seat, asked the same way.
        self.editor_proxy = EditorProxy(approvals, self.owners.get)
        self.node_repl = NodeRepl(items, approvals, self.owners.get)

    # --- declaring, binding ----------------------------------------------------------

    async def declare(
        self, thread_id: str, tools: list[dict[str, Any]], owner: Participant | None
    ) -> None:
        """Store ``tools`` (``DynamicToolSpec`` wire objects) with the thread;
        ``owner`` runs them."""
        if tools:
            await self.items.repo.save_dynamic_tools(thread_id, tools)
        self._remember(thread_id, tools)
        if owner is not None:
            self.owners[thread_id] = owner

    async def load(self, thread_id: str) -> None:
        """Read the thread's stored tools once per process."""
        if thread_id not in self._loaded and thread_id not in self.tools:
            self._remember(thread_id, await self.items.repo.dynamic_tools(thread_id))

    def _remember(self, thread_id: str, tools: list[dict[str, Any]]) -> None:
        declared = [
            ClientTool(
                namespace=tool.get("namespace") or None,
                name=str(tool["name"]),
                description=str(tool.get("description", "")),
                input_schema=dict(tool.get("inputSchema") or {}),
                approval=tool.get("approval") if isinstance(tool.get("approval"), dict) else None,
                acp_method=tool.get("acpMethod") or None,
            )
            for tool in tools
        ]
        if declared:
            self.tools[thread_id] = {tool.model_name: tool for tool in declared}
            self._loaded.pop(thread_id, None)
            return
        if thread_id not in self._loaded:
            make_room(self._loaded, LOADED_THREADS)
        self._loaded[thread_id] = None

    def bind(self, thread_id: str, owner: Participant) -> None:
        """``owner`` resumed the thread: it runs the thread's tools from now on,
        and is asked a call that is pending."""
        self.owners[thread_id] = owner
        # Asked again only when nobody is being asked any more (the owner left): a
        # second client resuming the thread must not answer for a live one (or run a
        # tool, or a terminal command, a second time).
        pending = self.pending.get(thread_id)
        if (
            pending is not None
            and pending.channel is None
            and not pending.live
            and can_call_tools(owner)
        ):
            pending.ask(owner)
        self.editor_proxy.offer(thread_id, owner)
        self.node_repl.offer(thread_id, owner)

    def adapter_attached(self, channel: str, adapter: Participant) -> None:
        """An adapter of ``channel`` (re)connected: it is asked the channel's pending calls."""
        if not can_call_tools(adapter):
            return
        for pending in list(self.pending.values()):
            if pending.channel is not None and pending.channel.lower() == channel.lower():
                pending.ask(adapter)

    def _offered(self, thread_id: str, participant: Participant) -> None:
        """A participant subscribed to (or resumed) the thread: if the owner is
        gone, it takes the owner's seat."""
        owner = self.owners.get(thread_id)
        if participant is not owner and not (owner is None or owner.closed):
            return
        if can_call_tools(participant):
            self.bind(thread_id, participant)

    def claim(self, thread_id: str, owner: Participant) -> None:
        """``owner`` started the thread (without tools): it is the thread's bound client."""
        self.owners.setdefault(thread_id, owner)

    def forget_thread(self, thread_id: str) -> None:
        self.tools.pop(thread_id, None)
        self.owners.pop(thread_id, None)
        self._loaded.pop(thread_id, None)

    # --- what the model sees ------------------------------------------------------------

    def specs(self, active: ActiveTurn, taken: set[str]) -> list[ToolSpec]:
        """The turn's client tools for the model (a name already ``taken`` by a
        built-in tool is not offered: the built-in wins; a dynamic tool wins
        over a channel tool of the same name)."""
        offered = self._offered_tools(active)
        return [tool.spec() for name, tool in offered.items() if name not in taken]

    def _offered_tools(self, active: ActiveTurn) -> dict[str, ClientTool]:
        tools: dict[str, ClientTool] = {}
        if self.channel_source is not None:
            for tool in self.channel_source.channel_tools(active):
                tools.setdefault(tool.model_name, tool)
        tools.update(
            (name, tool)
            for name, tool in self.tools.get(active.thread_id, {}).items()
            if tool.acp_method is None
            or declared_tool_served(self.editor_proxy, active, tool.acp_method)
        )
        return tools

    def find(self, active: ActiveTurn, model_name: str) -> ClientTool | None:
        return self._offered_tools(active).get(model_name)

    # --- a call -------------------------------------------------------------------------

    async def declined(
        self, active: ActiveTurn, tool: ClientTool, call_id: str, arguments: Any, why: str
    ) -> str:
        """Record a call the user declined (its approval): the item fails
        (``errorCode: "approvalDeclined"``) and the client is not asked."""
        return await self.refused(
            active, tool, call_id, "approvalDeclined", f"Declined: {why}.", arguments
        )

    async def refused(
        self,
        active: ActiveTurn,
        tool: ClientTool,
        call_id: str,
        code: str,
        message: str,
        arguments: Any = None,
    ) -> str:
        """Record a call the client is not asked (its item fails with ``code``
        and ``message``); the tool result for the model."""
        item = await self.items.open(active, *self._item_payload(tool, call_id, arguments))
        item.payload.update(_failure(code, message))
        await self.items.complete(active, item)
        return model_text(item.payload)

    @staticmethod
    def _item_payload(tool: ClientTool, call_id: str, arguments: Any) -> tuple[str, dict[str, Any]]:
        args = dict(arguments) if isinstance(arguments, Mapping) else {}
        if tool.channel is not None:
            return "pluginFunctionCall", {
                "pluginId": channel_plugin_id(tool.channel),
                "functionName": tool.name,
                "callId": call_id,
                "arguments": args,
            }
        payload: dict[str, Any] = {"toolName": tool.name, "callId": call_id, "arguments": args}
        if tool.namespace:
            payload = {"namespace": tool.namespace, **payload}
        return "dynamicToolCall", payload

    async def call(self, active: ActiveTurn, tool: ClientTool, call_id: str, arguments: Any) -> str:
        """Run one call through the owner (a channel tool: through the channel's
        adapter); record its ``dynamicToolCall`` (``pluginFunctionCall``) item;
        return the tool result for the model."""
        args = dict(arguments) if isinstance(arguments, Mapping) else {}
        kind, payload = self._item_payload(tool, call_id, arguments)
        params: WireModel
        if tool.channel is not None:
            assert self.channel_source is not None
            params = self.channel_source.channel_call_params(active, tool, call_id, args)
        else:
            from appserver.protocol.dynamic_tools import ToolCallParams

            params = ToolCallParams(
                thread_id=active.thread_id,
                turn_id=active.record.id,
                call_id=call_id,
                namespace=tool.namespace,
                tool=tool.name,
                arguments=args,
            )
        item = await self.items.open(active, kind, payload)
        if tool.acp_method is not None:
            result = await declared_tool_result(self.editor_proxy, active, tool.acp_method, args)
        else:
            result = await self._ask(active, params, tool.channel)
        item.payload.update(result)
        await self.items.complete(active, item)
        return model_text(result)

    def _owner(self, active: ActiveTurn, channel: str | None) -> Participant | None:
        if channel is not None:
            assert self.channel_source is not None
            return self.channel_source.channel_caller(active, channel)
        owner = self.owners.get(active.thread_id)
        if (owner is None or owner.closed) and can_call_tools(active.origin):
            # The seat is empty: the client that started this turn takes it.
            assert active.origin is not None
            owner = self.owners[active.thread_id] = active.origin
        return owner

    async def _ask(
        self, active: ActiveTurn, params: WireModel, channel: str | None
    ) -> dict[str, Any]:
        owner = self._owner(active, channel)
        if owner is not None and not owner.closed and not can_call_tools(owner):
            return _failure("toolCallUnavailable", CLIENT_TOOL_ERRORS["toolCallUnavailable"])
        assert active.tg is not None
        broker = self.approvals
        method = DYNAMIC_METHOD if channel is None else CHANNEL_METHOD
        pending = PendingToolCall(
            params,
            active.tg,
            broker.timeout,
            broker.reconnect_grace,
            method=method,
            channel=channel,
        )
        self.pending[active.thread_id] = pending
        try:
            if owner is not None and can_call_tools(owner):
                pending.ask(owner)
            decided, reason = await pending.wait()
        finally:
            self.pending.pop(active.thread_id, None)
        if decided is None:
            code = "toolCallTimeout" if reason == "approval_timeout" else "toolCallClientGone"
            message = CLIENT_TOOL_ERRORS[code].format(
                timeout=broker.timeout, grace=broker.reconnect_grace
            )
            log.info("client tool call %s on %s failed: %s", method, active.thread_id, code)
            return _failure(code, message)
        return parse_tool_result(pending.answer or {}, method)


def channel_plugin_id(channel: str) -> str:
    """The ``pluginId`` of a channel tool's ``pluginFunctionCall`` item."""
    return f"channel:{channel}"


def _failure(code: str, message: str) -> dict[str, Any]:
    return {"success": False, "errorCode": code, "errorMessage": message}


def parse_tool_result(answer: Mapping[str, object], method: str = DYNAMIC_METHOD) -> dict[str, Any]:
    """The client's answer as ``dynamicToolCall`` (``pluginFunctionCall``)
    payload fields; anything malformed is a failure (``invalidResult``)."""
    from pydantic import ValidationError

    from appserver.protocol.base import first_error
    from appserver.protocol.dynamic_tools import ToolCallResult

    try:
        result = ToolCallResult.model_validate(dict(answer))
    except ValidationError as exc:
        return _failure("invalidResult", f"invalid answer to {method}: {first_error(exc)}")
    if not isinstance(answer.get("success"), bool):
        return _failure("invalidResult", f"invalid answer to {method}: `success` is required")
    for part in result.content_items or []:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            continue
        if kind == "image" and isinstance(part.get("imageUrl"), str):
            continue
        return _failure(
            "invalidResult",
            f"invalid answer to {method}: a content item is not "
            '{type: "text", text} or {type: "image", imageUrl}',
        )
    fields = result.model_dump(by_alias=True, exclude_none=True)
    fields["success"] = result.success
    return {
        key: fields[key]
        for key in ("contentItems", "structuredResult", "success", "errorCode", "errorMessage")
        if key in fields
    }
