"""The ``channels`` family: ``channel/list``, ``channel/status``,
``externalChannel/*`` and the channel-adapter side (admission, turn
attribution, reply delivery through ``ext/channel/send``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appserver.services.channels.adapters import AdapterHub
from appserver.services.channels.management import ChannelManagement
from appserver.storage.channels import ExternalChannelRepository

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext


def install(server: FamilyContext) -> None:
    """Register the family's handlers and hooks on ``server``."""
    repo = ExternalChannelRepository(server.db)
    hub = AdapterHub(server, repo)
    # The handlers first: a family installed at its first use that fails to
    # register leaves no hook behind.
    ChannelManagement(server, repo, hub).register()
    hub.install()
