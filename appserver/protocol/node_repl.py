"""Wire models and method-table entries of the desktop's Node REPL (DotCraft's
``nodeRepl`` + ``browserUse`` client capabilities): when the connection bound
to a thread advertised both, the model is offered ``NodeReplJs``, and each call
is the server->client request ``ext/nodeRepl/evaluate`` (JavaScript run in the
client's persistent per-thread REPL, which drives its embedded browser); an
interrupted or timed-out evaluation is followed by ``ext/nodeRepl/cancel``.
See docs/tools.md.
"""

from pydantic import Field

from appserver.protocol.base import Flag, Int, OpenWireModel, WireModel
from appserver.protocol.limits import INT64_MAX, INT64_MIN
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec


class NodeReplCapability(OpenWireModel):
    """`initialize.capabilities.nodeRepl`: the client hosts a persistent Node REPL per thread."""

    backend: str | None = None
    """The client's runtime (DotCraft Desktop: `desktop-node`); informational."""


class BrowserUseCapability(OpenWireModel):
    """`initialize.capabilities.browserUse`: the client's REPL drives an embedded browser."""

    backend: str | None = None
    """The browser backend (DotCraft Desktop: `desktop-iab`); informational."""
    protocol_version: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """The browser-use protocol version (DotCraft's is `2`); informational."""
    supports_cancel: Flag | None = None
    """The client handles `ext/nodeRepl/cancel` (it is sent in any case: an error answer is
    ignored)."""


class NodeReplEvaluateParams(WireModel):
    """Evaluate JavaScript in the thread's REPL (`ext/nodeRepl/evaluate`)."""

    thread_id: str
    """The thread whose REPL (and browser tabs) run the code."""
    evaluation_id: str
    """Unique per evaluation (`node-repl-<hex>`): `ext/nodeRepl/cancel` names it, and a client
    asked again after reconnecting can tell a repeat."""
    code: str
    """The JavaScript the model wrote (top-level `await` and state that persists between
    calls, as the client's REPL allows)."""
    timeout_ms: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """How long the evaluation may run (the tool's `timeoutSeconds`, 1-120 s, default 30);
    the server waits this long plus a margin (5 s) for the answer."""


class NodeReplImage(OpenWireModel):
    """An image the evaluation produced (a screenshot, `display()`)."""

    media_type: str = "image/png"
    """The image's media type."""
    data_base64: str = ""
    """The image, base64-encoded (empty: left out)."""


class NodeReplEvaluateResult(OpenWireModel):
    """What the evaluation printed and returned (every field optional)."""

    text: str | None = None
    """Output text (stdout-like)."""
    result_text: str | None = None
    """The final expression's value, serialised."""
    images: list[NodeReplImage] | None = None
    """Images for the model."""
    logs: list[str] | None = None
    """Console lines."""
    error: str | None = None
    """What went wrong, readable: the tool call fails with it (the other fields still
    reach the model)."""


class NodeReplCancelParams(WireModel):
    """Stop an evaluation (`ext/nodeRepl/cancel`)."""

    thread_id: str
    """The thread whose REPL runs it."""
    evaluation_id: str
    """The `evaluationId` of the `ext/nodeRepl/evaluate` to stop."""


class NodeReplCancelResult(OpenWireModel):
    """Whether an evaluation was stopped (`{ok}`; the answer is not used)."""

    ok: Flag | None = None
    """`false`: no such evaluation was running."""


METHOD_SPECS: list[MethodSpec] = []
NOTIFICATION_SPECS: list[NotificationSpec] = []

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = [
    ServerRequestSpec(
        "ext/nodeRepl/evaluate",
        NodeReplEvaluateParams,
        NodeReplEvaluateResult,
        "The model's `NodeReplJs` call: sent to the connection bound to the thread when it "
        "advertised both `nodeRepl` and `browserUse`. Answer `{text?, resultText?, images?, "
        "logs?, error?}` within `timeoutMs` (+5 s). A timeout, a vanished client, an error or "
        "an invalid answer fail the call (a failed `pluginFunctionCall` item); the turn goes on.",
    ),
    ServerRequestSpec(
        "ext/nodeRepl/cancel",
        NodeReplCancelParams,
        NodeReplCancelResult,
        "Best effort, after the turn running an `ext/nodeRepl/evaluate` was interrupted or the "
        "server stopped waiting for it: stop that evaluation and ignore its late result. "
        "Answer `{ok}`; the answer (or its absence within 2 s) changes nothing.",
    ),
]
