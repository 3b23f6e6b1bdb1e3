"""docs/coverage.md claims exactly what the method table serves."""

from __future__ import annotations

import re
from pathlib import Path

from appserver.protocol.methods import METHODS, NOTIFICATIONS, SERVER_REQUESTS

ROWS = re.findall(
    r"^\| `([^`]+)` \| ([^|]+)\|",
    (Path(__file__).resolve().parents[1] / "docs" / "coverage.md").read_text("utf-8"),
    re.M,
)
TABLE = set(METHODS) | set(NOTIFICATIONS) | set(SERVER_REQUESTS)


def test_implemented_rows_are_in_the_method_table() -> None:
    claimed = {name for name, status in ROWS if status.strip().startswith("implemented")}
    claimed.discard("initialized")  # a client notification, handled by the JSON-RPC core
    assert claimed <= TABLE, sorted(claimed - TABLE)


def test_every_table_entry_is_listed_as_implemented() -> None:
    listed = {name for name, status in ROWS if status.strip().startswith("implemented")}
    assert listed >= TABLE, sorted(TABLE - listed)
