"""Running the agent's tool calls: planning, approval, execution, results.

The shell runs with a ``commandExecution`` companion item whose output
streams as deltas; every other tool returns its outcome at once. A crash of
a tool is the model's problem (an error result), never the turn's.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import anyio

from appserver.providers.base import Message, ToolCall, ToolSpec
from appserver.runtime.read_only_setting import read_only_unasked
from appserver.runtime.subagent_roles import tool_offered
from appserver.runtime.tool_output import DEFAULT_TOOL_OUTPUT_MAX_BYTES, tool_message
from appserver.runtime.turns.approval_conversation import ApprovalConversation
from appserver.runtime.turns.client_tools import ClientTool, ClientToolCalls, client_tool_need
from appserver.runtime.turns.editor_families import EditorFamilyTools
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import ActiveTurn
from appserver.runtime.turns.turn_diff import TurnDiff, wire_changes
from appserver.tools.base import ToolContext, ToolError, ToolOutcome
from appserver.tools.registry import ToolRegistry

log = logging.getLogger("appserver.turns")


class ToolRunner:
    """Runs one tool call of a turn and records its result."""

    def __init__(
        self,
        items: ItemLog,
        approvals: ApprovalConversation,
        tools: ToolRegistry,
        workspace: Path,
        output_limit: int = DEFAULT_TOOL_OUTPUT_MAX_BYTES,
    ) -> None:
        self.items = items
        self.approvals = approvals
        self.tools = tools
        self.workspace = workspace
        # How much of each output the model reads (EngineConfig.tool_output_max_bytes).
        self.output_limit = output_limit
        # The tools clients declared (thread/start.dynamicTools) and the external
        # channels' adapters registered (channelTools), run by the client.
        self.client_tools = ClientToolCalls(items, approvals.approvals)
        # The server's tools that are requests of the thread's client: the Node
        # REPL (ext/nodeRepl/*) and the editor's families (ext/acp/<family>/*).
        self.node_repl = self.client_tools.node_repl
        self.family_tools = EditorFamilyTools(self.client_tools.editor_proxy)

    def is_client_tool(self, active: ActiveTurn, name: str) -> bool:
        """``name`` is recorded by its own item, not a ``toolCall``: ``NodeReplJs``
        or a client's tool (a built-in or family tool of that name wins, as in
        :meth:`offered_specs`)."""
        if self._server_tool(active, name):
            return False
        if self.node_repl.offers(active, name):
            return True
        return self.client_tools.find(active, name) is not None

    def _server_tool(self, active: ActiveTurn, name: str) -> bool:
        """``name`` is a built-in tool, or a family tool of this turn."""
        return name in self.tools or self.family_tools.find(active, name) is not None

    def offered_specs(self, active: ActiveTurn, taken: set[str]) -> list[ToolSpec]:
        """The tools of this turn beyond the built-in ones (``taken``): the Node
        REPL's and the editor families' when the thread's client serves them,
        then the tools clients declared (a name already taken is not offered)."""
        specs = self.node_repl.specs(active, taken) + self.family_tools.specs(active, taken)
        taken = taken | {spec.name for spec in specs}
        return specs + self.client_tools.specs(active, taken)

    async def call(self, active: ActiveTurn, call: ToolCall, history: list[Message]) -> None:
        """Run ``call``, store a ``toolResult`` item and add the result to ``history``.

        The item keeps the whole output (and only the path, media type and
        digest of an image); the model's copy is cut by the one truncation
        rule (``runtime.tool_output``) and carries the images. A client's
        tool is asked of the client instead; its ``dynamicToolCall`` (a
        channel tool: ``pluginFunctionCall``) item is the call's only
        projection (no ``toolResult``).
        """
        if not self._server_tool(active, call.name):
            if self.node_repl.offers(active, call.name):
                output, images = await self.node_repl.call(active, call)
                history.append(
                    tool_message(call.call_id, call.name, output, self.output_limit, images)
                )
                return
            client_tool = self.client_tools.find(active, call.name)
            if client_tool is not None:
                if call.arguments_error is not None:  # not sent: the model is told why
                    output = await self.client_tools.refused(
                        active, client_tool, call.call_id, "invalidArguments", call.arguments_error
                    )
                else:
                    output = await self._call_client_tool(active, client_tool, call)
                history.append(tool_message(call.call_id, call.name, output, self.output_limit))
                return
        outcome = await self._run(active, call)
        payload: dict[str, Any] = {
            "callId": call.call_id,
            "result": outcome.output,
            "success": outcome.success,
        }
        if outcome.details.get("images"):
            payload["images"] = outcome.details["images"]
        changes = wire_changes(outcome.details)
        if changes:
            payload["changes"] = changes
        await self.items.instant(active, "toolResult", payload)
        if changes:
            await self._diff_updated(active, changes)
        history.append(
            tool_message(call.call_id, call.name, outcome.output, self.output_limit, outcome.images)
        )

    async def _diff_updated(self, active: ActiveTurn, changes: list[dict[str, str]]) -> None:
        """Add ``changes`` to the turn's diff and send the whole of it."""
        if active.file_changes is None:
            active.file_changes = TurnDiff(self.workspace)
        diff = await active.file_changes.record(changes)
        await self.items.journal.emit(
            active.thread_id,
            "turn/diff/updated",
            {"threadId": active.thread_id, "turnId": active.record.id, "diff": diff},
            include=active.watchers,
        )

    async def _call_client_tool(self, active: ActiveTurn, tool: ClientTool, call: ToolCall) -> str:
        """A client's tool: its ``approval`` hint is settled first, as a built-in
        tool's approval is; a declined call is not sent to the client."""
        need = client_tool_need(tool, call.arguments, self.workspace)
        if need is not None:
            verdict = await self.approvals.settle(active, need)
            if verdict.decision == "cancel":
                active.cancel("approvalCancelled")
                await anyio.lowlevel.checkpoint()  # the cancelled scope raises here
            if not verdict.approved:
                why = verdict.fallback or "the user declined"
                return await self.client_tools.declined(
                    active, tool, call.call_id, call.arguments, why
                )
        return await self.client_tools.call(active, tool, call.call_id, call.arguments)

    async def _run(self, active: ActiveTurn, call: ToolCall) -> ToolOutcome:
        if call.arguments_error is not None:
            return ToolOutcome(False, f"Error: the call was not run: {call.arguments_error}")
        tool = self.tools.get(call.name)
        if tool is None:
            family_tool = self.family_tools.find(active, call.name)
            if family_tool is not None:  # a request of the editor's family (no approval)
                return await self.family_tools.run(active, family_tool, call.arguments)
            return ToolOutcome(False, f"Error: unknown tool '{call.name}'")
        if not tool_offered(active.thread, call.name):  # a role's lists (SubAgents)
            return ToolOutcome(False, f"Error: tool '{call.name}' is not available here")
        editor = self.client_tools.editor_proxy.editor(active)
        ctx = ToolContext(
            workspace=self.workspace,
            thread_id=active.thread_id,
            turn_id=active.record.id,
            call_id=call.call_id,
            editor=editor,
            editor_terminals=editor if editor is not None and editor.can_run else None,
        )
        if call.name == "shell":  # whether known read-only commands run unasked
            ctx.read_only_unasked = read_only_unasked(active.thread.configuration, self.workspace)
            ctx.workspace_trusted = self.approvals.workspace_trusted()
        try:
            plan = tool.plan(call.arguments, ctx)
        except ToolError as exc:
            return ToolOutcome(False, f"Error: {exc}")
        if plan.approval is not None:
            verdict = await self.approvals.settle(active, plan.approval)
            if verdict.decision == "cancel":
                active.cancel("approvalCancelled")
                await anyio.lowlevel.checkpoint()  # the cancelled scope raises here
            if not verdict.approved:
                why = verdict.fallback or "the user declined"
                return ToolOutcome(False, f"Declined: {why}.")
        if call.name == "shell":
            return await self._run_shell(active, tool, plan, ctx)
        try:
            return await tool.run(plan, ctx)
        except ToolError as exc:
            return ToolOutcome(False, f"Error: {exc}")
        except Exception as exc:
            log.exception("tool %s crashed", call.name)
            return ToolOutcome(False, f"Error: the tool crashed ({type(exc).__name__})")

    async def _run_shell(
        self, active: ActiveTurn, tool: Any, plan: Any, ctx: ToolContext
    ) -> ToolOutcome:
        """Shell runs with a ``commandExecution`` companion item and output deltas."""
        item = await self.items.open(
            active,
            "commandExecution",
            {
                "command": plan.arguments.get("command", ""),
                "workingDirectory": str(plan.resolved.get("cwd", self.workspace)),
                # "editor": the command runs in the IDE's terminal (ext/acp/terminal/*).
                # (A run_in_background command always runs on the host.)
                "source": "editor" if _in_editor(ctx, plan) else "host",
                "status": "inProgress",
                "aggregatedOutput": "",
                "callId": ctx.call_id,
            },
        )
        send, receive = anyio.create_memory_object_stream[str](1024)
        ctx.on_output = lambda chunk: _offer(send, chunk)

        async def forward() -> None:
            async with receive:
                async for chunk in receive:
                    await self.items.output_delta(active, item, chunk)

        outcome: ToolOutcome | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(forward)
                try:
                    outcome = await tool.run(plan, ctx)
                except ToolError as exc:
                    outcome = ToolOutcome(False, f"Error: {exc}")
                except Exception as exc:
                    if isinstance(exc, anyio.get_cancelled_exc_class()):
                        raise
                    log.exception("shell tool crashed")
                    outcome = ToolOutcome(False, f"Error: the tool crashed ({type(exc).__name__})")
                finally:
                    send.close()
        finally:
            details = outcome.details if outcome else {}
            item.payload["status"] = details.get("command_status") or (
                "completed"
                if outcome and outcome.success
                else ("failed" if outcome else "cancelled")
            )
            for key, wire in _COMMAND_FACTS:
                if key in details:
                    item.payload[wire] = details[key]
            if outcome is not None:
                with anyio.CancelScope(shield=True):
                    await self.items.complete(active, item)
        assert outcome is not None  # otherwise the cancellation propagated
        return outcome


# Outcome details copied onto the commandExecution item; a background shell call
# (DotCraft's CommandExecutionTracker.Complete) adds its terminal's facts and
# ``command_status`` (``backgrounded``).
_COMMAND_FACTS = (
    ("exit_code", "exitCode"),
    ("duration_ms", "durationMs"),
    ("truncated", "truncated"),
    ("original_output_chars", "originalOutputChars"),
    ("session_id", "sessionId"),
    ("output_path", "outputPath"),
    ("background_reason", "backgroundReason"),
)


def _in_editor(ctx: ToolContext, plan: Any) -> bool:
    return ctx.editor_terminals is not None and not plan.resolved.get("background")


def _offer(send: Any, chunk: str) -> None:
    # If the forwarder lags, drop live chunks: the tool's final output is kept anyway.
    with contextlib.suppress(
        anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError
    ):
        send.send_nowait(chunk)
