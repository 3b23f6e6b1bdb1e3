"""The router's answer to a first ``providers_list``: what it says (the one
source: the router's ``providers_list`` handler answers with it), and the same
answer written before the face is built (appserver/transport/early.py).

The Codeswarm CLI asks ``providers_list`` first. The answer names the provider
and the model, which the provider settings decide, and they depend on the
workspace's trust (settled later, from the database): it is answered early
only on stdio, when both trust values give the same provider and a model known
without building the provider (``appserver.providers.settled_model``).
``providers_list`` changes nothing, so the router, once built, skips the line
it answered instead of answering it twice.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from appserver.faces.common import settled_choice

PROVIDER_ID = "appserver"  # the one provider the router offers (and its backend)


def provider_entry(provider: str, model: str) -> dict[str, Any]:
    """``providers_list``'s one entry: this server, its provider and model."""
    return {
        "id": PROVIDER_ID,
        "label": f"appserver ({provider})",
        "backend": PROVIDER_ID,
        "provider_ref": PROVIDER_ID,
        "model_provider": provider,
        "defaults": {"model": model},
        "launch_fields": [
            {
                "key": "model",
                "label": "Model",
                "type": "text",
                "default": model,
                "required": False,
            }
        ],
        "disabled": False,
    }


def providers_answer(
    line: bytes, provider: str, model: str, *, require_timestamp: bool
) -> str | None:
    """The ``providers_list`` event answering ``line`` if it is a
    ``providers_list`` command the router accepts, else ``None``."""
    # Imported here: the command line imports this module (`router --help` needs none of it).
    from appserver.faces.codeswarm.wire import Rejected, event_frame, parse_command

    try:
        command = parse_command(line.decode("utf-8"), require_timestamp=require_timestamp)
    except (UnicodeDecodeError, Rejected):
        return None
    if command.command != "providers_list":
        return None
    providers = [provider_entry(provider, model)]
    return event_frame("providers_list", {"request_id": command.request_id, "providers": providers})


def early_answer(
    args: argparse.Namespace, provider_options: dict[str, Any]
) -> Callable[[bytes], str | None] | None:
    """The early answer to a first ``providers_list`` on stdio, when it can be known now."""
    if args.listen is not None:
        return None  # over TCP clients connect once the router listens
    chosen = settled_choice(args.workspace, provider_options)
    if chosen is None:
        return None
    provider, model = chosen
    require = not args.allow_missing_timestamp
    return lambda line: providers_answer(line, provider, model, require_timestamp=require)
