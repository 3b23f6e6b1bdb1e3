"""TypeScript types for the whole protocol (``appserver schema --ts FILE``).

One module: every wire type under ``$defs`` as an interface (field docs as
TSDoc), the ``Methods``/``Notifications``/``ServerRequests`` maps, the method
name lists, and ``GeneratedMethods``, an abstract class with one typed method
per client->server method (the Node client in clients/node extends it). The
Node client's ``src/generated.ts`` is this output, so a client in another
repository gets the same types with no script of ours: ``appserver schema --ts
protocol.ts``.

It reads the schema bundle (:func:`appserver.protocol.schema.build_schema`):
``$ref``, ``type``, ``properties``/``required``, ``additionalProperties``,
``items``, ``anyOf``/``oneOf``, ``enum`` and ``const``, which map directly onto
TypeScript types.
"""

import json
import re
import sys
from pathlib import Path
from typing import Any

TS_FILE = "protocol.ts"

# Members of the Node client's hand-written class; a wire method must not map onto them.
RESERVED = frozenset(
    {
        "request",
        "call",
        "notify",
        "on",
        "off",
        "once",
        "onAny",
        "onApproval",
        "onReconnect",
        "setRequestHandler",
        "events",
        "runTurn",
        "close",
        "closed",
        "connect",
        "spawn",
        "kind",
        "connected",
        "transport",
        "serverInfo",
        "serverCapabilities",
        "lastSeq",
        "subscribedThreads",
        "reconnects",
        "constructor",
    }
)

_IDENT = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def _literal(value: Any) -> str:
    """``JSON.stringify(value)``."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def def_name(ref: str) -> str:
    return re.sub(r"\W", "_", ref.rsplit("/", 1)[-1])


def method_name(wire: str) -> str:
    """``thread/mode/set`` -> ``threadModeSet``; ``skills/restoreOriginal`` likewise."""
    parts = [re.sub(r"\W+(.)?", lambda m: (m.group(1) or "").upper(), p) for p in wire.split("/")]
    return "".join(p if i == 0 else p[:1].upper() + p[1:] for i, p in enumerate(parts))


def _key(name: str) -> str:
    return name if _IDENT.match(name) else _literal(name)


def _union(parts: list[str]) -> str:
    seen: list[str] = []
    for part in parts:
        if part not in seen:
            seen.append(part)
    if "unknown" in seen:
        return "unknown"
    if "null" in seen and len(seen) > 1:  # null last, as people write it
        seen.remove("null")
        seen.append("null")
    return " | ".join(seen)


def _is_composite(rendered: str) -> bool:
    """A top-level union or intersection needs parentheses before ``[]``."""
    depth = 0
    i = 0
    while i < len(rendered):
        c = rendered[i]
        if c in "{(<[":
            depth += 1
        elif c in "})>]":
            depth -= 1
        elif depth == 0 and c in "|&":
            return True
        elif c == '"':
            i += 1
            while i < len(rendered) and rendered[i] != '"':
                i += 2 if rendered[i] == "\\" else 1
        i += 1
    return False


def _comment(text: str, indent: str) -> list[str]:
    clean = re.sub(r"``([^`]+)``", r"`\1`", str(text).strip()).replace("*/", "*\\/")
    if not clean:
        return []
    lines = clean.split("\n")
    if len(lines) == 1:
        return [f"{indent}/** {lines[0]} */"]
    body = [f"{indent} * {line}" if line else f"{indent} *" for line in lines]
    return [f"{indent}/**", *body, f"{indent} */"]


def _render(schema: Any, indent: str = "") -> str:
    """A TypeScript type for a JSON Schema fragment (inline objects rendered at ``indent``)."""
    if not isinstance(schema, dict) or not schema:
        return "unknown"
    if "$ref" in schema:
        return def_name(schema["$ref"])
    if "const" in schema:
        return _literal(schema["const"])
    if isinstance(schema.get("enum"), list):
        return _union([_literal(v) for v in schema["enum"]])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return _union([_render(option, indent) for option in schema[key]])
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        return _render(all_of[0], indent)
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union([_render({**schema, "type": k}, indent) for k in kind])
    if kind == "string":
        return "string"
    if kind in ("integer", "number"):
        return "number"
    if kind in ("boolean", "null"):
        return str(kind)
    if kind == "array":
        item = _render(schema.get("items"), indent)
        return f"({item})[]" if _is_composite(item) else f"{item}[]"
    if kind == "object":
        return _object_type(schema, indent)
    return "unknown"


def _object_type(schema: dict[str, Any], indent: str) -> str:
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    if not props:
        value = _render(extra, indent) if isinstance(extra, dict) else "unknown"
        return f"{{ [key: string]: {value} }}"
    return "\n".join(["{", *_members(schema, indent + "  "), f"{indent}}}"])


def _members(schema: dict[str, Any], indent: str) -> list[str]:
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    lines: list[str] = []
    for name, prop in props.items():
        notes: list[str] = []
        if isinstance(prop, dict):
            if prop.get("description"):
                notes.append(str(prop["description"]))
            if prop.get("default") is not None:
                notes.append(f"Default: `{_literal(prop['default'])}`.")
        lines += _comment("\n\n".join(notes), indent)
        optional = "" if name in required else "?"
        lines.append(f"{indent}{_key(name)}{optional}: {_render(prop, indent)};")
    extra = schema.get("additionalProperties")
    if extra is True:
        lines.append(f"{indent}[key: string]: unknown;")
    elif isinstance(extra, dict) and extra:
        lines.append(f"{indent}[key: string]: unknown; // {_render(extra)}")
    return lines


def _definition(name: str, schema: dict[str, Any]) -> list[str]:
    description = schema.get("description")
    doc = [
        description if description is not None else f"`{schema.get('title', name)}` on the wire."
    ]
    if schema.get("additionalProperties") is True:
        doc.append("Open object: the server keeps (and may send) keys not listed here.")
    lines = _comment("\n\n".join(doc), "")
    if schema.get("type") == "object" and isinstance(schema.get("properties"), dict):
        body = _members(schema, "  ")
        if not body:
            lines.append("// eslint-disable-next-line @typescript-eslint/no-empty-object-type")
            lines.append(f"export interface {name} {{}}")
        else:
            lines += [f"export interface {name} {{", *body, "}"]
    else:
        lines.append(f"export type {name} = {_render(schema)};")
    return lines


def _method_doc(wire: str, spec: dict[str, Any], params_name: str) -> str:
    facts = [f"Wire method `{wire}`"]
    if spec.get("capability"):
        facts.append(f"capability `{spec['capability']}`")
    if spec.get("errors"):
        facts.append("errors " + ", ".join(str(code) for code in spec["errors"]))
    summary = str(spec.get("summary") or "").strip() or f"`{wire}`."
    return f"{summary}\n\n{'; '.join(facts)}.\nParams: {{@link {params_name}}}."


HEADER = [
    "// Generated by `appserver schema --ts` (appserver/protocol/typescript.py) from the",
    "// server's method table. Do not edit: change the table and run `make schema` (or",
    "// `npm run generate` in clients/node).",
]


def generate(schema: dict[str, Any], header: list[str] | None = None) -> str:
    """The TypeScript module for a schema bundle (``build_schema()``)."""
    defs: dict[str, Any] = schema.get("$defs", {})
    methods: dict[str, Any] = schema.get("x-methods", {})
    notifications: dict[str, Any] = schema.get("x-notifications", {})
    requests: dict[str, Any] = schema.get("x-serverRequests", {})
    title = schema.get("title", "protocol")
    out = [
        *(HEADER if header is None else header),
        "/* eslint-disable */",
        "",
        *_comment(
            "Typed wire shapes, method maps and one typed method per JSON-RPC method.\n\n"
            f"{title}: {schema.get('description', '')}",
            "",
        ),
        "",
        f"export const PROTOCOL_ID = {_literal(schema.get('$id', ''))};",
        "",
        "// ---------------------------------------------------------------- wire types ($defs)",
        "",
    ]
    for name in sorted(defs):
        out += [*_definition(def_name(name), defs[name]), ""]
    out += [
        "// ---------------------------------------------------------------- method maps",
        "",
        "/** Thread-scoped notifications also carry `seq`, the thread's event counter. */",
        "export type WithSeq<T> = T & { seq?: number };",
        "",
        "/** Every client->server method: its params and result types. */",
        "export interface Methods {",
    ]
    for wire in sorted(methods):
        spec = methods[wire]
        params, result = def_name(spec["params"]["$ref"]), def_name(spec["result"]["$ref"])
        out += _comment(_method_doc(wire, spec, params), "  ")
        out.append(f"  {_literal(wire)}: {{ params: {params}; result: {result} }};")
    out += [
        "}",
        "",
        "/** Every server->client notification: its params type (with `seq`). */",
        "export interface Notifications {",
    ]
    for wire in sorted(notifications):
        spec = notifications[wire]
        delivery = f"Delivery: {spec['delivery']}." if spec.get("delivery") else ""
        notes = "\n\n".join(part for part in (spec.get("summary"), delivery) if part)
        out += _comment(notes, "  ")
        out.append(f"  {_literal(wire)}: WithSeq<{def_name(spec['params']['$ref'])}>;")
    out += [
        "}",
        "",
        "/** Every server->client request: its params and result types. */",
        "export interface ServerRequests {",
    ]
    for wire in sorted(requests):
        spec = requests[wire]
        params, result = def_name(spec["params"]["$ref"]), def_name(spec["result"]["$ref"])
        out += _comment(spec.get("summary") or "", "  ")
        out.append(f"  {_literal(wire)}: {{ params: {params}; result: {result} }};")
    out += [
        "}",
        "",
        "export type Method = keyof Methods;",
        'export type ParamsOf<M extends Method> = Methods[M]["params"];',
        'export type ResultOf<M extends Method> = Methods[M]["result"];',
        "export type NotificationMethod = keyof Notifications;",
        "export type ServerRequestMethod = keyof ServerRequests;",
        "",
        "/** Every client->server method name. */",
        "export const METHODS: readonly Method[] = [",
        *(f"  {_literal(m)}," for m in sorted(methods)),
        "];",
        "",
        "/** Every server->client notification name. */",
        "export const NOTIFICATION_METHODS: readonly NotificationMethod[] = [",
        *(f"  {_literal(m)}," for m in sorted(notifications)),
        "];",
        "",
        "/** Every server->client request name. */",
        "export const SERVER_REQUEST_METHODS: readonly ServerRequestMethod[] = [",
        *(f"  {_literal(m)}," for m in sorted(requests)),
        "];",
        "",
        "/** Per method: the server capability that advertises it (`null`: always there) and"
        " its documented error codes. */",
        "export const METHOD_INFO: { readonly [M in Method]: { readonly capability: string | null;"
        " readonly errors: readonly number[] } } = {",
    ]
    for wire in sorted(methods):
        spec = methods[wire]
        errors = ", ".join(str(code) for code in spec.get("errors") or [])
        capability = _literal(spec.get("capability"))
        out.append(f"  {_literal(wire)}: {{ capability: {capability}, errors: [{errors}] }},")
    out += [
        "};",
        "",
        "// ---------------------------------------------------------------- typed methods",
        "",
        "/** Per-request options. */",
        "export interface RequestOptions {",
        "  /** Milliseconds to wait for the answer (default: the client's `requestTimeoutMs`;"
        " `0` or `Infinity`: no limit). */",
        "  timeoutMs?: number;",
        "  /** Abort waiting for the answer (the request itself is not withdrawn). */",
        "  signal?: AbortSignal;",
        "}",
        "",
        "/**",
        " * One typed method per client->server method of the protocol: `thread/start` is",
        " * `threadStart(params)`, `thread/mode/set` is `threadModeSet(params)`. Each resolves",
        " * to the result object or rejects with `RpcError`.",
        " */",
        "export abstract class GeneratedMethods {",
        "  /** Send one request and resolve with its result (implemented by the client). */",
        "  abstract request<M extends Method>(method: M, params: ParamsOf<M>, options?:"
        " RequestOptions): Promise<ResultOf<M>>;",
    ]
    used: dict[str, str] = {}
    for wire in sorted(methods):
        spec = methods[wire]
        name = method_name(wire)
        if name in RESERVED:
            raise ValueError(f"{wire} maps to reserved client name {name}")
        if name in used:
            raise ValueError(f"{wire} and {used[name]} both map to {name}")
        used[name] = wire
        params_name = def_name(spec["params"]["$ref"])
        params = defs.get(spec["params"]["$ref"].rsplit("/", 1)[-1], {})
        arg = f"params: {params_name}" + (" = {}" if not params.get("required") else "")
        out += ["", *_comment(_method_doc(wire, spec, params_name), "  ")]
        out += [
            f"  {name}({arg}, options?: RequestOptions):"
            f" Promise<{def_name(spec['result']['$ref'])}> {{",
            f"    return this.request({_literal(wire)}, params, options);",
            "  }",
        ]
    out += ["}", ""]
    return "\n".join(out)


def render_typescript() -> str:
    """The TypeScript module for this server's protocol."""
    from appserver.protocol.schema import build_schema

    return generate(build_schema())


def ts_path(target: Path) -> Path:
    """``target`` itself, or ``target/protocol.ts`` when it is a directory."""
    return target / TS_FILE if target.is_dir() or not target.suffix else target


def write_typescript(target: Path) -> Path:
    path = ts_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_typescript(), "utf-8")
    return path


def typescript_is_current(target: Path) -> bool:
    path = ts_path(target)
    return path.is_file() and path.read_text("utf-8") == render_typescript()


def main(argv: list[str] | None = None) -> int:
    """``python -m appserver.protocol.typescript FILE [--check]`` (what ``schema --ts`` runs)."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    paths = [arg for arg in args if arg != "--check"]
    if len(paths) != 1:
        sys.stderr.write("usage: python -m appserver.protocol.typescript FILE [--check]\n")
        return 2
    target = Path(paths[0])
    if check:
        if typescript_is_current(target):
            return 0
        sys.stderr.write(f"appserver: {ts_path(target)} is stale; run `make schema`\n")
        return 1
    sys.stderr.write(f"{write_typescript(target)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
