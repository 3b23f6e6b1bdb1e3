"""The ACP face's ``initialize``: its result (the one source: the agent's
``initialize`` answers with it, validated as the ``acp`` package's
``InitializeResponse``), and the same answer written before the face is built
(appserver/transport/early.py) without importing the ``acp`` package, whose
schema module is most of the face's start.

The answer depends on nothing the client sent (we speak protocol version 1
whichever it asks). Only a request whose params the package's
``InitializeRequest`` certainly accepts is answered early; anything else is
left to the face.
"""

from __future__ import annotations

from typing import Any

from appserver import __version__
from appserver.transport.early import initialize_response

# acp.PROTOCOL_VERSION, the version we speak (a test keeps them equal).
PROTOCOL_VERSION = 1
_LARGEST_VERSION = 65535  # InitializeRequest.protocolVersion's bound (uint16)


def initialize_result() -> dict[str, Any]:
    """What ``initialize`` answers, as it is written on the wire."""
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
            "sessionCapabilities": {"list": {}},
        },
        "authMethods": [],
        "agentInfo": {"name": "appserver", "title": "appserver", "version": __version__},
    }


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _plain_params(params: Any) -> bool:
    """Whether ``InitializeRequest`` certainly accepts ``params``: the version,
    file system and terminal capabilities, and the client's name."""
    if not isinstance(params, dict) or set(params) - {
        "protocolVersion",
        "clientCapabilities",
        "clientInfo",
    }:
        return False
    version = params.get("protocolVersion")
    if isinstance(version, bool) or not isinstance(version, int):
        return False
    if not 0 <= version <= _LARGEST_VERSION:
        return False
    capabilities = params.get("clientCapabilities")
    if capabilities is not None:
        if not isinstance(capabilities, dict) or set(capabilities) - {"fs", "terminal"}:
            return False
        fs = capabilities.get("fs")
        if fs is not None and (
            not isinstance(fs, dict)
            or set(fs) - {"readTextFile", "writeTextFile"}
            or not all(value is None or isinstance(value, bool) for value in fs.values())
        ):
            return False
        terminal = capabilities.get("terminal")
        if terminal is not None and not isinstance(terminal, bool):
            return False
    info = params.get("clientInfo")
    if info is None:
        return True
    return (
        isinstance(info, dict)
        and not set(info) - {"name", "title", "version"}
        and _text(info.get("name"))
        and _text(info.get("version"))
        and (info.get("title") is None or _text(info.get("title")))
    )


def initialize_answer(line: bytes) -> str | None:
    """The response frame to ``line`` if it is a plain ``initialize`` request,
    else ``None`` (the face answers it)."""
    return initialize_response(line, _plain_params, initialize_result, strict_numbers=True)
