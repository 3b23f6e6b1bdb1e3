"""``codeswarm.router.v1`` frames: checking commands, encoding events.

Pure functions (no I/O, no runtime), so every rule of the envelope and of
each payload is stated once, here. A frame that breaks a rule raises
:class:`Rejected` with the one-line reason the router sends back in
``command_rejected`` (and the ``request_id`` when it could be read).
The JSON Schema in ``schema/faces/codeswarm.router.v1.schema.json``
describes the same rules.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from appserver.protocol.decoding import JsonRejected, loads_client
from appserver.protocol.encoding import dumps_lenient
from appserver.protocol.ids import now_iso

PROTOCOL = "codeswarm.router.v1"
FACE = "codeswarm"  # the face name: thread channel, FaceRepository namespace

MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_NODES = 64  # nodes per swarm_launch
MAX_NODE_ID = 2**31 - 1
MAX_ID_CHARS = 256  # job_id, swarm_id

COMMANDS = (
    "approvals_list",
    "inject",
    "project_list",
    "providers_list",
    "queue_list",
    "swarm_launch",
    "swarm_list",
    "swarm_status",
    "swarm_terminate",
)

EVENTS = (
    "command_rejected",
    "inject_ack",
    "inject_delivered",
    "inject_failed",
    "turn_started",
    "assistant_delta",
    "assistant",
    "reasoning_delta",
    "reasoning",
    "tool_call",
    "tool_result",
    "usage",
    "agent_error",
    "turn_complete",
    "providers_list",
    "swarm_launched",
    "swarm_list",
    "swarm_status",
    "swarm_terminated",
    "swarm_removed",
    "approvals_list",
    "queue_list",
    "project_list",
)

# RFC 3339 date-time in UTC: "Z" (any case) or "+00:00"; 1 to 9 fraction digits.
_UTC_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|\+00:00)", re.ASCII
)


class Rejected(Exception):
    """A command the router refuses: ``reason`` goes back in ``command_rejected``."""

    def __init__(self, reason: str, request_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request_id = request_id


@dataclass(frozen=True)
class Command:
    """A command whose envelope passed every check."""

    command: str
    request_id: str
    payload: dict[str, Any]


def is_utc_timestamp(value: object) -> bool:
    """``value`` is an ISO-8601 / RFC 3339 date-time in UTC (``Z`` or ``+00:00``)."""
    if not isinstance(value, str) or not _UTC_TIMESTAMP.fullmatch(value):
        return False
    text = value.upper()
    if "." in text:  # datetime keeps 6 fraction digits: cut the rest before parsing
        head, _, tail = text.partition(".")
        digits = tail.rstrip("Z").split("+")[0]
        text = f"{head}.{digits[:6].ljust(6, '0')}{tail[len(digits) :]}"
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False  # e.g. February 30th, hour 24, a leap second
    return True


def parse_command(line: str, *, require_timestamp: bool = True) -> Command:
    """Check one line's envelope; :class:`Rejected` says what is wrong.

    ``payload`` defaults to ``{}`` when absent (as the Codeswarm router
    does); ``require_timestamp=False`` accepts a command without
    ``timestamp`` (the Codeswarm CLI sends none), though one that is present
    must still be UTC.
    """
    try:
        message = loads_client(line, strict_numbers=True)
    except JsonRejected as exc:
        raise Rejected(f"invalid JSON: {exc}") from None
    if not isinstance(message, dict):
        raise Rejected("a command must be a JSON object")
    if "\\u" in line and _has_lone_surrogate(message):
        raise Rejected("invalid JSON: a string holds a lone UTF-16 surrogate")
    raw_id = message.get("request_id")
    request_id = raw_id if isinstance(raw_id, str) else None
    protocol = message.get("protocol")
    if protocol != PROTOCOL:
        if protocol is None:
            raise Rejected(f'missing "protocol" (expected "{PROTOCOL}")', request_id)
        raise Rejected(f"unsupported protocol: {_show(protocol)}", request_id)
    if message.get("type") != "command":
        raise Rejected(f'"type" must be "command", got {_show(message.get("type"))}', request_id)
    if "timestamp" not in message:
        if require_timestamp:
            raise Rejected('missing "timestamp" (ISO-8601 UTC)', request_id)
    elif not is_utc_timestamp(message["timestamp"]):
        raise Rejected(
            '"timestamp" must be an ISO-8601 UTC date-time such as "2026-02-25T15:00:00Z", '
            f"got {_show(message['timestamp'])}",
            request_id,
        )
    command = message.get("command")
    if not isinstance(command, str) or not command:
        raise Rejected('"command" must be a non-empty string', request_id)
    if request_id is None:
        raise Rejected('"request_id" must be a string', None)
    if not request_id:
        raise Rejected('"request_id" must not be empty', request_id)
    payload = message.get("payload", {})
    if not isinstance(payload, dict):
        raise Rejected('"payload" must be an object', request_id)
    if command not in COMMANDS:
        raise Rejected(f"unknown command: {_show(command)}", request_id)
    return Command(command=command, request_id=request_id, payload=payload)


def _has_lone_surrogate(message: object) -> bool:
    try:
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _show(value: object, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- payloads ---------------------------------------------------------------------


@dataclass(frozen=True)
class NodeInject:
    """``inject {job_id, node_id, content}`` (the protocol specification's form)."""

    job_id: str
    node_id: int
    content: str


@dataclass(frozen=True)
class SwarmInject:
    """``inject {swarm_id, nodes, content}`` (what the Codeswarm CLI sends)."""

    swarm_id: str
    nodes: Literal["all"] | tuple[int, ...]
    content: str


@dataclass(frozen=True)
class Launch:
    """``swarm_launch``: ``nodes`` threads sharing instructions and a model."""

    nodes: int
    system_prompt: str
    model: str | None = None
    instructions: list[str] = field(default_factory=list)


def _identifier(payload: dict[str, Any], key: str, request_id: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str) or not value.strip():
        raise Rejected(f'payload "{key}" must be a non-empty string', request_id)
    if len(value) > MAX_ID_CHARS:
        raise Rejected(f'payload "{key}" is longer than {MAX_ID_CHARS} characters', request_id)
    return value


def is_node_id(value: object) -> bool:
    """A JSON integer (not a boolean) in ``0..MAX_NODE_ID``."""
    return type(value) is int and 0 <= value <= MAX_NODE_ID


def _content(payload: dict[str, Any], request_id: str) -> str:
    content = payload.get("content")
    if not isinstance(content, str):
        raise Rejected('payload "content" must be a string', request_id)
    return content


def parse_inject(command: Command) -> NodeInject | SwarmInject:
    """The inject's target and text. ``job_id`` selects the specification's
    form; without it, ``swarm_id`` selects the CLI's form."""
    payload, request_id = command.payload, command.request_id
    if "job_id" not in payload and "swarm_id" in payload:
        swarm_id = _identifier(payload, "swarm_id", request_id)
        raw = payload.get("nodes", "all")
        nodes: Literal["all"] | tuple[int, ...]
        if raw == "all":
            nodes = "all"
        elif is_node_id(raw):
            nodes = (raw,)
        elif isinstance(raw, list) and raw and all(is_node_id(node) for node in raw):
            nodes = tuple(dict.fromkeys(raw))  # each node once, in the order given
        else:
            raise Rejected(
                'payload "nodes" must be "all", a node index (integer >= 0) or a non-empty '
                "list of node indexes",
                request_id,
            )
        return SwarmInject(swarm_id=swarm_id, nodes=nodes, content=_content(payload, request_id))
    job_id = _identifier(payload, "job_id", request_id)
    node_id = payload.get("node_id")
    if not is_node_id(node_id):
        raise Rejected(
            f'payload "node_id" must be an integer between 0 and {MAX_NODE_ID}, '
            f"got {_show(node_id)}",
            request_id,
        )
    assert isinstance(node_id, int)
    return NodeInject(job_id=job_id, node_id=node_id, content=_content(payload, request_id))


def swarm_id_of(command: Command) -> str:
    """``payload.swarm_id`` of ``swarm_status`` / ``swarm_terminate``."""
    return _identifier(command.payload, "swarm_id", command.request_id)


LAUNCH_PARAMS = ("model",)  # provider_params this router understands


def parse_launch(command: Command, provider_ids: tuple[str, ...]) -> Launch:
    """Check ``swarm_launch``'s payload (see the face's documentation)."""
    payload, request_id = command.payload, command.request_id
    nodes = payload.get("nodes")
    if type(nodes) is not int or not 1 <= nodes <= MAX_NODES:
        raise Rejected(
            f'payload "nodes" must be an integer between 1 and {MAX_NODES}, got {_show(nodes)}',
            request_id,
        )
    system_prompt = payload.get("system_prompt", "")
    if not isinstance(system_prompt, str):
        raise Rejected('payload "system_prompt" must be a string', request_id)
    provider = payload.get("provider")
    if provider is not None and provider not in provider_ids:
        raise Rejected(f"unknown provider: {_show(provider)}", request_id)
    params = payload.get("provider_params", {})
    if not isinstance(params, dict):
        raise Rejected('payload "provider_params" must be an object', request_id)
    unknown = sorted(set(params) - set(LAUNCH_PARAMS))
    if unknown:
        raise Rejected(
            f"unsupported provider_params: {', '.join(unknown)} (supported: "
            f"{', '.join(LAUNCH_PARAMS)})",
            request_id,
        )
    model = params.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise Rejected('provider_params "model" must be a non-empty string', request_id)
    instructions = [system_prompt] if system_prompt.strip() else []
    agents_md = payload.get("agents_md_content")
    if agents_md is not None and not isinstance(agents_md, str):
        raise Rejected('payload "agents_md_content" must be a string', request_id)
    bundle = payload.get("agents_bundle")
    if bundle is not None:
        if not isinstance(bundle, dict):
            raise Rejected('payload "agents_bundle" must be an object', request_id)
        if bundle.get("skills_files"):
            raise Rejected("agents_bundle skills_files are not supported", request_id)
        bundle_md = bundle.get("agents_md_content")
        if bundle_md is not None and not isinstance(bundle_md, str):
            raise Rejected('agents_bundle "agents_md_content" must be a string', request_id)
        agents_md = bundle_md if bundle_md is not None else agents_md
    if agents_md and agents_md.strip():
        instructions.append(agents_md)
    return Launch(nodes=nodes, system_prompt=system_prompt, model=model, instructions=instructions)


# --- events -----------------------------------------------------------------------


def event_frame(event: str, data: dict[str, Any]) -> str:
    """One event as a single line of compact JSON (no newline) that encodes
    as UTF-8 (a lone surrogate in some text is escaped, not written raw; a
    float JSON has no form for is ``null``)."""
    message = {
        "protocol": PROTOCOL,
        "type": "event",
        "timestamp": now_iso(),
        "event": event,
        "data": data,
    }
    # The shared encoder: lone surrogates escaped, NaN and infinities written null.
    return dumps_lenient(message)
