"""DotCraft's ``initialize`` answered before the server is built.

``appserver app-server`` over stdio writes this answer to its client's first
line with the standard library only (appserver/transport/early.py), then
imports the rest. The answer is the one the router gives
(``Router.initialize``: ``InitializeResult`` with the capabilities declared in
appserver/services/advertised.py): the server's name and version, and the
capability block, which depends on nothing the client sent. Only a request
whose params ``InitializeParams`` certainly accepts is answered here; anything
else (an unknown field, a value of another type, a batch) is left to the
router, which answers it as always. tests/test_startup.py compares both
answers byte for byte.
"""

from __future__ import annotations

from typing import Any

from appserver import __version__
from appserver.transport.early import initialize_response

# protocol/limits.py MAX_NAME_CHARS (the ClientInfo fields' bound; a test keeps them equal).
MAX_NAME_CHARS = 256
# ClientCapabilities' boolean fields by their wire names (a test keeps them equal).
CLIENT_FLAGS = frozenset(
    {
        "approvalSupport",
        "streamingSupport",
        "commandExecutionStreaming",
        "toolExecutionLifecycle",
        "backgroundTerminals",
        "configChange",
    }
)
# ServerInfo's protocol version and extensions (its defaults).
PROTOCOL_VERSION = "1"


def _name(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME_CHARS


def _plain_params(params: Any) -> bool:
    """Whether ``InitializeParams`` certainly accepts ``params`` (camelCase
    names only: the model also takes snake_case ones, left to it)."""
    if not isinstance(params, dict) or set(params) - {"clientInfo", "capabilities"}:
        return False
    info = params.get("clientInfo")
    if not isinstance(info, dict) or set(info) - {"name", "title", "version"}:
        return False
    if not (_name(info.get("name")) and _name(info.get("version"))):
        return False
    if "title" in info and info["title"] is not None and not _name(info["title"]):
        return False
    capabilities = params.get("capabilities", {})
    if not isinstance(capabilities, dict):
        return False
    for key, value in capabilities.items():
        if key in CLIENT_FLAGS:
            if not isinstance(value, bool):
                return False
        elif key == "optOutNotificationMethods":
            if not (isinstance(value, list) and all(isinstance(m, str) for m in value)):
                return False
        else:
            return False  # kept or validated by the model: left to it
    return True


def initialize_answer(line: bytes, capabilities: dict[str, Any], server_name: str) -> str | None:
    """The response frame to ``line`` if it is a plain ``initialize`` request,
    else ``None``; ``capabilities``: what ``advertised_capabilities`` gives."""
    result = {
        "serverInfo": {
            "name": server_name,
            "version": __version__,
            "protocolVersion": PROTOCOL_VERSION,
            "extensions": [],
        },
        "capabilities": capabilities,
    }
    return initialize_response(line, _plain_params, lambda: result)
