"""The method table looked up one entry at a time, loading only the module
that declares it.

The whole table (:mod:`appserver.protocol.methods`) imports every family's wire
models: ~140 classes, ~45 ms of a DotCraft server's start. A router needs, for
each method, only its name, capability flag and access until the method is
called; :mod:`~appserver.protocol.method_index` holds those (and which module
declares each entry) without importing anything. The entry itself, with its
wire models, comes from its module at first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from appserver.protocol import method_index

if TYPE_CHECKING:
    from appserver.protocol.spec import MethodSpec, NotificationSpec

_PACKAGE = "appserver.protocol."
_ATTRIBUTES = ("METHOD_SPECS", "NOTIFICATION_SPECS")

# (module, attribute) -> {name: entry}, filled as modules are first needed.
_loaded: dict[tuple[str, str], dict[str, Any]] = {}


def _entry(module: str | None, attribute: str, name: str) -> Any:
    if module is None:
        return None
    entries = _loaded.get((module, attribute))
    if entries is None:
        declaring = import_module(_PACKAGE + module)
        for each in _ATTRIBUTES:
            _loaded[(module, each)] = {spec.name: spec for spec in getattr(declaring, each)}
        entries = _loaded[(module, attribute)]
    return entries.get(name)


def method_spec(name: str) -> "MethodSpec | None":
    """The client->server method ``name``'s entry (``None``: no such method)."""
    facts = method_index.METHODS.get(name)
    spec: MethodSpec | None = _entry(None if facts is None else facts[0], "METHOD_SPECS", name)
    return spec


def notification_spec(name: str) -> "NotificationSpec | None":
    """The notification ``name``'s entry (``None``: no such notification)."""
    spec: NotificationSpec | None = _entry(
        method_index.NOTIFICATIONS.get(name), "NOTIFICATION_SPECS", name
    )
    return spec


def methods_declared_in(module: str) -> list[str]:
    """The client->server methods that ``appserver.protocol.<module>`` declares."""
    return [name for name, facts in method_index.METHODS.items() if facts[0] == module]
