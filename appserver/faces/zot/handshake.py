"""zot's ``hello`` (the RPC token's handshake): what it answers (the one source:
the face's ``hello`` handler answers with it), and the same answer written
before the face is built (appserver/transport/early.py).

``hello`` names the provider and the model the session uses, which the provider
settings decide, and they depend on the workspace's trust (settled later, from
the database): it is answered early only when both trust values give the same
provider and a model known without building the provider (one configured, or
the offline model's), and when the token is right (or none is asked for).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from appserver import __version__
from appserver.faces.common import settled_choice
from appserver.transport.early import compact, load_object, plain_id

PROTOCOL_VERSION = 1
# faces/zot/command.py TOKEN_VARIABLES: where the RPC token comes from, first set wins.
TOKEN_VARIABLES = ("ZOTCORE_RPC_TOKEN", "TERVACORE_RPC_TOKEN")


def hello_data(provider: str, model: str) -> dict[str, Any]:
    """``hello``'s answer: the protocol, our version, the provider and model."""
    return {
        "protocol_version": PROTOCOL_VERSION,
        "version": __version__,
        "provider": provider,
        "model": model,
    }


def hello_answer(line: bytes, token: str | None, provider: str, model: str) -> str | None:
    """The response to ``line`` if it is a ``hello`` the face accepts, else ``None``."""
    frame = load_object(line)
    if frame is None or frame.get("type") != "hello":
        return None
    request_id = frame.get("id")
    if request_id is not None and not plain_id(request_id):
        return None
    if not (request_id is None or isinstance(request_id, str)):
        return None
    if token is not None and frame.get("token") != token:
        return None  # the face refuses it
    answer: dict[str, Any] = {"type": "response"}
    if request_id:  # an empty id is not echoed, as zot omits it
        answer["id"] = request_id
    answer.update(command="hello", success=True, data=hello_data(provider, model))
    return compact(answer)


def early_answer(
    args: argparse.Namespace, provider_options: dict[str, Any]
) -> Callable[[bytes], str | None] | None:
    """The early answer to a first ``hello``, when it can be known now."""
    chosen = settled_choice(args.workspace, provider_options)
    if chosen is None:
        return None
    token = next((os.environ[name] for name in TOKEN_VARIABLES if os.environ.get(name)), None)
    provider, model = chosen
    return lambda line: hello_answer(line, token, provider, model)
