"""Keeping a per-thread map bounded: the runtime remembers things about the
threads it served (who got a broadcast, the numbers handed out, whose tools
were read), and a server that ran turns on a million threads must not keep a
million entries of each. Past a limit, the oldest entries go.
"""

from __future__ import annotations

import itertools
from collections.abc import Container
from typing import Any, TypeVar

_Key = TypeVar("_Key")


def make_room(entries: dict[_Key, Any], limit: int, keep: Container[_Key] = ()) -> None:
    """Before a new key goes into ``entries``: when it holds ``limit`` keys or
    more, drop the first tenth in insertion order (the oldest, or the least
    recently used where a use moves its key to the end), but those in ``keep``.

    A tenth at a time, not one key per insert: deleting a dict's first key one
    by one makes each next one a longer scan (past the slots deleted before it).
    """
    if len(entries) < limit:
        return
    oldest = (key for key in entries if key not in keep)
    for key in list(itertools.islice(oldest, len(entries) // 10 + 1)):
        del entries[key]
