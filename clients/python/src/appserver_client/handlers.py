"""The handlers a client gives for the server's requests to it, and how each request
is answered with them: approvals, the client's own tools (dynamic and channel tools)
and the editor proxy (``ext/acp/fs/*``, ``ext/acp/terminal/*``).

:class:`ServerRequests` is the part of :class:`~appserver_client.AppServerClient` that
holds the handlers; the connection (:mod:`appserver_client.connection`) hands each
server->client request to its :meth:`~ServerRequests._answer`.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, cast

from appserver_client._generated import (
    ApprovalRequestParams,
    ChannelToolCallParams,
    ChannelToolCallResult,
    EditorTerminalCreateParams,
    EditorTerminalOutputResult,
    EditorTerminalParams,
    EditorTerminalWaitParams,
    ReadTextFileParams,
    ReadTextFileResult,
    ToolCallParams,
    ToolCallResult,
    WriteTextFileParams,
)
from appserver_client.transport import Transport

log = logging.getLogger("appserver_client")

DECISIONS = ("accept", "acceptForSession", "acceptAlways", "decline", "cancel")
Decision = str
ApprovalAnswer = Decision | Mapping[str, Any]
ApprovalHandler = Callable[[ApprovalRequestParams], ApprovalAnswer | Awaitable[ApprovalAnswer]]
"""Called with each ``item/approval/request``'s params; returns a decision
(``"accept"``, ``"acceptForSession"``, ``"acceptAlways"``, ``"decline"``,
``"cancel"``) or a whole result object, directly or as an awaitable."""
ToolCallAnswer = ToolCallResult | Mapping[str, Any]
ToolCallHandler = Callable[[ToolCallParams], ToolCallAnswer | Awaitable[ToolCallAnswer]]
"""Called with each ``item/tool/call``'s params (a tool this client declared in
``thread/start.dynamicTools``); returns the result ``{success, contentItems?,
structuredResult?, errorCode?, errorMessage?}``, directly or as an awaitable."""
ChannelToolCallAnswer = ChannelToolCallResult | Mapping[str, Any]
ChannelToolCallHandler = Callable[
    [ChannelToolCallParams], ChannelToolCallAnswer | Awaitable[ChannelToolCallAnswer]
]
"""Called with each ``ext/channel/toolCall``'s params (a tool this channel adapter
listed in ``capabilities.channelAdapter.channelTools``); returns the result, as
a :data:`ToolCallHandler` does."""
ReadTextFileAnswer = ReadTextFileResult | str | Mapping[str, Any]
ReadTextFileHandler = Callable[
    [ReadTextFileParams], ReadTextFileAnswer | Awaitable[ReadTextFileAnswer]
]
"""Called with each ``ext/acp/fs/readTextFile``'s params (``threadId``, absolute
``path``, ``line?``, ``limit?``); returns the editor's text of the file (a ``str``
or ``{"content": str}``), directly or as an awaitable."""
WriteTextFileHandler = Callable[[WriteTextFileParams], Any]
"""Called with each ``ext/acp/fs/writeTextFile``'s params (``threadId``, absolute
``path``, ``content``); writes the file in the editor. Its return value (sync or
awaited) is ignored unless it is a mapping (then sent as the result)."""
TerminalAnswer = EditorTerminalOutputResult | Mapping[str, Any]


class TerminalHandler(Protocol):
    """Runs the agent's ``shell`` commands in this client's terminals (an IDE:
    ``ext/acp/terminal/*``). Each method may be sync or async; one that raises
    answers a JSON-RPC error, which fails the agent's ``shell`` call, not the turn.
    """

    def create(
        self, params: EditorTerminalCreateParams
    ) -> str | Mapping[str, Any] | Awaitable[str | Mapping[str, Any]]:
        """Start ``params["command"]`` in ``params["cwd"]``; the new terminal's id
        (a ``str`` or ``{"terminalId": str}``)."""

    def wait_for_exit(
        self, params: EditorTerminalWaitParams
    ) -> TerminalAnswer | Awaitable[TerminalAnswer]:
        """Wait at most ``params["timeout"]`` seconds; ``{"output", "exitCode"}``
        (no ``exitCode``: still running, the server will kill it)."""

    def get_output(
        self, params: EditorTerminalParams
    ) -> TerminalAnswer | Awaitable[TerminalAnswer]:
        """What the terminal printed so far: ``{"output", "exitCode"?}``."""

    def kill(self, params: EditorTerminalParams) -> object:
        """Kill the command (the terminal stays until ``release``)."""

    def release(self, params: EditorTerminalParams) -> object:
        """The server is done with the terminal."""


RequestHandler = Callable[[Any], Any]


async def maybe_await(value: Any) -> Any:
    """``value``, awaited if it is awaitable (handlers and callbacks may be either)."""
    if inspect.isawaitable(value):
        return await value
    return value


class ServerRequests:
    """The handlers of server->client requests, and the answering of those requests."""

    capabilities: dict[str, Any]
    approval_handler: ApprovalHandler | None
    tool_call_handler: ToolCallHandler | None
    channel_tool_call_handler: ChannelToolCallHandler | None
    read_text_file_handler: ReadTextFileHandler | None
    write_text_file_handler: WriteTextFileHandler | None
    terminal_handler: TerminalHandler | None
    _request_handlers: dict[str, RequestHandler]

    def initialize_capabilities(self) -> dict[str, Any]:
        """The ``capabilities`` sent in ``initialize``: :attr:`capabilities`, plus
        ``acpExtensions.fsReadTextFile`` / ``fsWriteTextFile`` /
        ``terminalCreate`` for the editor handlers that are set, unless
        :attr:`capabilities` has ``acpExtensions`` (then it is sent as given)."""
        capabilities = dict(self.capabilities)
        if "acpExtensions" not in capabilities:
            acp: dict[str, Any] = {}
            if self.read_text_file_handler is not None:
                acp["fsReadTextFile"] = True
            if self.write_text_file_handler is not None:
                acp["fsWriteTextFile"] = True
            if self.terminal_handler is not None:
                acp["terminalCreate"] = True
            if acp:
                capabilities["acpExtensions"] = acp
        return capabilities

    def on_tool_call(self, handler: ToolCallHandler | None) -> None:
        """Run the tools this client declares in ``thread/start(dynamic_tools=...)``:
        ``handler(params)`` (sync or async) answers each ``item/tool/call``
        (same as setting :attr:`tool_call_handler`). Without a handler a call
        fails with ``errorMessage: "no handler"`` (unless a
        :meth:`set_request_handler` handler for ``item/tool/call`` answers it
        raw); a handler that raises or returns something that is not a result
        fails it with the reason."""
        self.tool_call_handler = handler

    def on_channel_tool_call(self, handler: ChannelToolCallHandler | None) -> None:
        """Run the channel tools this adapter lists in
        ``capabilities.channelAdapter.channelTools``: ``handler(params)`` (sync or
        async) answers each ``ext/channel/toolCall`` (same as setting
        :attr:`channel_tool_call_handler`), with the rules of :meth:`on_tool_call`
        (no handler: ``errorCode: "noHandler"`` unless a raw
        :meth:`set_request_handler` handler answers; a failing handler:
        ``"handlerFailed"``)."""
        self.channel_tool_call_handler = handler

    def on_read_text_file(self, handler: ReadTextFileHandler | None) -> None:
        """Serve ``ext/acp/fs/readTextFile`` (the agent reading a file as the editor
        has it): ``handler(params)`` (sync or async) returns the text, a ``str`` or
        ``{"content": str}``. A handler that raises or returns something else
        answers a JSON-RPC error (-32603), which fails the agent's tool call
        (``the editor refused ...``), not the turn. Without a handler the request
        goes to a raw :meth:`set_request_handler` handler if one is set, else is
        answered -32601 (the same failed tool call).

        The server only sends it if ``initialize`` advertised
        ``acpExtensions.fsReadTextFile``, which the client adds when this handler
        is set at that moment (``read_text_file_handler=`` of :meth:`spawn` /
        :meth:`connect`; set later, it counts from the next reconnect) and
        :attr:`capabilities` has no ``acpExtensions`` of its own."""
        self.read_text_file_handler = handler

    def on_write_text_file(self, handler: WriteTextFileHandler | None) -> None:
        """Serve ``ext/acp/fs/writeTextFile`` (the agent writing a file through the
        editor): ``handler(params)`` (sync or async) writes ``params["content"]``
        to ``params["path"]``; the answer is ``{}``. Errors, the fallback and the
        ``acpExtensions.fsWriteTextFile`` advertisement as in
        :meth:`on_read_text_file`."""
        self.write_text_file_handler = handler

    def on_terminal(self, handler: TerminalHandler | None) -> None:
        """Run the agent's ``shell`` commands in this client's terminals (an IDE):
        ``handler`` (a :class:`TerminalHandler`) answers
        ``ext/acp/terminal/create|waitForExit|getOutput|kill|release``. The
        server sends them after its sandbox and approvals, when ``initialize``
        advertised ``acpExtensions.terminalCreate`` (added as for
        :meth:`on_read_text_file`). Errors and the fallback as in
        :meth:`on_read_text_file`."""
        self.terminal_handler = handler

    def set_request_handler(self, method: str, handler: RequestHandler | None) -> None:
        """Answer server->client requests ``method`` with ``handler(params)`` (sync
        or async; its return value is the result). ``item/approval/request`` uses
        :attr:`approval_handler` instead. Unhandled methods get -32601."""
        if handler is None:
            self._request_handlers.pop(method, None)
        else:
            self._request_handlers[method] = handler

    async def _answer(
        self, transport: Transport, request_id: Any, method: str, params: Any
    ) -> None:
        """Answer one server->client request (never raises)."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        try:
            if method == "item/approval/request":
                reply["result"] = await self._approve(params)
            elif method == "item/tool/call" and (
                self.tool_call_handler is not None or method not in self._request_handlers
            ):
                reply["result"] = await self._call_tool(params)
            elif method == "ext/channel/toolCall" and (
                self.channel_tool_call_handler is not None or method not in self._request_handlers
            ):
                reply["result"] = await self._call_channel_tool(params)
            elif method == "ext/acp/fs/readTextFile" and self.read_text_file_handler is not None:
                reply["result"] = await self._read_text_file(self.read_text_file_handler, params)
            elif method == "ext/acp/fs/writeTextFile" and self.write_text_file_handler is not None:
                answer = await maybe_await(
                    self.write_text_file_handler(cast(WriteTextFileParams, params))
                )
                reply["result"] = dict(answer) if isinstance(answer, Mapping) else {}
            elif method.startswith(TERMINAL_PREFIX) and self.terminal_handler is not None:
                reply["result"] = await _run_terminal(self.terminal_handler, method, params)
            elif method in self._request_handlers:
                reply["result"] = await maybe_await(self._request_handlers[method](params))
            else:
                reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
        except Exception as exc:
            log.exception("handler for server request %s failed", method)
            reply["error"] = {
                "code": -32603,
                "message": "Internal error",
                "data": {"detail": str(exc)},
            }
        with contextlib.suppress(Exception):
            await transport.send(json.dumps(reply, separators=(",", ":"), ensure_ascii=False))

    async def _approve(self, params: Any) -> dict[str, Any]:
        handler = self.approval_handler
        if handler is None:
            return {"decision": "decline"}
        try:
            answer = await maybe_await(handler(cast(ApprovalRequestParams, params)))
        except Exception:
            log.exception("approval handler failed; declining")
            return {"decision": "decline"}
        if isinstance(answer, str):
            answer = {"decision": answer}
        if not isinstance(answer, Mapping) or answer.get("decision") not in DECISIONS:
            log.warning("approval handler returned %r; declining", answer)
            return {"decision": "decline"}
        return dict(answer)

    async def _call_tool(self, params: Any) -> dict[str, Any]:
        handler = self.tool_call_handler
        return await _run_tool(
            None if handler is None else lambda: handler(cast(ToolCallParams, params))
        )

    async def _call_channel_tool(self, params: Any) -> dict[str, Any]:
        handler = self.channel_tool_call_handler
        return await _run_tool(
            None if handler is None else lambda: handler(cast(ChannelToolCallParams, params))
        )

    @staticmethod
    async def _read_text_file(handler: ReadTextFileHandler, params: Any) -> dict[str, Any]:
        answer = await maybe_await(handler(cast(ReadTextFileParams, params)))
        if isinstance(answer, str):
            return {"content": answer}
        if isinstance(answer, Mapping) and isinstance(answer.get("content"), str):
            return dict(answer)
        raise TypeError(f"the read_text_file handler returned {answer!r:.200}, not the text")


TERMINAL_PREFIX = "ext/acp/terminal/"
_TERMINAL_METHODS = {
    "create": "create",
    "waitForExit": "wait_for_exit",
    "getOutput": "get_output",
    "kill": "kill",
    "release": "release",
}


async def _run_terminal(handler: TerminalHandler, method: str, params: Any) -> dict[str, Any]:
    """Answer one ``ext/acp/terminal/*`` request with ``handler``."""
    name = _TERMINAL_METHODS.get(method[len(TERMINAL_PREFIX) :])
    if name is None:
        raise LookupError(f"unknown terminal request {method}")
    answer = await maybe_await(getattr(handler, name)(params))
    if name == "create" and isinstance(answer, str):
        return {"terminalId": answer}
    if isinstance(answer, Mapping):
        return dict(answer)
    if name in ("kill", "release"):
        return {}
    raise TypeError(f"the terminal handler's {name} returned {answer!r:.200}, not an object")


async def _run_tool(call: Callable[[], Any] | None) -> dict[str, Any]:
    """A tool-call result from a handler (``None``: no handler); never raises."""
    if call is None:
        return {"success": False, "errorCode": "noHandler", "errorMessage": "no handler"}
    try:
        answer = await maybe_await(call())
    except Exception as exc:
        log.exception("tool call handler failed")
        return {"success": False, "errorCode": "handlerFailed", "errorMessage": str(exc)}
    if not isinstance(answer, Mapping) or not isinstance(answer.get("success"), bool):
        log.warning("tool call handler returned %r; failing the call", answer)
        return {
            "success": False,
            "errorCode": "handlerFailed",
            "errorMessage": "the tool call handler returned no result",
        }
    return dict(answer)
