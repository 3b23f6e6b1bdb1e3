#!/usr/bin/env node
// Generate src/generated.ts from the protocol's JSON Schema (schema/protocol.schema.json).
//
// The schema is itself generated from the server's one method table, so the
// client's types and typed methods cannot drift from the server: `make test`
// runs this script with --check (`npm run check-generated`).
//
//   node scripts/generate.mjs            rewrite src/generated.ts
//   node scripts/generate.mjs --check    exit 1 if src/generated.ts is stale
//   node scripts/generate.mjs --schema PATH --out PATH
//
// It needs nothing but Node: the schema uses a small subset of JSON Schema
// ($ref, type, properties/required, additionalProperties, items, anyOf/oneOf,
// enum, const), all of which map directly onto TypeScript types.

import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { dirname, resolve, relative } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "..");
const DEFAULT_SCHEMA = resolve(ROOT, "../../schema/protocol.schema.json");
const DEFAULT_OUT = resolve(ROOT, "src/generated.ts");

// Members of the hand-written client; a wire method must not map onto them.
const RESERVED = new Set([
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
]);

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

function defName(ref) {
  const name = ref.split("/").pop().replace(/\W/g, "_");
  return name;
}

/** `thread/mode/set` -> `threadModeSet`; `skills/restoreOriginal` -> `skillsRestoreOriginal`. */
export function methodName(wire) {
  const parts = wire.split("/").map((part) => part.replace(/\W+(.)?/g, (_, c) => (c ?? "").toUpperCase()));
  return parts.map((part, i) => (i === 0 ? part : part.charAt(0).toUpperCase() + part.slice(1))).join("");
}

function key(name) {
  return IDENT.test(name) ? name : JSON.stringify(name);
}

function literal(value) {
  return JSON.stringify(value);
}

function union(parts) {
  const seen = [];
  for (const part of parts) {
    if (!seen.includes(part)) seen.push(part);
  }
  if (seen.includes("unknown")) return "unknown";
  const nullIndex = seen.indexOf("null");
  if (nullIndex !== -1 && seen.length > 1) {
    seen.splice(nullIndex, 1);
    seen.push("null"); // null last, as people write it
  }
  return seen.join(" | ");
}

function isComposite(rendered) {
  // A top-level union or intersection needs parentheses before `[]`.
  let depth = 0;
  for (let i = 0; i < rendered.length; i++) {
    const c = rendered[i];
    if (c === "{" || c === "(" || c === "<" || c === "[") depth++;
    else if (c === "}" || c === ")" || c === ">" || c === "]") depth--;
    else if (depth === 0 && (c === "|" || c === "&")) return true;
    else if (c === '"') {
      i++;
      while (i < rendered.length && rendered[i] !== '"') i += rendered[i] === "\\" ? 2 : 1;
    }
  }
  return false;
}

function comment(text, indent) {
  const clean = String(text)
    .trim()
    .replace(/``([^`]+)``/g, "`$1`") // reStructuredText literals (the server's docstrings) -> Markdown
    .replace(/\*\//g, "*\\/");
  if (!clean) return [];
  const lines = clean.split("\n");
  if (lines.length === 1) return [`${indent}/** ${lines[0]} */`];
  return [`${indent}/**`, ...lines.map((line) => (line ? `${indent} * ${line}` : `${indent} *`)), `${indent} */`];
}

/** A TypeScript type for a JSON Schema fragment (inline objects rendered at `indent`). */
function render(schema, indent = "") {
  if (schema === true || schema === undefined || schema === null) return "unknown";
  if (typeof schema !== "object" || Object.keys(schema).length === 0) return "unknown";
  if (schema.$ref) return defName(schema.$ref);
  if ("const" in schema) return literal(schema.const);
  if (Array.isArray(schema.enum)) return union(schema.enum.map(literal));
  for (const k of ["anyOf", "oneOf"]) {
    if (Array.isArray(schema[k])) return union(schema[k].map((option) => render(option, indent)));
  }
  if (Array.isArray(schema.allOf) && schema.allOf.length === 1) return render(schema.allOf[0], indent);
  const type = schema.type;
  if (Array.isArray(type)) return union(type.map((t) => render({ ...schema, type: t }, indent)));
  switch (type) {
    case "string":
      return "string";
    case "integer":
    case "number":
      return "number";
    case "boolean":
      return "boolean";
    case "null":
      return "null";
    case "array": {
      const item = render(schema.items, indent);
      return isComposite(item) ? `(${item})[]` : `${item}[]`;
    }
    case "object":
      return objectType(schema, indent);
    default:
      return "unknown";
  }
}

function objectType(schema, indent) {
  const props = schema.properties ?? {};
  const extra = schema.additionalProperties;
  if (Object.keys(props).length === 0) {
    const value = extra && typeof extra === "object" ? render(extra, indent) : "unknown";
    return `{ [key: string]: ${value} }`;
  }
  const inner = indent + "  ";
  return ["{", ...members(schema, inner), `${indent}}`].join("\n");
}

function members(schema, indent) {
  const props = schema.properties ?? {};
  const required = new Set(schema.required ?? []);
  const lines = [];
  for (const [name, prop] of Object.entries(props)) {
    const notes = [];
    if (prop && typeof prop === "object") {
      if (prop.description) notes.push(prop.description);
      if ("default" in prop && prop.default !== null) notes.push(`Default: \`${JSON.stringify(prop.default)}\`.`);
    }
    lines.push(...comment(notes.join("\n\n"), indent));
    const optional = required.has(name) ? "" : "?";
    lines.push(`${indent}${key(name)}${optional}: ${render(prop, indent)};`);
  }
  const extra = schema.additionalProperties;
  if (extra === true) {
    lines.push(`${indent}[key: string]: unknown;`);
  } else if (extra && typeof extra === "object" && Object.keys(extra).length > 0) {
    lines.push(`${indent}[key: string]: unknown; // ${render(extra)}`);
  }
  return lines;
}

function definition(name, schema) {
  const doc = [];
  doc.push(schema.description ?? `\`${schema.title ?? name}\` on the wire.`);
  if (schema.additionalProperties === true) {
    doc.push("Open object: the server keeps (and may send) keys not listed here.");
  }
  const lines = comment(doc.join("\n\n"), "");
  if (schema.type === "object" && schema.properties) {
    const body = members(schema, "  ");
    if (body.length === 0) {
      lines.push(`// eslint-disable-next-line @typescript-eslint/no-empty-object-type`);
      lines.push(`export interface ${name} {}`);
    } else {
      lines.push(`export interface ${name} {`, ...body, "}");
    }
  } else {
    lines.push(`export type ${name} = ${render(schema)};`);
  }
  return lines;
}

function methodDoc(wire, spec, paramsName) {
  const facts = [`Wire method \`${wire}\``];
  if (spec.capability) facts.push(`capability \`${spec.capability}\``);
  if (spec.errors && spec.errors.length) facts.push(`errors ${spec.errors.join(", ")}`);
  const summary = (spec.summary ?? "").trim() || `\`${wire}\`.`;
  return `${summary}\n\n${facts.join("; ")}.\nParams: {@link ${paramsName}}.`;
}

export function generate(schema, source) {
  const defs = schema.$defs ?? {};
  const methods = schema["x-methods"] ?? {};
  const notifications = schema["x-notifications"] ?? {};
  const requests = schema["x-serverRequests"] ?? {};
  const sorted = (obj) => Object.keys(obj).sort();
  const out = [
    `// Generated by clients/node/scripts/generate.mjs from ${source}. Do not edit:`,
    "// change the server's method table and run `make schema` (it regenerates this too),",
    "// or `npm run generate` in clients/node after the schema changed.",
    "/* eslint-disable */",
    "",
    ...comment(
      `Typed wire shapes, method maps and one typed method per JSON-RPC method.\n\n` +
        `${schema.title ?? "protocol"}: ${schema.description ?? ""}`,
      "",
    ),
    "",
    `export const PROTOCOL_ID = ${literal(schema.$id ?? "")};`,
    "",
    "// ---------------------------------------------------------------- wire types ($defs)",
    "",
  ];
  for (const name of sorted(defs)) {
    out.push(...definition(defName(name), defs[name]), "");
  }

  out.push(
    "// ---------------------------------------------------------------- method maps",
    "",
    "/** Thread-scoped notifications also carry `seq`, the thread's event counter. */",
    "export type WithSeq<T> = T & { seq?: number };",
    "",
    "/** Every client->server method: its params and result types. */",
    "export interface Methods {",
  );
  for (const wire of sorted(methods)) {
    const spec = methods[wire];
    const p = defName(spec.params.$ref);
    const r = defName(spec.result.$ref);
    out.push(...comment(methodDoc(wire, spec, p), "  "));
    out.push(`  ${literal(wire)}: { params: ${p}; result: ${r} };`);
  }
  out.push("}", "", "/** Every server->client notification: its params type (with `seq`). */", "export interface Notifications {");
  for (const wire of sorted(notifications)) {
    const spec = notifications[wire];
    const notes = [spec.summary, spec.delivery ? `Delivery: ${spec.delivery}.` : ""].filter(Boolean).join("\n\n");
    out.push(...comment(notes, "  "));
    out.push(`  ${literal(wire)}: WithSeq<${defName(spec.params.$ref)}>;`);
  }
  out.push("}", "", "/** Every server->client request: its params and result types. */", "export interface ServerRequests {");
  for (const wire of sorted(requests)) {
    const spec = requests[wire];
    out.push(...comment(spec.summary ?? "", "  "));
    out.push(`  ${literal(wire)}: { params: ${defName(spec.params.$ref)}; result: ${defName(spec.result.$ref)} };`);
  }
  out.push(
    "}",
    "",
    "export type Method = keyof Methods;",
    "export type ParamsOf<M extends Method> = Methods[M][\"params\"];",
    "export type ResultOf<M extends Method> = Methods[M][\"result\"];",
    "export type NotificationMethod = keyof Notifications;",
    "export type ServerRequestMethod = keyof ServerRequests;",
    "",
    "/** Every client->server method name. */",
    "export const METHODS: readonly Method[] = [",
    ...sorted(methods).map((m) => `  ${literal(m)},`),
    "];",
    "",
    "/** Every server->client notification name. */",
    "export const NOTIFICATION_METHODS: readonly NotificationMethod[] = [",
    ...sorted(notifications).map((m) => `  ${literal(m)},`),
    "];",
    "",
    "/** Every server->client request name. */",
    "export const SERVER_REQUEST_METHODS: readonly ServerRequestMethod[] = [",
    ...sorted(requests).map((m) => `  ${literal(m)},`),
    "];",
    "",
    "/** Per method: the server capability that advertises it (`null`: always there) and its documented error codes. */",
    "export const METHOD_INFO: { readonly [M in Method]: { readonly capability: string | null; readonly errors: readonly number[] } } = {",
    ...sorted(methods).map((m) => {
      const spec = methods[m];
      return `  ${literal(m)}: { capability: ${literal(spec.capability ?? null)}, errors: [${(spec.errors ?? []).join(", ")}] },`;
    }),
    "};",
    "",
    "// ---------------------------------------------------------------- typed methods",
    "",
    "/** Per-request options. */",
    "export interface RequestOptions {",
    "  /** Milliseconds to wait for the answer (default: the client's `requestTimeoutMs`; `0` or `Infinity`: no limit). */",
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
    "  abstract request<M extends Method>(method: M, params: ParamsOf<M>, options?: RequestOptions): Promise<ResultOf<M>>;",
  );
  const used = new Map();
  for (const wire of sorted(methods)) {
    const spec = methods[wire];
    const name = methodName(wire);
    if (RESERVED.has(name)) throw new Error(`generate.mjs: ${wire} maps to reserved client name ${name}`);
    if (used.has(name)) throw new Error(`generate.mjs: ${wire} and ${used.get(name)} both map to ${name}`);
    used.set(name, wire);
    const pName = defName(spec.params.$ref);
    const params = defs[spec.params.$ref.split("/").pop()] ?? {};
    const optional = (params.required ?? []).length === 0;
    const arg = optional ? `params: ${pName} = {}` : `params: ${pName}`;
    out.push("", ...comment(methodDoc(wire, spec, pName), "  "));
    out.push(
      `  ${name}(${arg}, options?: RequestOptions): Promise<${defName(spec.result.$ref)}> {`,
      `    return this.request(${literal(wire)}, params, options);`,
      "  }",
    );
  }
  out.push("}", "");
  return out.join("\n");
}

function main(argv) {
  let schemaPath = DEFAULT_SCHEMA;
  let outPath = DEFAULT_OUT;
  let check = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--check") check = true;
    else if (arg === "--schema") schemaPath = resolve(argv[++i]);
    else if (arg === "--out") outPath = resolve(argv[++i]);
    else {
      process.stderr.write(`usage: generate.mjs [--check] [--schema PATH] [--out PATH]\n`);
      return 2;
    }
  }
  const schema = JSON.parse(readFileSync(schemaPath, "utf8"));
  const code = generate(schema, "schema/protocol.schema.json");
  const shown = relative(process.cwd(), outPath) || outPath;
  if (check) {
    if (!existsSync(outPath) || readFileSync(outPath, "utf8") !== code) {
      process.stderr.write(`generate.mjs: ${shown} is stale; run \`npm run generate\` in clients/node (or \`make schema\`)\n`);
      return 1;
    }
    return 0;
  }
  writeFileSync(outPath, code, "utf8");
  process.stderr.write(`${shown}\n`);
  return 0;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = main(process.argv.slice(2));
}
