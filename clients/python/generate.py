"""Generate ``appserver_client/_generated.py`` from the protocol's JSON Schema.

The schema (``schema/protocol.schema.json``) is itself generated from the
server's one method table, so the client's types and methods can never drift
from the server: ``make test`` runs this script with ``--check``.

Usage::

    python clients/python/generate.py            # rewrite _generated.py
    python clients/python/generate.py --check    # exit 1 if it is stale

The output is formatted with ``ruff format`` (a dev dependency), so it is
byte-for-byte what the repository's linters expect.

It reads the committed schema rather than importing ``appserver``: the client
package must stay installable without the server.
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_SCHEMA = HERE.parent.parent / "schema" / "protocol.schema.json"
DEFAULT_OUT = HERE / "src" / "appserver_client" / "_generated.py"
TYPES_MODULE = "types.py"  # written beside --out: the public re-export of the wire types

# Names the hand-written client uses; a wire method must not map onto them.
RESERVED = frozenset(
    {
        "request",
        "notify",
        "notifications",
        "run_turn",
        "close",
        "connect",
        "spawn",
        "on_reconnect",
        "set_request_handler",
        "approval_handler",
        "last_seq",
        "kind",
        "connected",
        "transport",
        "subscribed_threads",
        "server_info",
        "server_capabilities",
        "capabilities",
        "reconnect",
        "reconnects",
    }
)
TYPING_NAMES = frozenset({"Any", "Final", "Literal", "Mapping", "NotRequired", "TypeAlias"})
TYPING_NAMES |= {"TypedDict", "cast"}

_PRIMITIVES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}


def snake(name: str) -> str:
    """``threadId`` -> ``thread_id``; ``restoreOriginal`` -> ``restore_original``."""
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"\W", "_", name).lower()


def method_attr(method: str) -> str:
    """``thread/mode/set`` -> ``thread_mode_set``."""
    return "_".join(snake(part) for part in method.split("/"))


def def_name(ref: str) -> str:
    name = re.sub(r"\W", "_", ref.rsplit("/", 1)[-1])
    if name in TYPING_NAMES or keyword.iskeyword(name):
        name += "_"
    return name


def kwarg_name(wire: str) -> str:
    name = snake(wire)
    if keyword.iskeyword(name) or name in {"self", "timeout"}:
        name += "_"
    return name


def literal(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def union(parts: list[str]) -> str:
    seen: list[str] = []
    for part in parts:
        for piece in split_union(part):
            if piece not in seen:
                seen.append(piece)
    if "Any" in seen:
        return "Any"
    # Literals merge into one Literal[...] for readability.
    literals = [p for p in seen if p.startswith("Literal[")]
    if len(literals) > 1:
        merged = "Literal[" + ", ".join(p[len("Literal[") : -1] for p in literals) + "]"
        first = seen.index(literals[0])
        seen = [p for p in seen if p not in literals]
        seen.insert(first, merged)
    if "None" in seen:  # None last, as people write it
        seen.remove("None")
        seen.append("None")
    return " | ".join(seen)


def split_union(text: str) -> list[str]:
    """Top-level ``|`` split (brackets respected)."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "|" and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return parts


def render(schema: Any) -> str:
    """A Python type for a JSON Schema fragment."""
    if not isinstance(schema, dict) or not schema:
        return "Any"
    if "$ref" in schema:
        return def_name(schema["$ref"])
    if "const" in schema:
        return f"Literal[{literal(schema['const'])}]"
    if "enum" in schema:
        return "Literal[" + ", ".join(literal(v) for v in schema["enum"]) + "]"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return union([render(option) for option in schema[key]])
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return render(schema["allOf"][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        return union([render({**schema, "type": k}) for k in kind])
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind == "array":
        return f"list[{render(schema.get('items', {}))}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        value = render(extra) if isinstance(extra, dict) else "Any"
        return f"dict[str, {value}]"
    return "Any"


def wrap(text: str, width: int) -> list[str]:
    """Lines of ``text`` no longer than ``width``, paragraphs (blank lines) kept."""
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        if lines:
            lines.append("")
        for line in paragraph.splitlines():
            lines.extend(textwrap.wrap(line, width, break_on_hyphens=False) or [""])
    return lines


def docstring(text: str, indent: str) -> list[str]:
    text = text.strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    lines = wrap(text, 96 - len(indent)) or [""]
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    out = [f'{indent}"""{lines[0]}']
    out.extend(f"{indent}{line}" if line else "" for line in lines[1:])
    out.append(f'{indent}"""')
    return out


def field_type(prop: dict[str, Any], required: bool) -> str:
    rendered = render(prop)
    return rendered if required else f"NotRequired[{rendered}]"


def typed_dict(name: str, schema: dict[str, Any]) -> list[str]:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    doc = schema.get("description") or f"``{schema.get('title', name)}`` on the wire."
    if schema.get("additionalProperties") is True:
        doc += "\n\nOpen object: the server keeps (and may send) keys not listed here."
    plain = all(key.isidentifier() and not keyword.iskeyword(key) for key in props)
    if not plain:
        fields = ", ".join(
            f"{json.dumps(k)}: {field_type(v, k in required)}" for k, v in props.items()
        )
        return [f'{name} = TypedDict("{name}", {{{fields}}})', *docstring(doc, "")]
    lines = [f"class {name}(TypedDict):", *docstring(doc, "    ")]
    if props:
        lines.append("")
    for key, prop in props.items():
        comment = ""
        if "default" in prop and prop["default"] is not None:
            comment = f"  # default: {json.dumps(prop['default'])}"
        lines.append(f"    {key}: {field_type(prop, key in required)}{comment}")
    return lines


def method_code(wire: str, spec: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    attr = method_attr(wire)
    if attr in RESERVED:
        raise SystemExit(f"generate.py: {wire} maps to reserved client name {attr!r}")
    params_ref = spec["params"]["$ref"]
    params = defs[params_ref.rsplit("/", 1)[-1]]
    result = def_name(spec["result"]["$ref"])
    props: dict[str, Any] = params.get("properties", {})
    required = [key for key in props if key in set(params.get("required", []))]
    optional = [key for key in props if key not in required]
    args = ["self", "*", *(f"{kwarg_name(key)}: {render(props[key])}" for key in required)]
    for key in optional:
        rendered = render(props[key])
        if "None" not in split_union(rendered) and rendered != "Any":
            rendered = f"{rendered} | None"
        args.append(f"{kwarg_name(key)}: {rendered} = None")
    args.append("timeout: float | None = None")
    doc = spec.get("summary", "").strip() or f"``{wire}``."
    facts = [f"Wire method ``{wire}``"]
    if spec.get("capability"):
        facts.append(f"capability ``{spec['capability']}``")
    if spec.get("errors"):
        facts.append("errors " + ", ".join(str(code) for code in spec["errors"]))
    doc += "\n\n" + "; ".join(facts) + "."
    doc += f"\nParams: :class:`{def_name(params_ref)}` (keyword arguments, snake_case)."
    doc += "\n``timeout`` overrides the client's default for this call."
    req = "{" + ", ".join(f"{json.dumps(k)}: {kwarg_name(k)}" for k in required) + "}"
    opt = "{" + ", ".join(f"{json.dumps(k)}: {kwarg_name(k)}" for k in optional) + "}"
    return [
        f"    async def {attr}({', '.join(args)}) -> {result}:",
        *docstring(doc, "        "),
        f"        params = _params({req}, {opt})",
        f"        reply = await self.request({json.dumps(wire)}, params, timeout=timeout)",
        f"        return cast({result}, reply)",
    ]


def generate(schema: dict[str, Any], source: str) -> str:
    defs: dict[str, Any] = schema["$defs"]
    methods: dict[str, Any] = schema["x-methods"]
    notifications: dict[str, Any] = schema["x-notifications"]
    requests: dict[str, Any] = schema["x-serverRequests"]
    out: list[str] = [
        f"# Generated by clients/python/generate.py from {source}. Do not edit:",
        "# change the server's method table and run `make schema` (it regenerates this too).",
        '"""Typed wire shapes and one method per JSON-RPC method, from the protocol schema.',
        "",
        *wrap(f"{schema.get('title', 'protocol')}: {schema.get('description', '')}", 96),
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Mapping",
        "from typing import Any, Final, Literal, NotRequired, TypeAlias, TypedDict, cast",
        "",
        "__all__ = [",
    ]
    names = sorted(def_name(name) for name in defs)
    exported = [
        *names,
        "GeneratedMethods",
        "METHODS",
        "NOTIFICATIONS",
        "SERVER_REQUESTS",
        "NotificationMethod",
        "ServerRequestMethod",
    ]
    out.extend(f"    {json.dumps(name)}," for name in sorted(exported))
    out += ["]", "", ""]
    aliases: list[list[str]] = []
    for raw_name in sorted(defs):
        name = def_name(raw_name)
        definition = defs[raw_name]
        if definition.get("type") == "object" and "properties" in definition:
            out += [*typed_dict(name, definition), "", ""]
        else:
            aliases.append([f"{name}: TypeAlias = {render(definition)}"])
    for alias in aliases:
        out += [*alias, "", ""]
    out += [
        "METHODS: Final[dict[str, str]] = {",
        *(f"    {json.dumps(m)}: {json.dumps(method_attr(m))}," for m in sorted(methods)),
        "}",
        '"""Every client->server method and the name of its method on the client."""',
        "",
        "NOTIFICATIONS: Final[dict[str, str]] = {",
        *(
            f"    {json.dumps(n)}: {json.dumps(def_name(s['params']['$ref']))},"
            for n, s in sorted(notifications.items())
        ),
        "}",
        '"""Every server->client notification and the TypedDict of its params."""',
        "",
        "SERVER_REQUESTS: Final[dict[str, tuple[str, str]]] = {",
        *(
            f"    {json.dumps(n)}: ({json.dumps(def_name(s['params']['$ref']))}, "
            f"{json.dumps(def_name(s['result']['$ref']))}),"
            for n, s in sorted(requests.items())
        ),
        "}",
        '"""Every server->client request: (params TypedDict, result TypedDict)."""',
        "",
        "NotificationMethod: TypeAlias = Literal["
        + ", ".join(json.dumps(n) for n in sorted(notifications))
        + "]",
        "ServerRequestMethod: TypeAlias = Literal["
        + ", ".join(json.dumps(n) for n in sorted(requests))
        + "]",
        "",
        "",
        "def _params(required: dict[str, Any], optional: dict[str, Any]) -> dict[str, Any]:",
        '    """Wire params: every required key, and the optional ones that were given."""',
        "    params = dict(required)",
        "    params.update((key, value) for key, value in optional.items() if value is not None)",
        "    return params",
        "",
        "",
        "class GeneratedMethods:",
        '    """One typed ``async`` method per client->server method of the protocol.',
        "",
        "    Keyword arguments are the params' wire keys in snake_case (``thread_id`` for",
        "    ``threadId``); nested objects keep their camelCase wire keys. Optional",
        "    arguments left as ``None`` are not sent. Each returns the result object",
        "    (a plain ``dict`` typed as the result's TypedDict) or raises ``RpcError``.",
        '    """',
        "",
        "    async def request(",
        "        self,",
        "        method: str,",
        "        params: Mapping[str, Any] | None = None,",
        "        *,",
        "        timeout: float | None = None,",
        "    ) -> Any:",
        '        """Send one request and return its result (implemented by the client)."""',
        "        raise NotImplementedError",
    ]
    for wire in sorted(methods):
        out += ["", *method_code(wire, methods[wire], defs)]
    return "\n".join(out) + "\n"


def generate_types(schema: dict[str, Any], source: str) -> str:
    """``appserver_client.types``: the public names of the wire types in ``_generated``."""
    methods = {"NotificationMethod", "ServerRequestMethod"}
    names = sorted({def_name(name) for name in schema["$defs"]} | methods)
    return "\n".join(
        [
            f"# Generated by clients/python/generate.py from {source}. Do not edit:",
            "# change the server's method table and run `make schema` (it regenerates this too).",
            '"""The protocol\'s wire types: every params, result and notification shape.',
            "",
            "Each is a ``TypedDict`` of the wire object (camelCase keys), so a result is a",
            "plain ``dict`` you can index and type-check::",
            "",
            "    from appserver_client.types import ThreadResult, TurnStartParams",
            "",
            "``NotificationMethod`` and ``ServerRequestMethod`` are the ``Literal`` method names.",
            "docs/protocol.md describes every type and field (its Types section).",
            '"""',
            "",
            "from appserver_client._generated import (",
            *(f"    {name}," for name in names),
            ")",
            "",
            "__all__ = [",
            *(f"    {json.dumps(name)}," for name in names),
            "]",
            "",
        ]
    )


def find_ruff() -> str:
    beside = Path(sys.executable).parent / "ruff"
    if beside.exists():
        return str(beside)
    found = shutil.which("ruff")
    if found is None:
        raise SystemExit("generate.py: ruff is needed to format the output (pip install ruff)")
    return found


def formatted(code: str, out: Path) -> str:
    ruff = find_ruff()
    fixed = subprocess.run(
        [ruff, "check", "--fix-only", "--quiet", "--stdin-filename", str(out), "-"],
        input=code,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return subprocess.run(
        [ruff, "format", "--quiet", "--stdin-filename", str(out), "-"],
        input=fixed,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA, help="protocol schema")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="module to write")
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is stale")
    args = parser.parse_args(argv)
    schema = json.loads(args.schema.read_text("utf-8"))
    types_out = args.out.parent / TYPES_MODULE
    outputs = {
        args.out: formatted(generate(schema, "schema/protocol.schema.json"), args.out),
        types_out: formatted(generate_types(schema, "schema/protocol.schema.json"), types_out),
    }
    if args.check:
        stale = [
            p for p, code in outputs.items() if not p.is_file() or p.read_text("utf-8") != code
        ]
        for path in stale:
            sys.stderr.write(f"generate.py: {path} is stale; run `make client`\n")
        return 1 if stale else 0
    for path, code in outputs.items():
        path.write_text(code, "utf-8")
        sys.stderr.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
