"""The DotCraft application on the JSON-RPC core: the first front door.

The router is the :class:`~appserver.rpc.connection.Application` the core
calls. It owns DotCraft's handshake (``initialize``, then ``initialized``;
a :class:`~appserver.services.peer.Peer` per connection), looks the method
up in the method table, validates params with the method's pydantic model
(``-32602`` with a one-line detail), checks the capability gate, calls the
handler a service registered, and turns the runtime's refusals into
DotCraft's error codes. Answers a handler marks cacheable are kept encoded
until their key changes.

The method table is read one entry at a time (:mod:`appserver.protocol.table`):
a method's wire models load when it is first called, and a family that only
serves methods can be installed then too (:meth:`Router.register_at_first_call`).
A stdio server answers ``initialize`` before it loads even the core's (see
:meth:`Router.defer`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import anyio
from pydantic import BaseModel, ValidationError

from appserver import __version__
from appserver.protocol import errors as rpc_errors
from appserver.protocol import method_index
from appserver.protocol.errors import RpcError
from appserver.protocol.initialize import InitializeParams, InitializeResult, ServerInfo
from appserver.protocol.table import method_spec
from appserver.rpc import framing
from appserver.rpc.connection import Connection, RequestContext
from appserver.rpc.framing import RawJSON
from appserver.runtime import errors as runtime_errors
from appserver.runtime.bus import EventBus
from appserver.services.advertised import format_capabilities
from appserver.services.peer import Handshake, Peer, peer_of

if TYPE_CHECKING:
    from collections.abc import Iterable

log = logging.getLogger("appserver.router")

P = TypeVar("P", bound=BaseModel)
# A handler returns a wire model (the router encodes it, or caches its encoding).
Handler = Callable[[RequestContext, Any], Awaitable[BaseModel | RawJSON]]
# For a cacheable answer: (what is asked, a version that changes whenever the
# answer would), or None to not cache this one.
AnswerKey = Callable[[Any], tuple[Any, Any] | None]
ANSWER_CACHE_SIZE = 1024  # encoded answers kept (see Router.register)

# Methods whose notifications to the caller follow its response (DotCraft: a
# client sees `turn/start`'s answer before `turn/started`, `thread/start`'s
# before `thread/started`, ...). Other methods' notifications go out as they
# happen, as DotCraft's do (`thread/queue/updated` during `turn/enqueue`).
FOLLOW_THE_RESPONSE = frozenset(
    {
        "initialize",
        "thread/start",
        "thread/resume",
        "thread/subscribe",
        "thread/pause",
        "thread/archive",
        "thread/unarchive",
        "thread/rename",
        "turn/start",
        "thread/compact",
    }
)

# The runtime's refusals as DotCraft error codes.
_REFUSAL_CODES: dict[type[runtime_errors.Refusal], int] = {
    runtime_errors.ThreadNotFound: rpc_errors.THREAD_NOT_FOUND,
    runtime_errors.ThreadNotActive: rpc_errors.THREAD_NOT_ACTIVE,
    runtime_errors.TurnInProgress: rpc_errors.TURN_IN_PROGRESS,
    runtime_errors.TurnNotFound: rpc_errors.TURN_NOT_FOUND,
    runtime_errors.TurnNotRunning: rpc_errors.TURN_NOT_RUNNING,
}


def refusal_error(refusal: runtime_errors.Refusal) -> RpcError:
    """The JSON-RPC error for a runtime refusal."""
    if isinstance(refusal, runtime_errors.InvalidInput):
        return rpc_errors.invalid_params(refusal.message)
    return RpcError(_REFUSAL_CODES.get(type(refusal), rpc_errors.INVALID_PARAMS), refusal.message)


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
        raise rpc_errors.invalid_params("'params' must be an object")
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise rpc_errors.invalid_params(describe_validation_error(exc)) from None


# What a switched-off family's methods answer "Method not found: ..." with, by capability
# (DotCraft names the family; automations are the family a workspace can switch off).
_FAMILY_NAMES = {"automations": "automation/*"}


class _Registrations(NamedTuple):
    """What a router holds that a family's install adds to."""

    handlers: dict[str, Handler]
    answer_keys: dict[str, AnswerKey]
    initialize_hooks: list[Callable[[RequestContext, InitializeParams], None]]
    ready_hooks: list[Callable[[Peer], None]]
    closed_hooks: list[Callable[[Peer], None]]
    features: set[str]
    extensions: dict[str, Any]


class Router:
    """Method name -> handler, plus what every connection negotiated."""

    def __init__(self, bus: EventBus, server_name: str = "appserver") -> None:
        self.bus = bus
        self.server_name = server_name
        self.handlers: dict[str, Handler] = {}
        # Methods whose family installs at their first call -> that install.
        self._installs: dict[str, Callable[[], None]] = {}
        self.answer_keys: dict[str, AnswerKey] = {}
        self._answers: dict[tuple[str, Any], tuple[Any, RawJSON]] = {}
        self.features: set[str] = set()
        self.extensions: dict[str, Any] = {}
        self.closed_hooks: list[Callable[[Peer], None]] = []
        # Called once the client's info and capabilities are stored on its
        # peer, before the `initialize` response is built (services that
        # react to a capability, e.g. channel adapters; use ctx.after_response
        # for anything that must follow the response).
        self.initialize_hooks: list[Callable[[RequestContext, InitializeParams], None]] = []
        # Called when a client's `initialized` arrives (it may be sent requests now).
        self.ready_hooks: list[Callable[[Peer], None]] = []
        # Set by defer() until the server is complete (see there).
        self._advertised: dict[str, Any] | None = None
        self._complete: Callable[[], Awaitable[None]] | None = None
        # Set by fail(): the server could not start; every request gets this.
        self._failure: RpcError | None = None
        # Requests being handled now, and an event set whenever that drops to 0
        # (background warm-up yields to clients: see wait_idle).
        self._busy = 0
        self._idle: anyio.Event | None = None  # made in the event loop, when first busy

    def defer(self, advertised: dict[str, Any], complete: Callable[[], Awaitable[None]]) -> None:
        """Answer ``initialize`` before the server is complete.

        Until ``complete()`` has returned, ``initialize`` advertises
        ``advertised`` (what the complete server will serve, declared
        statically), and once its response is queued it awaits ``complete()``
        (which registers the handlers and hooks), then runs the initialize
        hooks. That happens in the connection's read loop, so none of the
        client's later frames is read before: every method works right after
        ``initialize``, exactly as on a server built before it."""
        self._advertised = advertised
        self._complete = complete

    def completed(self) -> None:
        """The server is complete: ``initialize`` answers from the handlers again."""
        self._advertised = None
        self._complete = None

    def fail(self, error: RpcError) -> None:
        """The server could not start (a deferred one, after ``initialize`` was
        answered): from now on every request is answered ``error`` and its
        connection then closes."""
        self._failure = error

    def register(self, method: str, handler: Handler, answer_key: AnswerKey | None = None) -> None:
        """Serve ``method`` with ``handler(ctx, params_model) -> result_model``.

        With ``answer_key(params)``, answers are cached encoded: while the key
        is the same (and not ``None``), a repeated request gets the same bytes.
        The answer must not depend on who asks.
        """
        if method not in method_index.METHODS:
            raise KeyError(f"{method} is not in the method table")
        if method in self.handlers or method in self._installs:
            raise KeyError(f"{method} already has a handler (or installs at its first call)")
        self.handlers[method] = handler
        if answer_key is not None:
            self.answer_keys[method] = answer_key

    def register_at_first_call(
        self, methods: Iterable[str], install: Callable[[], None]
    ) -> Callable[[], None]:
        """Serve ``methods`` by running ``install()`` when the first of them is
        called: it registers their handlers. Until then they are advertised as
        served, and nothing of their family is loaded. An ``install`` that
        raises fails that call, what it registered on the router is dropped,
        and the next call tries again. Returns a function
        that installs now (once: later calls do nothing), for other first uses
        of the family (an input part it resolves)."""
        methods = tuple(methods)
        if not methods:
            raise ValueError("nothing to install at first call: no method given")
        for method in methods:
            if method not in method_index.METHODS:
                raise KeyError(f"{method} is not in the method table")
            if method in self.handlers or method in self._installs:
                raise KeyError(f"{method} already has a handler (or installs at its first call)")
        installed = False

        def install_once() -> None:
            nonlocal installed
            if installed:
                return
            for method in methods:
                self._installs.pop(method, None)
            before = self._registrations()
            try:
                install()
            except BaseException:
                self._restore(before)  # what it registered here, as before it ran
                self._installs.update(dict.fromkeys(methods, install_once))
                raise
            installed = True
            missing = [method for method in methods if method not in self.handlers]
            if missing:  # advertised, and now answered -32601: the family's bug
                log.error("installing the family of %s served none of %s", methods[0], missing)

        self._installs.update(dict.fromkeys(methods, install_once))
        return install_once

    def _registrations(self) -> _Registrations:
        return _Registrations(
            dict(self.handlers),
            dict(self.answer_keys),
            list(self.initialize_hooks),
            list(self.ready_hooks),
            list(self.closed_hooks),
            set(self.features),
            dict(self.extensions),
        )

    def _restore(self, saved: _Registrations) -> None:
        # In place: others hold these (a family's light part keeps the hook list).
        self.handlers.clear()
        self.handlers.update(saved.handlers)
        self.answer_keys.clear()
        self.answer_keys.update(saved.answer_keys)
        self.initialize_hooks[:] = saved.initialize_hooks
        self.ready_hooks[:] = saved.ready_hooks
        self.closed_hooks[:] = saved.closed_hooks
        self.features.clear()
        self.features.update(saved.features)
        self.extensions.clear()
        self.extensions.update(saved.extensions)

    def serves(self, method: str) -> bool:
        """Whether ``method`` has a handler or installs one at its first call."""
        return method in self.handlers or method in self._installs

    def load(self, method: str) -> None:
        """Install the family that serves ``method`` if it waits for its first
        call (for a caller that needs what the family holds, not a call)."""
        install = self._installs.get(method)
        if install is not None:
            install()

    def install_pending(self) -> None:
        """Run every install still waiting for its first call (tests, tools
        that need every handler)."""
        while self._installs:
            next(iter(self._installs.values()))()

    def attach(self, connection: Connection) -> Peer:
        """The connection's peer, made on first use (the server attaches one
        before serving, so hooks see it from the first frame)."""
        peer = connection.session
        if not isinstance(peer, Peer):
            peer = connection.session = Peer(connection)
        return peer

    def enable_feature(self, flag: str) -> None:
        from appserver.protocol.core_methods import FEATURE_FLAGS

        if flag not in FEATURE_FLAGS:
            raise KeyError(flag)
        self.features.add(flag)

    def capabilities(self) -> dict[str, Any]:
        """What ``initialize`` advertises: the declared capabilities while the
        server is not complete (:meth:`defer`), else :meth:`served_capabilities`."""
        if self._advertised is not None:
            return dict(self._advertised)
        return self.served_capabilities()

    def served_capabilities(self) -> dict[str, Any]:
        """Flags whose every method is served, plus enabled features."""
        by_flag: dict[str, bool] = {}
        for name, (_, capability, _) in method_index.METHODS.items():
            if capability:
                served = self.serves(name)
                by_flag[capability] = by_flag.get(capability, True) and served
        served_flags = {flag for flag, ok in by_flag.items() if ok}
        return format_capabilities(served_flags, self.features, self.extensions)

    # --- Application protocol --------------------------------------------

    def admit(self, connection: Connection, method: str) -> RpcError | None:
        peer = self.attach(connection)
        if self._failure is not None:
            # Closed once the error is queued (the caller queues it right after
            # this returns, before the loop runs anything else).
            asyncio.get_running_loop().call_soon(connection.close, "server failed to start", 1011)
            return self._failure
        if method == "initialize":
            if peer.handshake is not Handshake.NEW:
                return RpcError(rpc_errors.ALREADY_INITIALIZED, "Already initialized")
            return None
        if peer.handshake is Handshake.NEW:
            return RpcError(rpc_errors.NOT_INITIALIZED, "Not initialized")
        if peer.handshake is Handshake.INITIALIZING:
            return rpc_errors.invalid_request(
                "Server is awaiting the 'initialized' notification before handling requests."
            )
        return None

    def access(self, method: str) -> str:
        if method == "initialize":
            return "inline"
        facts = method_index.METHODS.get(method)
        return facts[2] if facts is not None else "read"

    def overloaded(self) -> RpcError:
        return RpcError(rpc_errors.SERVER_OVERLOADED, "Server overloaded; retry later.")

    def holds(self, method: str) -> bool:
        return method in FOLLOW_THE_RESPONSE

    async def handle_request(self, ctx: RequestContext, params: Any) -> BaseModel | RawJSON:
        if ctx.method == "initialize":
            return await self.initialize(ctx, params)
        spec = method_spec(ctx.method)
        handler = self.handlers.get(ctx.method)
        if handler is None and ctx.method in self._installs:
            self._installs[ctx.method]()
            handler = self.handlers.get(ctx.method)
        if spec is None or handler is None:
            # A family switched off is named as DotCraft names it ("automation/*").
            name = _FAMILY_NAMES.get(spec.capability or "", ctx.method) if spec else ctx.method
            raise RpcError(rpc_errors.METHOD_NOT_FOUND, f"Method not found: {name}")
        # Long-running ("detached") requests, e.g. a terminal/read that waits, do not
        # count: background warm-up waits only for requests a client is waiting on now.
        counted = spec.access != "detached"
        if counted:
            if self._busy == 0:
                self._idle = anyio.Event()
            self._busy += 1
        try:
            request = parse_params(spec.params, params)
            answer_key = self.answer_keys.get(ctx.method)
            if answer_key is None:
                return await handler(ctx, request)
            return await self._cached(ctx.method, answer_key, handler, ctx, request)
        except runtime_errors.Refusal as refusal:
            raise refusal_error(refusal) from None
        finally:
            if counted:
                self._busy -= 1
                if self._busy == 0 and self._idle is not None:
                    self._idle.set()

    async def wait_idle(self) -> None:
        """Return once no request is being handled (at once when none is); long-running
        ("detached") ones do not count."""
        while self._busy and self._idle is not None:
            await self._idle.wait()

    async def _cached(
        self,
        method: str,
        answer_key: AnswerKey,
        handler: Handler,
        ctx: RequestContext,
        request: Any,
    ) -> RawJSON:
        key = answer_key(request)
        cache_id = (method, key[0]) if key is not None else None
        cached = self._answers.get(cache_id) if cache_id is not None else None
        if key is not None and cached is not None and cached[0] == key[1]:
            return cached[1]  # a hot read is a dictionary lookup
        encoded = RawJSON(framing.payload_json(await handler(ctx, request)))
        if cache_id is not None and key == answer_key(request):  # nothing changed meanwhile
            assert key is not None
            self._answers[cache_id] = (key[1], encoded)
            if len(self._answers) > ANSWER_CACHE_SIZE:
                del self._answers[next(iter(self._answers))]
        return encoded

    async def initialize(self, ctx: RequestContext, params: Any) -> BaseModel:
        request = parse_params(InitializeParams, params)
        peer = peer_of(ctx)
        caps = request.capabilities
        peer.name = request.client_info.name
        peer.capabilities = caps
        opt_out = set(caps.opt_out_notification_methods)
        if not caps.streaming_support:
            opt_out.update(_STREAMING_METHODS)
        if not caps.command_execution_streaming:
            # commandExecution items and their output are opt-in (DotCraft).
            opt_out.update(("item/commandExecution/outputDelta", "item:commandExecution"))
        if not caps.config_change:
            opt_out.add("workspace/configChanged")
        peer.opt_out = frozenset(opt_out)
        complete = self._complete
        if complete is None:
            for hook in tuple(self.initialize_hooks):  # not those a hook adds
                hook(ctx, request)
        else:

            async def then_complete() -> None:
                await complete()
                if self._failure is not None:
                    return  # nothing was started: the next request is told why
                for hook in tuple(self.initialize_hooks):  # not those a hook adds
                    hook(ctx, request)  # their after_response callbacks run next

            ctx.after_response(then_complete)
        if peer.handshake is Handshake.NEW and not peer.closed:
            peer.handshake = Handshake.INITIALIZING
        return InitializeResult(
            server_info=ServerInfo(name=self.server_name, version=__version__),
            capabilities=self.capabilities(),
        )

    def handle_notification(self, connection: Connection, method: str, params: Any) -> None:
        peer = self.attach(connection)
        if method == "initialized" and peer.handshake is Handshake.INITIALIZING:
            peer.handshake = Handshake.READY
            self.bus.join(peer)
            for hook in tuple(self.ready_hooks):
                hook(peer)
        # Any other client notification is ignored, as the protocol says.

    def connection_closed(self, connection: Connection) -> None:
        peer = self.attach(connection)
        self.bus.leave(peer)
        for hook in tuple(self.closed_hooks):
            hook(peer)
