"""Every optional method family: installed, in this order, when a server opens,
or set up there to install when it is first needed.

A family's ``install(server)`` registers its handlers on ``server.router``
(its capability is advertised while every method carrying it is served or waits
for its first call), may add agent
tools to ``server.runtime.engine.tools``, input resolvers to ``server.runtime.materializer``,
and background tasks through ``server.start_background``.

A family that only serves methods (no tool, hook or background work a session
may need before calling them) is installed at the first call of one of them
instead, or when a turn's input first has a part it resolves: a server that is
never asked for them never imports it nor its wire models (a few milliseconds
of every session's start each). A family with work of its own that may come
before any call (automations: tasks in ``.craft/tasks``) can still wait, with
a light ``prepare`` that installs it at start when it has work, or later when
work appears.
"""

from __future__ import annotations

from functools import partial
from importlib import import_module
from typing import TYPE_CHECKING, Any, NamedTuple

from appserver.protocol.table import methods_declared_in

if TYPE_CHECKING:
    from collections.abc import Callable

    from appserver.runtime.inputs import Resolved, Resolver
    from appserver.services.context import FamilyContext


class Family(NamedTuple):
    """One method family."""

    module: str  # the module that holds its ``install(server)``
    # None: installed when the server opens. Else the protocol module
    # (``appserver.protocol.<name>``) whose methods it serves, the first call
    # of any of which installs it.
    at_first_call: str | None = None
    # Input part types it resolves (``runtime.materializer.resolvers``): the
    # first such part installs it too (only with ``at_first_call``).
    resolves: tuple[str, ...] = ()
    # Only with ``at_first_call``: a light module whose ``prepare(server,
    # wait)`` runs at start instead, for a family with work of its own that
    # may come before any call. ``wait(methods=None)`` registers its methods
    # (all, or those a setting leaves on) for their first call and returns the
    # function that installs it now, once. ``prepare`` does not call it when
    # the family is switched off, may install at once when there is work, and
    # may watch for work (a hook, a listener, a background poll).
    prepare: str | None = None


FAMILIES: tuple[Family, ...] = (
    Family("appserver.services.workspace", at_first_call="workspace"),
    Family("appserver.services.skills"),
    Family("appserver.services.plugins"),
    Family("appserver.services.mcp"),
    Family("appserver.services.commands", at_first_call="commands", resolves=("commandRef",)),
    Family(
        "appserver.services.cron",
        at_first_call="cron",
        prepare="appserver.services.cron_waiting",
    ),
    Family(
        "appserver.services.channels",
        at_first_call="channels",
        prepare="appserver.services.channels_waiting",
    ),
    Family("appserver.services.terminals"),
    Family("appserver.services.prompt", at_first_call="prompt"),
    Family("appserver.services.grants", at_first_call="grants"),
    Family("appserver.services.subagent_profiles", at_first_call="subagent_profiles"),
    Family("appserver.services.subagent_sessions", at_first_call="subagent_sessions"),
    Family(
        "appserver.services.suggestions",
        at_first_call="suggestions",
        prepare="appserver.services.suggestions_waiting",
    ),
    Family(
        "appserver.services.automations",
        at_first_call="automations",
        prepare="appserver.services.automations_waiting",
    ),
)


def every_module() -> list[str]:
    """Every family's modules, waiting ones too, and the whole method table:
    what a warm parent preloads (appserver/warm_parent.py)."""
    names = [name for family in FAMILIES for name in (family.module, family.prepare) if name]
    return [*names, "appserver.protocol.methods"]


def install_family(family: Family, server: FamilyContext) -> None:
    """Import ``family`` and run its ``install`` on ``server``."""
    import_module(family.module).install(server)


def install_families(server: FamilyContext) -> None:
    """Install every family now, or set it up to install at its first call."""
    for family in FAMILIES:
        if family.at_first_call is None:
            if family.resolves or family.prepare:
                raise ValueError(
                    f"{family.module}: resolves and prepare are for families that wait"
                )
            install_family(family, server)
        elif family.prepare is None:
            _wait(family, server)
        else:
            prepare_family(family, server)


def prepare_family(family: Family, server: FamilyContext) -> None:
    """Run ``family``'s light ``prepare`` on ``server`` (it registers the family
    to wait, or installs it, or neither when it is switched off)."""
    assert family.prepare is not None
    import_module(family.prepare).prepare(server, partial(_wait, family, server))


def _wait(
    family: Family, server: FamilyContext, methods: list[str] | None = None
) -> Callable[[], None]:
    """Register ``family`` to install at the first call of ``methods`` (default:
    every method its protocol module declares; fewer when a setting switches some
    off); the function that installs it now."""
    assert family.at_first_call is not None
    if methods is None:
        methods = methods_declared_in(family.at_first_call)
    install = server.router.register_at_first_call(methods, partial(install_family, family, server))
    for part_type in family.resolves:
        server.runtime.materializer.resolvers[part_type] = _resolving_after(
            install, server, part_type
        )
    return install


def _resolving_after(
    install: Callable[[], None], server: FamilyContext, part_type: str
) -> Resolver:
    """A resolver that installs its family (which sets the real resolver) and
    hands the part to it."""

    async def resolve(part: Any) -> Resolved:
        install()
        resolver = server.runtime.materializer.resolvers[part_type]
        if resolver is resolve:
            raise RuntimeError(f"installing its family did not set a {part_type} resolver")
        return await resolver(part)

    return resolve
