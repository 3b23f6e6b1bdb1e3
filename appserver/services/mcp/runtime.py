"""Live connections to the effective MCP servers, one background task each.

``reconcile(configs)``: servers that disappeared are stopped; new, changed
and failed ones, and any named in ``restart``, get a fresh task; unchanged
ones keep running. A task goes ``idle -> starting -> ready | error``
(disabled servers go straight to ``disabled``) and every change of a
*current* server is reported through ``on_status`` (the family broadcasts it
as ``mcp/status/updated``). A ready server's tools are registered as agent
tools and unregistered when it stops, fails, or loses its connection.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from appserver.protocol.mcp import McpServerConfig, McpServerStatus, StartupState
from appserver.services.mcp.client import McpClientError, McpConnection, open_connection
from appserver.services.mcp.config import LaunchError, launch_spec
from appserver.services.mcp.tools import McpTool
from appserver.storage.mcp import server_key
from appserver.tools.registry import ToolRegistry

log = logging.getLogger("appserver.mcp")

# How long a replacement waits for its predecessor to let go (stdio shutdown
# is bounded by the SDK at a few seconds).
_HANDOVER_TIMEOUT = 10.0


class _Slot:
    """One configuration's connection attempt (a replacement gets a new slot)."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.status = McpServerStatus(
            name=config.name,
            enabled=config.enabled,
            startup_state="idle" if config.enabled else "disabled",
            transport=config.transport,
            origin=config.origin,
            read_only=config.read_only,
        )
        self.scope: anyio.CancelScope | None = None
        self.stopped = False
        self.done = anyio.Event()
        self.tools: list[McpTool] = []


class McpRuntime:
    """The running MCP servers and their agent tools."""

    def __init__(
        self,
        registry: ToolRegistry,
        workspace: Path,
        on_status: Callable[[McpServerStatus], None],
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.registry = registry
        self.workspace = workspace
        self.on_status = on_status
        self.environ = environ if environ is not None else os.environ
        self._slots: dict[str, _Slot] = {}
        self._tg: TaskGroup | None = None
        self._waiting: list[tuple[_Slot, _Slot | None]] = []  # launched before run()
        self._closed = False

    # --- lifecycle ------------------------------------------------------------------

    async def run(self) -> None:
        """Host the connection tasks until cancelled (the server's lifetime)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            waiting, self._waiting = self._waiting, []
            for slot, previous in waiting:
                tg.start_soon(self._serve, slot, previous)
            try:
                await anyio.sleep_forever()
            finally:
                self._tg = None

    async def close(self) -> None:
        """Stop every server and wait (bounded) until their sessions are closed."""
        self._closed = True  # a write racing the shutdown must not start anything
        slots = list(self._slots.values())
        self._slots.clear()
        for slot in slots:
            self._stop(slot)
        with anyio.move_on_after(_HANDOVER_TIMEOUT):
            for slot in slots:
                await slot.done.wait()

    # --- reconciling --------------------------------------------------------------------

    async def reconcile(
        self, configs: list[McpServerConfig], restart: Collection[str] = ()
    ) -> None:
        """:meth:`_apply`, then wait (bounded) until the servers it stopped are closed,
        so whoever announces the change afterwards announces a settled runtime."""
        stopped = self._apply(configs, restart)
        with anyio.move_on_after(_HANDOVER_TIMEOUT):
            for slot in stopped:
                await slot.done.wait()

    def _apply(self, configs: list[McpServerConfig], restart: Collection[str]) -> list[_Slot]:
        """Make the running set match ``configs`` (restarting names in ``restart``);
        returns the slots it stopped."""
        if self._closed:
            return []
        wanted = {server_key(config.name): config for config in configs}
        restart_keys = {server_key(name) for name in restart}
        stopped = [self._slots.pop(key) for key in list(self._slots) if key not in wanted]
        for slot in stopped:
            self._stop(slot)
        for key, config in wanted.items():
            previous = self._slots.get(key)
            if (
                previous is not None
                and previous.config == config
                and key not in restart_keys
                and previous.status.startup_state != "error"  # a failed server gets a retry
            ):
                continue
            slot = _Slot(config)
            self._slots[key] = slot
            if previous is not None:
                self._stop(previous)
                stopped.append(previous)
            self._launch(slot, previous)
        return stopped

    def statuses(self) -> list[McpServerStatus]:
        """Every current server's status, by name."""
        return [self._slots[key].status.model_copy() for key in sorted(self._slots)]

    def _launch(self, slot: _Slot, previous: _Slot | None) -> None:
        if not slot.config.enabled:
            slot.done.set()
            self._publish(slot)
            return
        if self._tg is None:
            self._waiting.append((slot, previous))
        else:
            self._tg.start_soon(self._serve, slot, previous)

    def _stop(self, slot: _Slot) -> None:
        slot.stopped = True
        self._unregister(slot)
        if slot.scope is not None:
            slot.scope.cancel()
        elif any(waiting is slot for waiting, _ in self._waiting):
            # Never started (run() has not begun yet): nothing to close.
            self._waiting = [entry for entry in self._waiting if entry[0] is not slot]
            slot.done.set()

    # --- one server ---------------------------------------------------------------------

    async def _serve(self, slot: _Slot, previous: _Slot | None) -> None:
        try:
            with anyio.CancelScope() as scope:
                slot.scope = scope
                if slot.stopped:
                    return
                if previous is not None:
                    with anyio.move_on_after(_HANDOVER_TIMEOUT):
                        await previous.done.wait()
                self._set(slot, "starting")
                try:
                    spec = launch_spec(slot.config, self.workspace, self.environ)
                    async with open_connection(spec) as connection:
                        self._register(slot, connection, spec.tool_timeout)
                        self._set(
                            slot,
                            "ready",
                            tool_count=len(connection.tools),
                            resource_count=connection.resource_count,
                            resource_template_count=connection.resource_template_count,
                        )
                        await anyio.sleep_forever()
                except (McpClientError, LaunchError) as exc:
                    self._set(slot, "error", last_error=str(exc))
                except Exception as exc:
                    # One misbehaving server must never take the runtime down.
                    log.exception("MCP server %s failed", slot.config.name)
                    self._set(slot, "error", last_error=f"{type(exc).__name__}: {exc}")
        finally:
            self._unregister(slot)
            slot.done.set()

    def _register(self, slot: _Slot, connection: McpConnection, timeout: float) -> None:
        def lost(message: str) -> None:
            self._lost(slot, message)

        for remote in connection.tools:
            tool = McpTool(slot.config.name, remote, connection, timeout, lost)
            if tool.name in self.registry:
                log.warning(
                    "MCP tool %s of server %s is not offered: the name %s is taken",
                    remote.name,
                    slot.config.name,
                    tool.name,
                )
                continue
            self.registry.register(tool)
            slot.tools.append(tool)

    def _unregister(self, slot: _Slot) -> None:
        for tool in slot.tools:
            # Only our own instance: a replacement may already have registered the name.
            if self.registry.get(tool.name) is tool:
                self.registry.unregister(tool.name)
        slot.tools = []

    def _lost(self, slot: _Slot, message: str) -> None:
        """A tool call found the connection gone: report it and close the session."""
        if slot.stopped or slot.status.startup_state != "ready":
            return
        self._set(slot, "error", last_error=f"connection lost: {message}")
        self._stop(slot)

    def _set(self, slot: _Slot, state: StartupState, **fields: Any) -> None:
        update: dict[str, Any] = {"startup_state": state, "last_error": None, **fields}
        if state != "ready":
            update.update(tool_count=0, resource_count=0, resource_template_count=0)
        slot.status = slot.status.model_copy(update=update)
        self._publish(slot)

    def _publish(self, slot: _Slot) -> None:
        if self._slots.get(server_key(slot.config.name)) is slot:
            self.on_status(slot.status.model_copy())
