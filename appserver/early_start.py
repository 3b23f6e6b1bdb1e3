"""What a stdio door checks and answers before it imports anything heavy
(appserver/transport/early.py): the answer to its client's first line, written
only once nothing that today fails a start before any frame can still fail it.

Before the early answer, as before any answer: the command line's checks, the
workspace lock and its database's creation (``Preparation``, in a thread
meanwhile), and the provider settings, which are valid whether or not the
workspace is trusted (trust is settled later, from the database). When one of
these fails, or is not certain, nothing is answered early: the door starts as
it always did and reports the failure the same way (one stderr line and the
exit code, no frame). What comes after (the migrations, the runtime's start)
is reported after the answer, as a deferred server always did.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from appserver.providers import resolve_settings
from appserver.storage.preparation import Preparation
from appserver.storage.user_settings import load_user_settings
from appserver.storage.workspace_config import load_workspace_config
from appserver.transport.early import EarlyAnswer, answer_first_line


def settings_hold(
    provider_options: Mapping[str, Any],
    workspace: Path,
    workspace_config: Mapping[str, Any],
    key_required: bool = False,
) -> bool:
    """Whether the provider settings resolve (as the door will resolve them)
    both for a trusted and an untrusted workspace: then no bad setting can
    fail the start after an early answer. ``key_required`` (the faces, as
    ``hosting.provider_settings``): a hosted provider needs a key or an endpoint."""
    user = load_user_settings(workspace)
    try:
        for trusted in (True, False):
            settings = resolve_settings(
                provider_options, os.environ, workspace_config, user=user, trusted=trusted
            )
            hosted = settings.provider != "offline"
            if key_required and hosted and not settings.api_key and not settings.base_url:
                return False
    except ValueError:
        return False
    return True


def prepare(workspace: Path) -> Preparation:
    """The workspace's lock and database, taken and created in a thread now
    (what ``AppServer.open`` and ``hosting.open_host`` then use)."""
    from appserver import __version__
    from appserver.storage.lock import WorkspaceLock

    craft_dir = workspace.resolve() / ".craft"
    info = {"workspacePath": str(workspace.resolve()), "version": __version__}
    lock = WorkspaceLock(craft_dir / "appserver.lock")
    return Preparation(lock, craft_dir / "appserver.db", info)


def answer_face(
    workspace: Path, provider_options: Mapping[str, Any], answer: Callable[[bytes], str | None]
) -> tuple[Preparation, EarlyAnswer]:
    """A face on stdio: its workspace prepared, and ``answer`` (the face's
    ``early_answer``) written to the client's first line once nothing checked
    before its runtime opens can fail."""
    prepared = prepare(workspace)
    workspace_config = load_workspace_config(workspace.resolve() / ".craft")

    def may_answer() -> bool:
        return prepared.succeeded() and settings_hold(
            provider_options, workspace, workspace_config, key_required=True
        )

    return prepared, answer_first_line(answer, may_answer)


def answer_initialize(
    workspace: Path, prepared: Preparation, provider_options: Mapping[str, Any]
) -> EarlyAnswer:
    """``appserver app-server`` over stdio: DotCraft's ``initialize`` answered
    from the declared capabilities (appserver/services/handshake.py)."""
    from appserver.services.advertised import advertised_capabilities
    from appserver.services.handshake import initialize_answer

    workspace_config = load_workspace_config(workspace.resolve() / ".craft")
    capabilities = advertised_capabilities(workspace_config)

    def may_answer() -> bool:
        return prepared.succeeded() and settings_hold(provider_options, workspace, workspace_config)

    return answer_first_line(
        lambda line: initialize_answer(line, capabilities, "appserver"), may_answer
    )
