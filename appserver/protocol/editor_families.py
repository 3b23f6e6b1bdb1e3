"""Wire models and method-table entries of the IDE's own request families
(DotCraft's ``acpExtensions.extensions``, ACP's ``_``-prefixed custom methods):
a client that lists a family (``_unity``) serves ``ext/acp/<family>/<method>``
server->client requests, each with ``threadId`` and the method's own fields.

Two kinds of tool send them, only on threads whose bound client lists the
family (and whose configuration's ``extensions``, when set, names it): the
server's own tools for ``_unity`` (DotCraft's Unity module: ``unity_scene_query``,
``unity_get_selection``, ``unity_get_console_logs``, ``unity_get_project_info``),
and tools a client declares in ``thread/start.dynamicTools`` with an
``acpMethod`` (``_family/method``): a call sends the model's arguments as that
method's params. See docs/tools.md. The names' rules are in
:mod:`appserver.protocol.acp_names` (no models: what a turn without such
tools needs of them).
"""

from pydantic import Field

from appserver.protocol.base import Flag, Int, OpenWireModel, WireModel
from appserver.protocol.limits import INT64_MAX, INT64_MIN
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec


class AcpFamilyParams(OpenWireModel):
    """A request of a client's own family (`ext/acp/<family>/<method>`): `threadId` and
    the method's fields (for a declared tool: the model's arguments)."""

    thread_id: str
    """The thread whose agent asks (bridges strip it before forwarding to the IDE)."""


class AcpFamilyResult(OpenWireModel):
    """Any JSON object: it becomes the tool's result (the model reads it as JSON)."""

    error: str | None = None
    """Set: the method failed (DotCraft's Unity client answers `{error}`); the tool call
    fails with it."""


# --- `_unity` (DotCraft's Unity module; the Unity client package serves these) ---------


class UnitySceneQueryParams(WireModel):
    """The scene hierarchy (`ext/acp/_unity/scene_query`, tool `unity_scene_query`)."""

    thread_id: str
    """The thread whose agent asks."""
    query: str | None = None
    """Keep GameObjects whose name or path contains this (case-insensitive)."""
    include_components: Flag = False
    """List each GameObject's component type names."""
    max_depth: Int = Field(default=10, ge=1, le=INT64_MAX)
    """How deep to walk the hierarchy (default 10)."""


class UnityConsoleLogsParams(WireModel):
    """Recent console entries (`ext/acp/_unity/get_console_logs`, tool
    `unity_get_console_logs`)."""

    thread_id: str
    """The thread whose agent asks."""
    types: list[str] | None = None
    """Only these types: `error`, `warning`, `log` (absent: all)."""
    limit: Int = Field(default=50, ge=1, le=INT64_MAX)
    """At most this many, the newest (default 50)."""


class UnityThreadParams(WireModel):
    """A request with no fields of its own (`ext/acp/_unity/get_selection`,
    `ext/acp/_unity/get_project_info`)."""

    thread_id: str
    """The thread whose agent asks."""


class UnityGameObject(OpenWireModel):
    """One GameObject (fields as DotCraft's Unity client sends them; all optional)."""

    name: str | None = None
    """Its name."""
    path: str | None = None
    """Its hierarchy path (`/Parent/Child`)."""
    instance_id: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """Unity's instance id."""
    active: Flag | None = None
    """Whether it is active itself."""
    components: list[str] | None = None
    """Component type names (with `includeComponents`)."""
    children: "list[UnityGameObject] | None" = None
    """Its children, down to `maxDepth`."""


class UnitySceneQueryResult(AcpFamilyResult):
    """The matching GameObjects."""

    objects: list[UnityGameObject] | None = None
    """Root objects (or matches) with their children."""


class UnitySelectionResult(AcpFamilyResult):
    """What the editor has selected."""

    selected_objects: list[UnityGameObject] | None = None
    """The selected GameObjects, with their components."""


class UnityConsoleLogEntry(OpenWireModel):
    """One console entry."""

    type: str | None = None
    """`error`, `warning` or `log`."""
    message: str | None = None
    """The message."""
    stack_trace: str | None = None
    """Its stack trace."""
    count: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """How many times it repeated."""


class UnityConsoleLogsResult(AcpFamilyResult):
    """The console entries."""

    logs: list[UnityConsoleLogEntry] | None = None
    """Oldest first."""


class UnityProjectInfoResult(AcpFamilyResult):
    """The project."""

    project_name: str | None = None
    """The project's name."""
    unity_version: str | None = None
    """The editor's version."""
    project_path: str | None = None
    """Where the project is."""
    packages: list[str] | None = None
    """Installed packages."""


METHOD_SPECS: list[MethodSpec] = []
NOTIFICATION_SPECS: list[NotificationSpec] = []

_COMMON = (
    "Sent to the connection bound to the thread when its `acpExtensions.extensions` lists the "
    "family (and the thread's `extensions`, when set, names it); a client that reconnects and "
    "resumes the thread in time is asked again. A timeout, a vanished client, an error or an "
    "`{error}` answer fail the tool call, not the turn."
)

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = [
    ServerRequestSpec(
        "ext/acp/<family>/<method>",
        AcpFamilyParams,
        AcpFamilyResult,
        "A call of a tool the client declared in `thread/start.dynamicTools` with "
        '`acpMethod: "<family>/<method>"`: params are `threadId` and the model\'s arguments; '
        f"any JSON object answers (the `dynamicToolCall` item's `structuredResult`). {_COMMON}",
    ),
    ServerRequestSpec(
        "ext/acp/_unity/scene_query",
        UnitySceneQueryParams,
        UnitySceneQueryResult,
        f"The `unity_scene_query` tool. Answer `{{objects}}`. {_COMMON}",
    ),
    ServerRequestSpec(
        "ext/acp/_unity/get_selection",
        UnityThreadParams,
        UnitySelectionResult,
        f"The `unity_get_selection` tool. Answer `{{selectedObjects}}`. {_COMMON}",
    ),
    ServerRequestSpec(
        "ext/acp/_unity/get_console_logs",
        UnityConsoleLogsParams,
        UnityConsoleLogsResult,
        f"The `unity_get_console_logs` tool. Answer `{{logs}}`. {_COMMON}",
    ),
    ServerRequestSpec(
        "ext/acp/_unity/get_project_info",
        UnityThreadParams,
        UnityProjectInfoResult,
        f"The `unity_get_project_info` tool. Answer `{{projectName, unityVersion, projectPath, "
        f"packages}}`. {_COMMON}",
    ),
]
