"""The typed layer above the JSON-RPC core.

The router is the :class:`~appserver.rpc.connection.Application` the core
calls. It looks the method up in the method table, validates params with
the method's pydantic model (``-32602`` with a one-line detail), checks the
capability gate and calls the handler a service registered.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from appserver import __version__
from appserver.protocol import errors as E
from appserver.protocol.errors import RpcError
from appserver.protocol.initialize import InitializeParams, InitializeResult, ServerInfo
from appserver.protocol.methods import FEATURE_FLAGS, METHODS
from appserver.rpc.connection import Connection, RequestContext
from appserver.rpc.framing import RawJSON
from appserver.runtime.bus import EventBus

log = logging.getLogger("appserver.router")

P = TypeVar("P", bound=BaseModel)
# A handler returns a wire model, or RawJSON for an answer it already encoded.
Handler = Callable[[RequestContext, Any], Awaitable[BaseModel | RawJSON]]

# Notifications a client implicitly opts out of through its capabilities.
_STREAMING_METHODS = (
    "item/agentMessage/delta",
    "item/reasoning/delta",
    "item/toolCall/argumentsDelta",
    "item/commandExecution/outputDelta",
)


def describe_validation_error(exc: ValidationError) -> str:
    """One short line naming the first bad field (never a pydantic dump)."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "params"
    if first["type"] == "missing":
        text = f"'{where}' is required."
    else:
        message = str(first["msg"]).removeprefix("Value error, ")
        text = f"'{where}': {message}"
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return text


def parse_params(model: type[P], params: Any) -> P:
    """Validate raw params into ``model`` or raise ``-32602``."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise E.invalid_params("'params' must be an object")
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise E.invalid_params(describe_validation_error(exc)) from None


class Router:
    """Method name -> handler, plus what every connection negotiated."""

    def __init__(self, bus: EventBus, server_name: str = "appserver") -> None:
        self.bus = bus
        self.server_name = server_name
        self.handlers: dict[str, Handler] = {}
        self.features: set[str] = set()
        self.extensions: dict[str, Any] = {}
        self.closed_hooks: list[Callable[[Connection], None]] = []
        # Called once the client's info and capabilities are stored on the
        # connection, before the `initialize` response is built (services that
        # react to a capability, e.g. channel adapters; use ctx.after_response
        # for anything that must follow the response).
        self.initialize_hooks: list[Callable[[RequestContext, InitializeParams], None]] = []

    def register(self, method: str, handler: Handler) -> None:
        """Serve ``method`` with ``handler(ctx, params_model) -> result_model``."""
        if method not in METHODS:
            raise KeyError(f"{method} is not in the method table")
        if method in self.handlers:
            raise KeyError(f"{method} already has a handler")
        self.handlers[method] = handler

    def enable_feature(self, flag: str) -> None:
        if flag not in FEATURE_FLAGS:
            raise KeyError(flag)
        self.features.add(flag)

    def capabilities(self) -> dict[str, Any]:
        """Flags whose every method is served, plus enabled features."""
        by_flag: dict[str, bool] = {}
        for spec in METHODS.values():
            if spec.capability:
                served = spec.name in self.handlers
                by_flag[spec.capability] = by_flag.get(spec.capability, True) and served
        flags: dict[str, Any] = {flag: True for flag, ok in sorted(by_flag.items()) if ok}
        flags.update(dict.fromkeys(sorted(self.features), True))
        flags["extensions"] = dict(self.extensions)
        return flags

    # --- Application protocol --------------------------------------------

    async def initialize(self, ctx: RequestContext, params: Any) -> BaseModel:
        request = parse_params(InitializeParams, params)
        conn = ctx.connection
        caps = request.capabilities
        conn.client_name = request.client_info.name
        conn.client_capabilities = caps
        opt_out = set(caps.opt_out_notification_methods)
        if not caps.streaming_support:
            opt_out.update(_STREAMING_METHODS)
        if not caps.command_execution_streaming:
            # commandExecution items and their output are opt-in (DotCraft).
            opt_out.update(("item/commandExecution/outputDelta", "item:commandExecution"))
        if not caps.config_change:
            opt_out.add("workspace/configChanged")
        conn.opt_out = frozenset(opt_out)
        for hook in self.initialize_hooks:
            hook(ctx, request)
        return InitializeResult(
            server_info=ServerInfo(name=self.server_name, version=__version__),
            capabilities=self.capabilities(),
        )

    async def handle_request(self, ctx: RequestContext, params: Any) -> BaseModel | RawJSON:
        spec = METHODS.get(ctx.method)
        handler = self.handlers.get(ctx.method)
        if spec is None or handler is None or spec.name == "initialize":
            raise RpcError(E.METHOD_NOT_FOUND, f"Method not found: {ctx.method}")
        return await handler(ctx, parse_params(spec.params, params))

    def access(self, method: str) -> str:
        spec = METHODS.get(method)
        return spec.access if spec is not None else "read"

    def connection_ready(self, connection: Connection) -> None:
        self.bus.add_connection(connection)

    def connection_closed(self, connection: Connection) -> None:
        self.bus.remove_connection(connection)
        for hook in self.closed_hooks:
            hook(connection)
