// examples/minimal.ts (the seed page's minimal client) against a spawned server.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { APPSERVER, PACKAGE_ROOT, workspace } from "./helpers.js";

const run = promisify(execFile);

test("examples/minimal runs a turn and prints the stream", { timeout: 30_000 }, async () => {
  const ws = await workspace();
  try {
    const { stdout } = await run(process.execPath, [join(PACKAGE_ROOT, "dist", "examples", "minimal.js"), "hello"], {
      cwd: ws.path,
      env: { ...process.env, APPSERVER_COMMAND: `${APPSERVER} app-server --log-level warning` },
      timeout: 20_000,
    });
    for (const method of ["thread/started", "turn/started", "item/agentMessage/delta", "turn/completed"]) {
      assert.ok(stdout.includes(`method: '${method}'`), `prints ${method}`);
    }
    // The example prints each message with console.log: the deltas are `delta: '...'` lines.
    const deltas = [...stdout.matchAll(/^\s+delta: '([^']*)',?$/gm)].map((m) => m[1]).join("");
    assert.equal(deltas, "You said: hello");
  } finally {
    await ws.remove();
  }
});
