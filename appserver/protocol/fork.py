"""Wire models of ``thread/fork`` (DotCraft v0.2.15's shape): where the copied
history ends and who owns the fork."""

from typing import Literal

from pydantic import field_validator

from appserver.protocol.base import Flag, Label, WireModel
from appserver.protocol.threads import SessionIdentity, ThreadConfiguration, config_size


class ForkPoint(WireModel):
    """Where a fork's copied history ends."""

    turn_id: str
    """A turn of the source thread (not a running one)."""
    item_id: str | None = None
    """Not supported: a fork point inside a turn is refused."""
    position: Literal["after", "before"] = "after"
    """`after`: the turn is copied; `before`: only the turns before it."""


class ThreadForkParams(WireModel):
    thread_id: str
    """The thread to fork."""
    fork_point: ForkPoint | None = None
    """Where the copied history ends; absent: every turn that is not running."""
    identity: SessionIdentity | None = None
    """Who owns the fork; absent: the source's owner, channel and workspace."""
    config: ThreadConfiguration | None = None
    """The fork's configuration; absent: the source's."""
    display_name: Label | None = None
    """The fork's title; absent: the source's title + ` (fork)`."""
    exclude_turns: Flag = False
    """Answer without the fork's turns."""

    @field_validator("config")
    @classmethod
    def _config(cls, config: ThreadConfiguration | None) -> ThreadConfiguration | None:
        return config_size(config)
