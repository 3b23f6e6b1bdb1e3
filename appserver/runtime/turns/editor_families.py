"""Tools whose calls are requests of the editor's own families (``ext/acp/<family>/<method>``).

A client that lists a family in ``acpExtensions.extensions`` (``_unity``)
answers that family's methods. Two kinds of tool send them, on the threads
whose editor (the bound client, as for ``ext/acp/fs/*``) serves the family and
whose configuration's ``extensions``, when set, names it:

- the server's own family tools (``tools.editor_families``: DotCraft's
  ``_unity`` tools), recorded like built-in tools (``toolCall`` and
  ``toolResult`` items: what DotCraft's ACP bridge shows the IDE);
- tools a client declared in ``thread/start.dynamicTools`` with an
  ``acpMethod`` (``runtime.turns.client_tools``; ``dynamicToolCall`` items):
  the model's arguments are the params.

Each request goes through the editor proxy (timeout, reconnect grace, asked
again of an editor that takes the seat); a failure, an invalid answer or an
``{error}`` answer fails the tool call, never the turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from appserver.protocol.acp_names import family_of
from appserver.providers.base import ToolSpec
from appserver.runtime.subagent_roles import tool_offered
from appserver.runtime.turns.editor_proxy import (
    EditorGone,
    EditorProxy,
    EditorRefused,
    EditorTimeout,
)
from appserver.runtime.turns.model import ActiveTurn
from appserver.tools.base import ToolError, ToolOutcome

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel

    # The families' wire models and tools load when a turn's editor serves a
    # family (most never do: a plain turn imports neither).
    from appserver.protocol.editor_families import AcpFamilyResult
    from appserver.tools.editor_families import FamilyTool

_ROUTING = ("threadId", "thread_id")


class InvalidAnswer(ToolError):
    """The editor's answer is not the object the method returns."""


class MethodFailed(ToolError):
    """The editor answered the method with ``{error}``."""


async def ask_family(
    proxy: EditorProxy,
    active: ActiveTurn,
    method: str,
    params: WireModel,
    timeout: float,
    result: type[AcpFamilyResult] | None = None,
) -> dict[str, Any]:
    """Send ``ext/acp/<method>`` (``method``: ``_family/name``) to the turn's
    editor; its answer. A :class:`ToolError` when it did not answer in time,
    left for good or refused (the editor proxy's), when the answer does not
    fit ``result`` (default: any object; :class:`InvalidAnswer`), or when it
    says ``{error}`` (:class:`MethodFailed`)."""
    if result is None:
        from appserver.protocol.editor_families import AcpFamilyResult

        result = AcpFamilyResult
    wire_method = f"ext/acp/{method}"
    answered, _ = await proxy.ask(active, wire_method, params, timeout)
    answer = dict(answered)
    from pydantic import ValidationError

    from appserver.protocol.base import first_error

    try:
        checked = result.model_validate(answer)
    except ValidationError as exc:
        raise InvalidAnswer(f"invalid answer to {wire_method}: {first_error(exc)}") from exc
    if checked.error:
        raise MethodFailed(f"{wire_method} failed: {checked.error}")
    return answer


def failure_code(error: ToolError) -> str:
    """The ``dynamicToolCall`` ``errorCode`` of a failed family request (the
    codes of ``item/tool/call`` failures)."""
    if isinstance(error, EditorTimeout):
        return "toolCallTimeout"
    if isinstance(error, EditorGone):
        return "toolCallClientGone"
    if isinstance(error, InvalidAnswer):
        return "invalidResult"
    if isinstance(error, EditorRefused | MethodFailed):
        return "clientError"
    return "toolCallUnavailable"


async def declared_tool_result(
    proxy: EditorProxy, active: ActiveTurn, method: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """The result fields of a call of a client-declared tool with ``acpMethod``
    (``{success, structuredResult}``, or ``{success: false, errorCode,
    errorMessage}``): the model's arguments and ``threadId`` are the params."""
    from appserver.protocol.editor_families import AcpFamilyParams

    fields = {
        key: value for key, value in arguments.items() if key not in ("threadId", "thread_id")
    }
    params = AcpFamilyParams(thread_id=active.thread_id, **fields)
    try:
        answer = await ask_family(proxy, active, method, params, proxy.approvals.timeout)
    except ToolError as exc:
        return {"success": False, "errorCode": failure_code(exc), "errorMessage": str(exc)}
    return {"success": True, "structuredResult": answer}


def declared_tool_served(proxy: EditorProxy, active: ActiveTurn, method: str) -> bool:
    """Whether a client-declared tool with ``acpMethod`` is offered on this turn."""
    return family_of(method).casefold() in proxy.families(active)


class EditorFamilyTools:
    """The server's family tools (``tools.editor_families``), offered per turn."""

    def __init__(self, proxy: EditorProxy, catalog: tuple[FamilyTool, ...] | None = None) -> None:
        self.proxy = proxy
        self._catalog = catalog  # None: tools.editor_families's, loaded at first need

    @property
    def catalog(self) -> tuple[FamilyTool, ...]:
        """The family tools there are (loaded when a turn's editor first serves a family)."""
        if self._catalog is None:
            from appserver.tools.editor_families import FAMILY_TOOLS

            self._catalog = FAMILY_TOOLS
        return self._catalog

    def offered(self, active: ActiveTurn) -> list[FamilyTool]:
        """The family tools of this turn: their family is served by the thread's
        editor and allowed on the thread, and the thread's tool lists allow them."""
        families = self.proxy.families(active)
        if not families:
            return []
        return [
            tool
            for tool in self.catalog
            if tool.family.casefold() in families and tool_offered(active.thread, tool.name)
        ]

    def specs(self, active: ActiveTurn, taken: set[str]) -> list[ToolSpec]:
        """What the model is offered (a name ``taken`` by a built-in tool is not)."""
        return [tool.spec() for tool in self.offered(active) if tool.name not in taken]

    def find(self, active: ActiveTurn, name: str) -> FamilyTool | None:
        """The family tool ``name`` if this turn offers it."""
        return next((tool for tool in self.offered(active) if tool.name == name), None)

    async def run(self, active: ActiveTurn, tool: FamilyTool, arguments: Any) -> ToolOutcome:
        """One call: bad arguments, a failed request or a bad answer are a failed
        outcome; the answer, as JSON, is the output."""
        args = arguments if isinstance(arguments, Mapping) else {}
        from pydantic import ValidationError

        from appserver.protocol.base import first_error

        try:
            params = tool.params(active.thread_id, args)
            answer = await ask_family(
                self.proxy, active, tool.method, params, self.proxy.approvals.timeout, tool.result
            )
        except ToolError as exc:
            return ToolOutcome(False, f"Error: {exc}")
        except ValidationError as exc:  # an argument the params model refuses
            return ToolOutcome(False, f"Error: {first_error(exc)}")
        return ToolOutcome(True, json.dumps(answer, ensure_ascii=False))
