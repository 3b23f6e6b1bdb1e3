"""The light index of the method table (protocol/method_index.py) and the
lookups over it (protocol/table.py) agree with the whole table."""

from __future__ import annotations

from appserver.protocol import method_index, table
from appserver.protocol.index_source import INDEX_FILE, index_text
from appserver.protocol.methods import METHODS, NOTIFICATIONS


def test_the_index_is_current() -> None:
    assert INDEX_FILE.read_text(encoding="utf-8") == index_text(), (
        "the method table changed: run `.venv/bin/python -m appserver.protocol.index_source`"
    )


def test_each_lookup_finds_the_entry_of_the_whole_table() -> None:
    assert list(method_index.METHODS) == list(METHODS)
    for name, spec in METHODS.items():
        assert table.method_spec(name) is spec
        module, capability, access = method_index.METHODS[name]
        assert (capability, access) == (spec.capability, spec.access)
        assert name in table.methods_declared_in(module)
    assert set(method_index.NOTIFICATIONS) == set(NOTIFICATIONS)
    for name, notification in NOTIFICATIONS.items():
        assert table.notification_spec(name) is notification


def test_unknown_names_are_none() -> None:
    assert table.method_spec("no/such") is None
    assert table.notification_spec("no/such") is None
    assert table.methods_declared_in("no_such_module") == []
