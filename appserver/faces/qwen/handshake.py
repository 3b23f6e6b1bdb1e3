"""The Qwen face's ``initialize`` control request: what the face can do (the one
source: ``ControlRequests.capabilities`` answers with it), and the same answer
written before the face is built (appserver/transport/early.py).

Answered early only on a plain start: ``stream-json`` in and out, no first
prompt, no session to resume or continue (those need the database) and the
session id either given and valid or made here (the face then uses it, as if
``--session-id`` had named it).
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable
from typing import Any

from appserver.transport.early import compact, load_object, plain_id

# faces/qwen/session.py MAX_SESSION_ID (a test keeps them equal).
MAX_SESSION_ID = 256
# What the SDK's initialize may carry that the face warns about (it serves none of them).
UNSERVED = ("sdkMcpServers", "mcpServers", "agents")


def capabilities(interactive: bool) -> dict[str, Any]:
    """What this face can do (``initialize``'s answer, the first chunk's metadata);
    ``interactive``: the client answers ``can_use_tool`` requests."""
    return {
        "can_handle_can_use_tool": interactive,
        "can_handle_hook_callback": False,
        "can_set_permission_mode": True,
        "can_set_model": True,
        "can_set_effort": False,
        "can_get_context_usage": False,
        "can_get_available_models": True,
        "can_get_usage_info": False,
        "can_handle_mcp_message": False,
    }


def initialize_answer(line: bytes, session_id: str) -> str | None:
    """The ``control_response`` to ``line`` if it is a plain ``initialize``
    control request, else ``None`` (the face answers it)."""
    frame = load_object(line)
    if frame is None or frame.get("type") != "control_request":
        return None
    request_id, request = frame.get("request_id"), frame.get("request")
    if not isinstance(request_id, str) or not request_id or not plain_id(request_id):
        return None
    if not isinstance(request, dict) or request.get("subtype") != "initialize":
        return None
    if any(request.get(key) for key in UNSERVED):
        return None  # the face warns about them
    response = {
        "subtype": "initialize",
        "session_id": session_id,
        "capabilities": capabilities(interactive=True),
    }
    body = {"subtype": "success", "request_id": request_id, "response": response}
    return compact({"type": "control_response", "response": body})


def early_answer(args: argparse.Namespace) -> Callable[[bytes], str | None] | None:
    """The early answer for this start, or ``None`` when it is no plain one
    (see the module docstring). Names the session (``args.session_id``)."""
    if (args.input_format, args.output_format) != ("stream-json", "stream-json"):
        return None
    if args.prompt or args.resume is not None or args.continue_session or args.fork_session:
        return None
    given = args.session_id
    if given and (len(given) > MAX_SESSION_ID or not given.isprintable() or not plain_id(given)):
        return None
    session_id = args.session_id = given or str(uuid.uuid4())
    return lambda line: initialize_answer(line, session_id)
