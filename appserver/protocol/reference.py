"""``docs/protocol.md``: the protocol reference, rendered from the method table.

Every method gets its capability, errors, params and result fields and an
example request built from its schema, so the reference cannot drift from
the code (``make test`` fails when the committed copy is stale).
"""

import json
import re
from pathlib import Path
from typing import Any

from appserver.protocol import cron as cron_wire
from appserver.protocol import errors as rpc_errors
from appserver.protocol import limits as wire_limits
from appserver.protocol.limits import INT64_MAX, INT64_MIN
from appserver.protocol.schema import build_schema

_ERROR_NAMES = {
    value: name
    for name, value in vars(rpc_errors).items()
    if name.isupper() and isinstance(value, int)
}

_SAMPLE_STRINGS = {
    "threadId": "thread_20261121_x7k2m4",
    "turnId": "turn_001",
    "expectedTurnId": "turn_001",
    "itemId": "item_002",
    "queuedInputId": "queued_1763766000000_a1b2c3",
    "channelName": "cli",
    "userId": "local",
    "displayName": "Refactor the parser",
    "mode": "agent",
    "name": "example",
    "text": "Summarise README.md",
    "jobId": "1a2b3c4d",
    "command": "/help",
    "url": "https://example.com/image.png",
    "path": "src/main.py",
}


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _type_name(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"].rsplit("/", 1)[-1])
    if "anyOf" in schema:
        names = [_type_name(s, defs) for s in schema["anyOf"] if s.get("type") != "null"]
        return " | ".join(names) or "null"
    if "oneOf" in schema:
        return " | ".join(_type_name(s, defs) for s in schema["oneOf"])
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    kind = schema.get("type", "any")
    if kind == "array":
        item = _type_name(schema.get("items", {}), defs)
        return f"({item})[]" if " | " in item else f"{item}[]"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        inner = _type_name(extra, defs) if isinstance(extra, dict) else "any"
        return f"{{[key]: {inner}}}"
    return str(kind)


def _sample(schema: dict[str, Any], defs: dict[str, Any], name: str, depth: int = 0) -> Any:
    schema = _resolve(schema, defs)
    if schema.get("examples"):  # a model's own example (json_schema_extra) wins
        return schema["examples"][0]
    if "default" in schema and schema["default"] not in (None, [], {}):
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"]
            return _sample(options[0], defs, name, depth) if options else None
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        if depth > 3:
            return {}
        required = schema.get("required", [])
        props = schema.get("properties", {})
        return {key: _sample(props[key], defs, key, depth + 1) for key in required if key in props}
    if kind == "array":
        item = _sample(schema.get("items", {}), defs, name, depth + 1)
        return [item] if item not in (None, {}) else []
    if kind == "integer":
        return max(1, int(schema.get("minimum", 1)))
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if kind == "string":
        return _SAMPLE_STRINGS.get(name, name)
    return None


def _number(value: int | float) -> str:
    return {INT64_MIN: "-2^63", INT64_MAX: "2^63-1"}.get(int(value), str(value))


def _bounds(prop: dict[str, Any]) -> str:
    """A field's limits from its schema (``maxLength``, ``minimum``/``maximum``), if any."""
    for option in [prop, *prop.get("anyOf", [])]:
        if "maxLength" in option:
            return f"at most {option['maxLength']} characters"
        if "minimum" in option and "maximum" in option:
            return f"{_number(option['minimum'])} to {_number(option['maximum'])}"
        if "minimum" in option:
            return f"at least {_number(option['minimum'])}"
        if "maximum" in option:
            return f"at most {_number(option['maximum'])}"
    return ""


def _cell(text: str) -> str:
    """Text safe in a GitHub table cell: ``|`` (even inside a code span) would end the cell."""
    return text.replace("\\|", "|").replace("|", "\\|").replace("\n", " ")


def _anchor(name: str) -> str:
    """GitHub's anchor of a ``### `Name` `` heading."""
    return "".join(c for c in name.lower() if c.isalnum() or c in "-_")


def _type_cell(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """A field's type as a table cell; named types link to their entry under Types."""
    text = _type_name(schema, defs)
    parts = re.split(r"([A-Za-z_][A-Za-z0-9_]*)", text)
    if not any(part in defs for part in parts):
        return _cell(f"`{text}`")
    return _cell("".join(f"[`{p}`](#{_anchor(p)})" if p in defs else p for p in parts))


def _description(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    text = str(prop.get("description") or _resolve(prop, defs).get("description") or "")
    default = prop.get("default")
    if default not in (None, [], {}):
        text = f"{text} Default: `{json.dumps(default)}`.".strip()
    return _cell(text.replace("``", "`"))


def _fields(schema: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    schema = _resolve(schema, defs)
    props = schema.get("properties", {})
    if not props:
        return ["_(none)_"]
    required = set(schema.get("required", []))
    rows = ["| field | type | | description |", "|---|---|---|---|"]
    for key, prop in props.items():
        flag = "required" if key in required else "optional"
        bounds = _bounds(prop)
        if bounds:
            flag += f"; {bounds}"
        rows.append(
            f"| `{key}` | {_type_cell(prop, defs)} | {_cell(flag)} | {_description(prop, defs)} |"
        )
    return rows


def _types(defs: dict[str, Any]) -> list[str]:
    """The Types section: every named type the tables above use, with its fields."""
    out = [
        "## Types",
        "",
        "Every named type of the params, results and notifications above. A field marked",
        "optional may be absent; absent and `null` mean the same.",
        "",
    ]
    for name, definition in defs.items():
        out += [f"### `{name}`", ""]
        description = str(definition.get("description", "")).strip()
        if description:
            out += [description.replace("``", "`"), ""]
        if definition.get("additionalProperties") is True:
            out += ["Open object: the server keeps (and may send) keys not listed here.", ""]
        out += [*_fields(definition, defs), ""]
    return out


def _kib(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB" if size % (1024 * 1024) == 0 else f"{size // 1024} KiB"


def _limits() -> list[str]:
    """The limits section: what bounds apply to requests and answers."""
    return [
        f"A message is at most {_kib(wire_limits.MAX_FRAME_BYTES)} (stdio line, WebSocket "
        "frame). A value out of the bounds below is `-32602` naming the field.",
        "",
        "| what | bound |",
        "|---|---|",
        "| every integer in params | signed 64-bit (-2^63 to 2^63-1), tighter where the "
        "field says so |",
        f"| `cron/add` `schedule.everyMs`, `schedule.initialDelayMs` | at most 100 years "
        f"({cron_wire.MAX_DURATION_MS} ms) |",
        f"| `cron/add` `schedule.atMs` | at most {cron_wire.MAX_AT_MS} "
        "(9999-12-31T23:59:59.999Z) |",
        f"| stored names and ids (`identity.channelName`, `identity.userId`, `mode`, "
        f"skill and plugin ids, `clientInfo`, workspace `model`/`provider`, `schedule.tz`, "
        f"external channel `name`) | {wire_limits.MAX_NAME_CHARS} characters |",
        f"| labels (`displayName`, `identity.channelContext`, cron job `name`, "
        f"`schedule.expr`) | {wire_limits.MAX_LABEL_CHARS} characters |",
        f"| paths, URLs, keys (`identity.workspacePath`, `apiKey`, `endPoint`) | "
        f"{wire_limits.MAX_PATH_CHARS} characters |",
        f"| cron job `message` | {wire_limits.MAX_TEXT_CHARS} characters |",
        f"| thread `config` (`thread/start`, `thread/config/update`) | "
        f"{_kib(wire_limits.MAX_THREAD_CONFIG_BYTES)} as JSON |",
        f"| `mcp/upsert`/`mcp/test` `server`, `externalChannel/upsert` `channel` | "
        f"{_kib(wire_limits.MAX_SERVER_CONFIG_BYTES)} as JSON |",
        "| turn input (`turn/start`, `turn/enqueue`) | the message size only |",
        "",
        f"A `thread/list` page ends early, with `nextCursor`, before its result passes "
        f"{_kib(wire_limits.LIST_PAGE_BYTES)}, with or without `limit`: follow `nextCursor` "
        "until it is",
        "absent to get every thread. The JSON Schema carries the field bounds (`minimum`,",
        "`maximum`, `maxLength`); the tables below show those of top-level fields.",
    ]


def _error_list(codes: list[int]) -> str:
    if not codes:
        return "standard JSON-RPC errors only"
    return ", ".join(f"`{code}` {_ERROR_NAMES.get(code, '')}".rstrip() for code in codes)


def render_reference() -> str:
    """The whole reference as Markdown."""
    schema = build_schema()
    defs = schema["$defs"]
    out = [
        "# Protocol reference",
        "",
        "<!-- Generated by `appserver schema --out schema` from appserver/protocol/methods.py."
        " Do not edit by hand. -->",
        "",
        "JSON-RPC 2.0, one message per line (stdio) or per text frame (WebSocket `/ws`).",
        "Field names are camelCase; fields whose value is null are omitted. Every thread-scoped",
        "notification also carries `seq`, the thread's event sequence number (see",
        "`thread/subscribe` `afterSeq`). The JSON Schema of everything below is",
        "[`schema/protocol.schema.json`](../schema/protocol.schema.json).",
        "",
        "## Limits",
        "",
        *_limits(),
        "",
        "## Methods (client to server)",
        "",
    ]
    for name, spec in schema["x-methods"].items():
        example = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": name,
            "params": _sample(spec["params"], defs, "params"),
        }
        out += [
            f"### `{name}`",
            "",
            spec["summary"],
            "",
            f"- capability: `{spec['capability'] or 'always'}`",
            f"- errors: {_error_list(spec['errors'])}",
            "",
            f"**Params** ({_type_cell(spec['params'], defs)})",
            "",
            *_fields(spec["params"], defs),
            "",
            f"**Result** ({_type_cell(spec['result'], defs)})",
            "",
            *_fields(spec["result"], defs),
            "",
            "Example request:",
            "",
            "```json",
            json.dumps(example),
            "```",
            "",
        ]
    out += ["## Notifications (server to client)", ""]
    for name, spec in schema["x-notifications"].items():
        out += [
            f"### `{name}`",
            "",
            spec["summary"],
            "",
            f"- delivered to: {spec['delivery']}",
            f"- params: {_type_cell(spec['params'], defs)}",
            "",
            *_fields(spec["params"], defs),
            "",
        ]
    out += ["## Requests (server to client)", ""]
    for name, spec in schema["x-serverRequests"].items():
        out += [
            f"### `{name}`",
            "",
            spec["summary"],
            "",
            f"**Params** ({_type_cell(spec['params'], defs)})",
            "",
            *_fields(spec["params"], defs),
            "",
            f"**Answer with** ({_type_cell(spec['result'], defs)})",
            "",
            *_fields(spec["result"], defs),
            "",
        ]
    out += ["## Item payloads", "", "`Item.payload` is open; these item types' are typed:", ""]
    for kind, ref in schema["x-itemPayloads"].items():
        out.append(f"- `{kind}`: {_type_cell(ref, defs)}")
    out += [""]
    out += _types(defs)
    out += [
        "## Error codes",
        "",
        "| code | name |",
        "|---|---|",
        *(f"| `{code}` | {name} |" for code, name in sorted(_ERROR_NAMES.items(), reverse=True)),
        "",
    ]
    return "\n".join(out)


REFERENCE_FILE = Path("docs") / "protocol.md"


def reference_is_current(path: Path) -> bool:
    return path.is_file() and path.read_text("utf-8") == render_reference()
