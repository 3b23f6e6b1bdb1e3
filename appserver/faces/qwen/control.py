"""Control requests the SDK sends to the ``qwen`` face, and their answers.

Answered (``control_response`` ``success``): ``initialize`` (the capabilities
really supported), ``interrupt`` (the running turn is cancelled; its result
follows), ``set_model`` (a model the provider lists), ``set_permission_mode``
(the thread's approval policy follows), ``get_available_models``,
``supported_commands``, ``mcp_server_status`` (no SDK MCP servers) and
``continue_last_turn`` (never accepted). Anything else, or a malformed
request, gets ``subtype: "error"``; a request without ``request_id`` cannot
be answered and is reported as an input error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from appserver.faces.qwen.rules import MODES

if TYPE_CHECKING:
    from appserver.faces.jobs import JobQueue
    from appserver.faces.qwen.wire import Job, Output
    from appserver.runtime.host import Runtime

log = logging.getLogger("appserver.faces.qwen")

SLASH_COMMANDS = ["compress"]
Frame = dict[str, Any]


class RequestError(Exception):
    """A control request answered with ``subtype: "error"``."""


class ControlOwner(Protocol):
    """What the handlers need from the session (``session.Session``)."""

    runtime: Runtime
    out: Output
    session_id: str
    jobs: JobQueue[Job]
    model: str | None
    mode: str

    def interactive(self) -> bool:
        """The client reads control requests and can answer them."""

    def policy(self) -> str:
        """The thread's approval policy for the current mode and rules."""

    async def respond(self, request_id: str, response: Frame) -> None:
        """Answer a control request with ``subtype: "success"``."""

    async def refuse(self, request_id: str, error: str) -> None:
        """Answer a control request with ``subtype: "error"``."""

    async def interrupt_turn(self, thread_id: str, turn_id: str) -> None:
        """Cancel a running turn (quietly if it already ended)."""

    async def configure(self, **changes: Any) -> None:
        """Change the session's thread settings (nothing before the thread exists)."""


class ControlRequests:
    """The handlers of one session."""

    def __init__(self, session: ControlOwner) -> None:
        self.session = session

    async def control_request(self, frame: Frame) -> None:
        request_id, request = frame.get("request_id"), frame.get("request")
        if not isinstance(request_id, str) or not request_id:
            await self.session.out.input_error("a control_request needs a 'request_id' string")
            return
        subtype = request.get("subtype") if isinstance(request, dict) else None
        if not isinstance(request, dict) or not isinstance(subtype, str):
            await self.session.refuse(
                request_id, "a control_request needs a 'request' with a 'subtype'"
            )
            return
        handler = self._handlers().get(subtype)
        if handler is None:
            await self.session.refuse(request_id, f"Unknown control request subtype: {subtype}")
            return
        try:
            response = await handler(request)
        except RequestError as exc:
            await self.session.refuse(request_id, str(exc))
        except Exception:
            log.exception("control request %s failed", subtype)
            await self.session.refuse(request_id, f"internal error in {subtype} (see the log)")
        else:
            await self.session.respond(request_id, response)

    def _handlers(self) -> dict[str, Callable[[Frame], Awaitable[Frame]]]:
        return {
            "initialize": self._initialize,
            "interrupt": self._interrupt,
            "set_model": self._set_model,
            "set_permission_mode": self._set_permission_mode,
            "get_available_models": self._available_models,
            "supported_commands": self._supported_commands,
            "mcp_server_status": self._mcp_server_status,
            "continue_last_turn": self._continue_last_turn,
        }

    async def _initialize(self, request: Frame) -> Frame:
        for key in ("sdkMcpServers", "mcpServers", "agents"):
            if request.get(key):
                log.warning("initialize: %s are not supported here and are ignored", key)
        return {
            "subtype": "initialize",
            "session_id": self.session.session_id,
            "capabilities": self.capabilities(),
        }

    def capabilities(self) -> Frame:
        """What this face can do (``initialize``'s answer, the first chunk's metadata)."""
        from appserver.faces.qwen.handshake import capabilities

        return capabilities(self.session.interactive())

    async def _interrupt(self, request: Frame) -> Frame:
        # The running message; with none, the next one (an interrupt written right
        # behind its message, before the worker took it): it ends "cancelled".
        from appserver.faces.jobs import abort

        queue = self.session.jobs
        job = queue.current or (queue.queued[0] if queue.queued else None)
        await abort(job, self.session.interrupt_turn)
        return {"subtype": "interrupt"}

    async def _models(self) -> list[str]:
        from appserver.providers.base import ProviderUnavailable

        try:
            return [info.id for info in await self.session.runtime.engine.provider.list_models()]
        except ProviderUnavailable as exc:
            raise RequestError(f"cannot list models: {exc.message}") from None

    async def _set_model(self, request: Frame) -> Frame:
        model = request.get("model")
        if not isinstance(model, str) or not model.strip():
            raise RequestError("Invalid model specified for set_model request")
        if model not in await self._models():
            provider = self.session.runtime.engine.provider.name
            raise RequestError(f'unknown model "{model}" for provider {provider}')
        self.session.model = model
        await self.session.configure(model=model)
        return {"subtype": "set_model", "model": model}

    async def _set_permission_mode(self, request: Frame) -> Frame:
        mode = request.get("mode")
        if mode not in MODES:
            raise RequestError(
                f"Invalid permission mode: {mode}. Valid values are: {', '.join(MODES)}"
            )
        self.session.mode = str(mode)
        await self.session.configure(approvalPolicy=self.session.policy())
        return {"status": "updated", "mode": self.session.mode}

    async def _available_models(self, request: Frame) -> Frame:
        window = self.session.runtime.engine.config.context_window
        models = [
            {"id": model, "label": model, "contextWindowSize": window}
            for model in await self._models()
        ]
        return {"subtype": "get_available_models", "models": models}

    async def _supported_commands(self, request: Frame) -> Frame:
        return {"subtype": "supported_commands", "commands": SLASH_COMMANDS}

    async def _mcp_server_status(self, request: Frame) -> Frame:
        return {"subtype": "mcp_server_status", "status": {}}

    async def _continue_last_turn(self, request: Frame) -> Frame:
        # Nothing here resumes a half-done turn: an interrupted turn is over.
        return {"subtype": "continue_last_turn", "accepted": False, "interruption": "none"}
