"""The Codex face's ``initialize``: its result (the one source, used by the face's
handler in ``threads``), and the same answer written before the face is built
(appserver/transport/early.py), with the standard library only."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from appserver import __version__
from appserver.faces.codex.shapes import CODEX_VERSION
from appserver.transport.early import compact, load_object, plain_id


def client_name(params: dict[str, Any]) -> str:
    """The client's name from ``initialize`` params (``codex`` when it gave none)."""
    info = params.get("clientInfo")
    name = info.get("name") if isinstance(info, dict) else None
    return name if isinstance(name, str) and name else "codex"


def initialize_result(params: dict[str, Any], workspace: str) -> dict[str, Any]:
    """What ``initialize`` answers: the user agent Codex reports (with the
    client's name and version), where its home is, the platform."""
    info = params.get("clientInfo")
    version = info.get("version") if isinstance(info, dict) else None
    name = client_name(params)
    machine = f"{platform.system()} {platform.release()}; {platform.machine()}"
    agent = f"{name}/{CODEX_VERSION} ({machine}) appserver/{__version__}"
    if isinstance(version, str) and version:
        agent += f" ({name}; {version})"
    return {
        "userAgent": agent,
        "codexHome": str(os.path.join(workspace, ".craft")),
        "platformFamily": "windows" if sys.platform == "win32" else "unix",
        "platformOs": {"linux": "linux", "darwin": "macos", "win32": "windows"}.get(
            sys.platform, sys.platform
        ),
    }


def initialize_answer(line: bytes, workspace: str) -> str | None:
    """The response frame to ``line`` if it is an ``initialize`` request with
    params (an object or none), else ``None`` (the face answers it)."""
    message = load_object(line, strict_numbers=True)  # as faces/codex/wire.py check
    if message is None or message.get("method") != "initialize":
        return None
    request_id = message.get("id")
    params = message.get("params")
    if params is None:
        params = {}
    if not plain_id(request_id) or not isinstance(params, dict):
        return None
    result = initialize_result(params, workspace)
    return f'{{"id":{compact(request_id)},"result":{compact(result)}}}'
