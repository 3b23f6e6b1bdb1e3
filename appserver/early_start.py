"""What a door checks and answers before it imports anything heavy
(appserver/transport/early.py, and early_ws.py for the WebSocket server): the
answer to its client's first line or frame, written only once nothing that
today fails a start before any frame can still fail it.

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
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appserver.providers import resolve_settings, settled_model
from appserver.storage.preparation import Preparation
from appserver.storage.user_settings import load_user_settings
from appserver.storage.workspace_config import load_workspace_config
from appserver.transport.early import EarlyAnswer, answer_first_line

if TYPE_CHECKING:
    from appserver.transport.early_ws import EarlyListener
    from appserver.transport.listen_options import ListenerOptions


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


def listening_block(
    endpoint: str, web_client: bool, workspace: Path, provider: str, model: str, url: str | None
) -> str:
    """What a WebSocket server says once it listens, as one block on stderr: the
    address (its first line is fixed: scripts wait for it, and the port may have
    been 0), the web page, the workspace and the model in use."""
    lines = [f"appserver: listening on {endpoint}"]
    if web_client:
        page = endpoint.replace("ws://", "http://", 1).removesuffix("ws")
        lines.append(f"appserver: web client at {page}")
    at = f" at {url}" if url else ""
    lines += [
        f"appserver: workspace {workspace.resolve()}",
        f"appserver: provider {provider}, model {model}{at}",
    ]
    return "\n".join(lines)


def settled_provider(
    provider_options: Mapping[str, Any], workspace: Path, workspace_config: Mapping[str, Any]
) -> tuple[str, str, str | None] | None:
    """(provider, model, endpoint) as the built server will name them, when the
    settings give the same whether or not the workspace is trusted."""
    user = load_user_settings(workspace)
    chosen = settled_model(provider_options, workspace_config, user)
    if chosen is None:
        return None
    urls = {
        resolve_settings(
            provider_options, os.environ, workspace_config, user=user, trusted=trusted
        ).base_url
        for trusted in (True, False)
    }
    return (*chosen, urls.pop()) if len(urls) == 1 else None


# SIGINT/SIGTERM received between an early "listening on" and the server's own
# handlers (appserver/server/process.py): a supervisor may stop the server as
# soon as it sees that line, and must still get a clean shutdown.
_held_signals: list[int] = []


def _hold(signum: int, frame: object) -> None:
    _held_signals.append(signum)


def hold_stop_signals() -> None:
    """Hold SIGINT and SIGTERM (record them, do not die) until :func:`release_stop_signals`."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _hold)


def release_stop_signals() -> None:
    """Send the held signals again, now that the server's handlers take them
    (call once it is ready: they then stop it cleanly)."""
    held, _held_signals[:] = list(_held_signals), []
    for signum in dict.fromkeys(held):
        signal.raise_signal(signum)


def listen_early(
    workspace: Path, options: ListenerOptions, provider_options: Mapping[str, Any]
) -> tuple[Preparation, EarlyListener | None]:
    """``appserver app-server --listen ws://`` on an IP literal: the workspace
    prepared, the socket bound and announced (the start-up block), and the first
    connection's ``initialize`` answered, once nothing checked before the server
    listens can fail (appserver/transport/early_ws.py). ``None``: nothing was
    bound; the server binds and says so as it always did."""
    from appserver.services.advertised import advertised_capabilities
    from appserver.services.handshake import initialize_answer
    from appserver.transport.base import ListenerError
    from appserver.transport.early_ws import EarlyListener, bind, first_connection
    from appserver.transport.listen_options import endpoint

    prepared = prepare(workspace)
    workspace_config = load_workspace_config(workspace.resolve() / ".craft")
    if not (prepared.succeeded() and settings_hold(provider_options, workspace, workspace_config)):
        return prepared, None
    provider = settled_provider(provider_options, workspace, workspace_config)
    if provider is None:
        return prepared, None  # the block names the model: known once the provider is built
    try:
        sock = bind(options)
    except ListenerError:
        return prepared, None
    listener = EarlyListener(sock)
    hold_stop_signals()  # announced from here on: a stop must end cleanly
    address = endpoint(options, listener.port)
    sys.stderr.write(listening_block(address, options.web_client, workspace, *provider) + "\n")
    sys.stderr.flush()
    capabilities = advertised_capabilities(workspace_config)
    listener.accepted = first_connection(
        sock,
        lambda text: initialize_answer(text, capabilities, "appserver"),
        token_required=options.token is not None,
    )
    return prepared, listener
