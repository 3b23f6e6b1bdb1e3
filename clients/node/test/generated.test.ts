// The generated module matches the schema and every method has its typed helper.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { AppServerClient, METHODS, METHOD_INFO, NOTIFICATION_METHODS, SERVER_REQUEST_METHODS, VERSION } from "../src/index.js";
import { PACKAGE_ROOT, REPO_ROOT } from "./helpers.js";

const run = promisify(execFile);

test("src/generated.ts is up to date with schema/protocol.schema.json", async () => {
  await run(process.execPath, [join(PACKAGE_ROOT, "scripts", "generate.mjs"), "--check"]);
});

test("the maps cover the schema", () => {
  const schema = JSON.parse(readFileSync(join(REPO_ROOT, "schema", "protocol.schema.json"), "utf8"));
  assert.deepEqual([...METHODS].sort(), Object.keys(schema["x-methods"]).sort());
  assert.deepEqual([...NOTIFICATION_METHODS].sort(), Object.keys(schema["x-notifications"]).sort());
  assert.deepEqual([...SERVER_REQUEST_METHODS].sort(), Object.keys(schema["x-serverRequests"]).sort());
  assert.equal(METHOD_INFO["thread/read"].capability, "threadManagement");
  assert.ok(METHOD_INFO["thread/read"].errors.includes(-32010));
});

test("one typed helper per method", () => {
  const proto = AppServerClient.prototype as unknown as Record<string, unknown>;
  for (const method of METHODS) {
    const name = method
      .split("/")
      .map((part, i) => (i === 0 ? part : part[0]!.toUpperCase() + part.slice(1)))
      .join("");
    assert.equal(typeof proto[name], "function", `${method} -> ${name}`);
  }
});

test("VERSION matches package.json", () => {
  const pkg = JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8"));
  assert.equal(VERSION, pkg.version);
});
