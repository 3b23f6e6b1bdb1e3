// The README's full programs are examples/readme_*.ts, compiled by the build and run
// here against real servers, so the README cannot drift from working code.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { APPSERVER, PACKAGE_ROOT, startWsServer, workspace } from "./helpers.js";

const run = promisify(execFile);

async function readmePrograms(): Promise<string[]> {
  const readme = await readFile(join(PACKAGE_ROOT, "README.md"), "utf8");
  return [...readme.matchAll(/```ts\n(import [\s\S]*?)```/g)].map((m) => m[1]!);
}

async function exampleSource(name: string): Promise<string> {
  const text = await readFile(join(PACKAGE_ROOT, "examples", name), "utf8");
  return text.slice(text.indexOf("\n") + 1); // drop the "kept identical" comment line
}

test("README programs are the tested example files", async () => {
  const programs = await readmePrograms();
  assert.deepEqual(programs, [
    await exampleSource("readme_spawn.ts"),
    await exampleSource("readme_approvals.ts"),
  ]);
});

test("README: spawn and runTurn", { timeout: 30_000 }, async () => {
  const ws = await workspace();
  try {
    const { stdout } = await run(process.execPath, [join(PACKAGE_ROOT, "dist", "examples", "readme_spawn.js")], {
      cwd: ws.path,
      env: { ...process.env, PATH: `${dirname(APPSERVER)}:${process.env.PATH ?? ""}` },
      timeout: 20_000,
    });
    assert.equal(stdout, "completed - You said: hello\n[ 'userMessage', 'agentMessage' ]\n");
  } finally {
    await ws.remove();
  }
});

test("README: approvals over WebSocket", { timeout: 30_000 }, async () => {
  const ws = await workspace();
  const server = await startWsServer(ws.path);
  try {
    const { stdout } = await run(process.execPath, [join(PACKAGE_ROOT, "dist", "examples", "readme_approvals.js")], {
      cwd: ws.path,
      env: { ...process.env, APPSERVER_URL: server.url },
      timeout: 20_000,
    });
    assert.equal(stdout, "[approve shell: touch hello.txt]\nThe command exited with code 0.\ncompleted\n");
  } finally {
    await server.stop();
    await ws.remove();
  }
});
