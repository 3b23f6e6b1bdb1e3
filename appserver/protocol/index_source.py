"""Writes :mod:`appserver.protocol.method_index` from the whole method table.

    .venv/bin/python -m appserver.protocol.index_source

Run it after adding, removing or moving a method or a notification
(tests/protocol/test_method_index.py fails until the file is current).
"""

import json
from pathlib import Path

from appserver.protocol.methods import DECLARING_MODULES

INDEX_FILE = Path(__file__).with_name("method_index.py")
PACKAGE = "appserver.protocol."


def _text(value: str | None) -> str:
    return "None" if value is None else json.dumps(value)


_HEADER = '''"""Which module declares each entry of the method table, and what a router
needs to know of a method before it loads that module (its capability flag
and its access).

Generated from the method table (``protocol/methods.py``) by
``python -m appserver.protocol.index_source``; do not edit.
tests/protocol/test_method_index.py checks that it is current. It imports
nothing, so a server can route every method and advertise every capability
while a family's wire models (and the family itself) load at its first call.
"""

'''


def index_text() -> str:
    """The source of ``method_index.py`` for today's method table."""
    methods: list[str] = []
    notifications: list[str] = []
    for module in DECLARING_MODULES:
        where = _text(module.__name__.removeprefix(PACKAGE))
        for spec in module.METHOD_SPECS:
            facts = f"{where}, {_text(spec.capability)}, {_text(spec.access)}"
            methods.append(f"    {_text(spec.name)}: ({facts}),")
        notifications += [f"    {_text(spec.name)}: {where}," for spec in module.NOTIFICATION_SPECS]
    return (
        _HEADER
        + "# method -> (the module of appserver.protocol that declares it, its capability\n"
        + "# flag, its access)\n"
        + "METHODS: dict[str, tuple[str, str | None, str]] = {\n"
        + "\n".join(methods)
        + "\n}\n\n# notification -> the module of appserver.protocol that declares it\n"
        + "NOTIFICATIONS: dict[str, str] = {\n"
        + "\n".join(notifications)
        + "\n}\n"
    )


def main() -> None:
    """Write the index beside this module."""
    INDEX_FILE.write_text(index_text(), encoding="utf-8")


if __name__ == "__main__":
    main()
