"""The agent loop: call the model with the history, stream its answer into
items, run the tools it calls, repeat until it answers without tools."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio.to_thread

from appserver.protocol.encoding import scrub_surrogates
from appserver.providers.base import (
    Message,
    ModelEvent,
    ModelRequest,
    Provider,
    ProviderError,
    ReasoningDelta,
    Stop,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    ToolSpec,
    Usage,
)
from appserver.runtime.history import SUMMARY_PREFIX, messages_from_items
from appserver.runtime.instructions import (
    INSTRUCTIONS_FILE,
    Environment,
    ProjectInstructions,
    PromptSection,
    compose,
    system_text,
)
from appserver.runtime.shared_runs import SharedRuns
from appserver.runtime.subagent_prompt import environment_line
from appserver.runtime.subagent_roles import tool_offered
from appserver.runtime.turns.compaction import Compactor
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import ActiveTurn, EngineConfig, TurnFailure, UserInput
from appserver.runtime.turns.queue import InputQueues
from appserver.runtime.turns.tooling import ToolRunner
from appserver.runtime.turns.usage import counted
from appserver.storage.records import ItemRecord
from appserver.storage.threads import ThreadRepository
from appserver.storage.user_settings import user_home


class AgentLoop:
    """Drives the model and the tools for one turn."""

    def __init__(
        self,
        items: ItemLog,
        tools: ToolRunner,
        queues: InputQueues,
        repo: ThreadRepository,
        config: EngineConfig,
        provider: Callable[[], Provider],
    ) -> None:
        self.items = items
        self.tools = tools
        self.queues = queues
        self.repo = repo
        self.config = config
        self.provider = provider  # read per call: the workspace may switch providers
        self.compactor = Compactor(items, config, provider)
        # The runner is built before the config reaches it (turns/engine.py).
        tools.output_limit = config.tool_output_max_bytes
        tools.node_repl.answer_margin = config.node_repl_answer_margin
        self.project_instructions = ProjectInstructions(
            tools.workspace, self._user_instructions, project=config.project_instructions
        )
        self._section_runs: SharedRuns[list[PromptSection]] = SharedRuns()

    def _user_instructions(self) -> Path | None:
        if not self.config.user_instructions:
            return None
        return user_home() / INSTRUCTIONS_FILE

    def system_sections(
        self, configuration: Mapping[str, Any], turn_instructions: Iterable[str] = ()
    ) -> list[PromptSection]:
        """The system text of a model request of a thread with this
        configuration, in sections (``prompt/read`` shows them)."""
        workspace = self.project_instructions.workspace
        environment = Environment(
            cwd=workspace,
            workspace=workspace,
            approval_policy=self.tools.approvals.effective_policy(configuration),
            ask_outside_workspace=configuration.get("requireApprovalOutsideWorkspace") is not False,
            subagent_profiles=environment_line(workspace, configuration),
        )
        agent_instructions = configuration.get("agentInstructions")
        role_instructions = configuration.get("roleInstructions")  # a SubAgent child's role
        return compose(
            self.config.system_prompt,
            environment,
            self.project_instructions.files(workspace),
            str(agent_instructions) if agent_instructions else None,
            turn_instructions,
            str(role_instructions) if role_instructions else None,
        )

    async def _sections(
        self, configuration: Mapping[str, Any], instructions: list[str]
    ) -> list[PromptSection]:
        """:meth:`system_sections` off the event loop (it stats, and on a change
        reads, the AGENTS.md files), one run shared by the turns that ask for
        the same sections together (a burst of new threads)."""
        work = functools.partial(self.system_sections, configuration, instructions)
        try:
            key = (json.dumps(configuration, sort_keys=True), *instructions)
        except (TypeError, ValueError):  # not JSON (never from the wire): not shared
            return await anyio.to_thread.run_sync(work)
        return list(await self._section_runs.run(key, work))

    async def run(self, active: ActiveTurn, user: UserInput) -> None:
        active.instructions = list(user.instructions)
        history, earlier = await self._history(active, user)
        compacted = False
        for call_number in range(1, self.config.max_model_calls + 1):
            await self._take_guidance(active, history)
            if not compacted and earlier and self.compactor.over_limit(history):
                # Once per turn: earlier turns become one summary message.
                compacted = True
                summary = await self.compactor.compact(active, history[:earlier], "auto")
                if summary is not None:
                    history[:earlier] = [Message("user", SUMMARY_PREFIX + summary)]
                    earlier = 1
            calls = await self._model_call(active, history)
            if not calls:
                kept = active.kept_guidance.intersection(active.guidance)
                if kept and call_number < self.config.max_model_calls:
                    continue  # steered in meanwhile: answered in this turn, as Codex does
                active.closing = True  # a steer from here on would find no call to take it
                return
            for call in calls:
                await self.tools.call(active, call, history)
        raise TurnFailure(
            f"the agent made {self.config.max_model_calls} model calls without finishing",
            "max_model_calls",
        )

    async def compact_turn(self, active: ActiveTurn) -> None:
        """A turn that only compacts the thread's context (``trigger: "manual"``)."""
        history = await self._earlier_messages(active)
        await self.compactor.compact(active, history, "manual")

    async def _history(self, active: ActiveTurn, user: UserInput) -> tuple[list[Message], int]:
        """The conversation for the model, and how many of its messages come
        from earlier turns (what compaction may summarise)."""
        if user.client_history is not None:
            history = list(user.client_history)
        else:
            history = await self._earlier_messages(active)
        earlier = len(history)
        history.extend(messages_from_items(active.items, self.config.tool_output_max_bytes))
        return history, earlier

    async def _earlier_messages(self, active: ActiveTurn) -> list[Message]:
        if active.record.seq == 1:
            # The thread's first turn (numbers only grow, and turn_001 could not
            # have been stored beside an earlier one): nothing earlier to read.
            return []
        turns, _ = await self.repo.turns(active.thread_id)
        prior = [turn.id for turn in turns if turn.id != active.record.id]
        stored = await self.repo.items(active.thread_id, prior)
        earlier = (item for turn_id in prior for item in stored[turn_id])
        return messages_from_items(earlier, self.config.tool_output_max_bytes)

    async def _take_guidance(self, active: ActiveTurn, history: list[Message]) -> None:
        """Steered inputs join the running turn at this safe boundary."""
        if not active.guidance:
            return
        # Under the queue's lock, on the queue as stored: with nodes sharing a
        # database another node may have queued inputs since (one node: no-op
        # lock, the queue in memory).
        async with self.queues.lock(active.thread_id):
            queue = await self.queues.load(active.thread_id)
            for entry_id in active.guidance:
                entry = next((e for e in queue if e.wire.id == entry_id), None)
                if entry is None:
                    continue
                queue.remove(entry)
                active.instructions.extend(entry.instructions)
                await self.items.user_message(active, entry.to_user_input("guidance"))
                history.extend(messages_from_items(active.items[-1:]))  # a user message
            active.guidance.clear()
            await self.queues.changed(active.thread_id, include=active.watchers)

    async def _model_call(self, active: ActiveTurn, history: list[Message]) -> list[ToolCall]:
        provider = self.provider()
        config = active.thread.configuration or {}
        system = system_text(await self._sections(config, list(active.instructions)))
        await self.tools.client_tools.load(active.thread_id)
        request = ModelRequest(
            model=str(config.get("model") or provider.default_model),
            messages=history,
            system=system,
            tools=self._tool_specs(active),
        )
        text_item: ItemRecord | None = None
        reasoning_item: ItemRecord | None = None
        call_items: dict[int, ItemRecord] = {}
        client_calls: set[int] = set()  # calls of the client's own tools (no toolCall item)
        calls: list[ToolCall] = []
        items = self.items
        # aclosing: leaving early (interrupt, error) closes the HTTP stream at once.
        # counted: a call cut short still counts what it streamed (turns/usage.py).
        async with contextlib.aclosing(
            counted(active, request, provider.stream(request))
        ) as events:
            async for raw_event in events:
                event = text_safe(raw_event)
                if isinstance(event, TextDelta):
                    if text_item is None:
                        text_item = await items.open_text(active, "agentMessage", event.text)
                    else:
                        await items.text_delta(active, text_item, event.text)
                elif isinstance(event, ReasoningDelta):
                    if reasoning_item is None:
                        reasoning_item = await items.open_text(
                            active, "reasoningContent", event.text
                        )
                    else:
                        await items.text_delta(active, reasoning_item, event.text)
                elif isinstance(event, ToolCallDelta):
                    if event.index in client_calls or (
                        event.index not in call_items
                        and self.tools.is_client_tool(active, event.name or "")
                    ):
                        client_calls.add(event.index)  # its own item says it all
                        continue
                    item = call_items.get(event.index)
                    if item is None:
                        item = await items.open(
                            active,
                            "toolCall",
                            {
                                "toolName": event.name or "",
                                "callId": event.call_id or "",
                                "arguments": {},
                            },
                        )
                        call_items[event.index] = item
                    await items.arguments_delta(active, item, event)
                elif isinstance(event, ToolCallDone):
                    if event.index in client_calls or (
                        event.index not in call_items
                        and self.tools.is_client_tool(active, event.call.name)
                    ):
                        calls.append(event.call)
                        continue
                    item = call_items.get(event.index)
                    if item is None:
                        item = items.new(active, "toolCall", {})
                        await items.start(active, item)
                    item.payload = {
                        "toolName": event.call.name,
                        "callId": event.call.call_id,
                        "arguments": event.call.arguments,
                    }
                    if event.arguments_error:
                        item.payload["argumentsError"] = event.arguments_error
                    await items.complete(active, item)
                    calls.append(event.call)
                elif isinstance(event, Usage):
                    items.usage(active, event)
                elif isinstance(event, ProviderError):
                    raise TurnFailure(
                        f"model provider error ({event.kind}): {event.message}",
                        f"provider_{event.kind}",
                    )
                elif isinstance(event, Stop):
                    break
        for open_item in (reasoning_item, text_item):
            if open_item is not None and open_item.id in active.open_items:
                active.held.append(items.completion(active, open_item))
        if calls:
            await items.flush(active)  # before the tools: what they announce comes after
        # (No call: the turn ends now, and these close with it, in one commit.)
        text = str(text_item.payload.get("text", "")) if text_item is not None else ""
        if text or calls:
            # Text and tool calls of one response are one assistant message.
            history.append(Message("assistant", text, tool_calls=list(calls)))
        return calls

    def _tool_specs(self, active: ActiveTurn) -> list[ToolSpec]:
        """The built-in tools the thread may use, then those its client serves or declared."""
        thread = active.thread
        specs = [spec for spec in self.tools.tools.specs() if tool_offered(thread, spec.name)]
        taken = {spec.name for spec in specs}
        return specs + self.tools.offered_specs(active, taken)


def text_safe(event: ModelEvent) -> ModelEvent:
    """``event`` with lone UTF-16 surrogates in the model's text replaced by
    U+FFFD (a provider's JSON may carry ``"\ud800"``; it could be neither
    stored nor sent, and would stop the turn). Plain text passes untouched."""
    if isinstance(event, TextDelta | ReasoningDelta):
        if event.text.isascii():  # the hot path: most deltas
            return event
        text = scrub_surrogates(event.text)
        return event if text is event.text else replace(event, text=text)
    if isinstance(event, ToolCallDelta):
        texts = (event.arguments_delta, event.call_id or "", event.name or "")
        if all(text.isascii() for text in texts):  # the hot path: a call's JSON streaming
            return event
        return replace(
            event,
            arguments_delta=scrub_surrogates(event.arguments_delta),
            call_id=scrub_surrogates(event.call_id),
            name=scrub_surrogates(event.name),
        )
    if isinstance(event, ToolCallDone):
        call = event.call
        fixed_call = replace(
            call,
            call_id=scrub_surrogates(call.call_id),
            name=scrub_surrogates(call.name),
            arguments=scrub_surrogates(call.arguments),
        )
        return event if fixed_call == call else replace(event, call=fixed_call)
    return event
