// `npm run example` as the README says: the example finds the server without
// APPSERVER_COMMAND ($APPSERVER_BIN, else ../../.venv/bin/appserver) and runs in a
// temporary workspace it removes, leaving no .craft/ where it was started.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { PACKAGE_ROOT, REPO_ROOT, workspace } from "./helpers.js";

const run = promisify(execFile);

test("package.json's example script runs the built example", () => {
  const pkg = JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8"));
  assert.match(pkg.scripts.example, /node dist\/examples\/minimal\.js$/);
});

test("the example finds the server by itself and cleans up its workspace", { timeout: 30_000 }, async () => {
  const cwd = await workspace();
  const craftBefore = existsSync(join(REPO_ROOT, ".craft")) || existsSync(join(PACKAGE_ROOT, ".craft"));
  try {
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.APPSERVER_COMMAND;
    delete env.APPSERVER_WORKSPACE;
    // PATH without a venv: the server must come from APPSERVER_BIN or ../../.venv/bin/appserver.
    env.PATH = (env.PATH ?? "")
      .split(":")
      .filter((dir) => !dir.includes(".venv"))
      .join(":");
    const { stdout, stderr } = await run(process.execPath, [join(PACKAGE_ROOT, "dist", "examples", "minimal.js"), "hello"], {
      cwd: cwd.path,
      env,
      timeout: 20_000,
    });
    assert.ok(stdout.includes("method: 'turn/completed'"), stdout + stderr);
    const used = /^workspace: (.+)$/m.exec(stderr)?.[1];
    assert.ok(used, `the example names its workspace: ${stderr}`);
    assert.notEqual(used, cwd.path);
    assert.equal(existsSync(used), false, "the temporary workspace is removed");
    assert.equal(existsSync(join(cwd.path, ".craft")), false, "no .craft/ where it was started");
    if (!craftBefore) {
      assert.equal(existsSync(join(REPO_ROOT, ".craft")), false, "no .craft/ in the repository");
      assert.equal(existsSync(join(PACKAGE_ROOT, ".craft")), false, "no .craft/ in clients/node");
    }
  } finally {
    await cwd.remove();
  }
});
