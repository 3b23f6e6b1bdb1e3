// End to end over stdio: each client spawns `appserver app-server --workspace <tmp>`.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import {
  AppServerClient,
  ConnectFailedError,
  ConnectionLostError,
  StdioTransport,
} from "../src/index.js";
import { APPSERVER, IDENTITY, spawnClient, workspace } from "./helpers.js";
import { transportScenarios } from "./scenarios.js";

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

function stdioOf(client: AppServerClient): StdioTransport {
  assert.ok(client.transport instanceof StdioTransport);
  return client.transport;
}

// Every test spawns its own server and workspace, so they can run side by side.
describe("stdio", { concurrency: 4 }, () => {
  transportScenarios("stdio", {
    async open(options = {}) {
      const ws = await workspace();
      cleanups.push(ws.remove);
      return spawnClient(ws.path, options);
    },
    serverPid: (client) => stdioOf(client).process.pid!,
  });

  test("close() ends the server process", { timeout: 30_000 }, async () => {
    const ws = await workspace();
    cleanups.push(ws.remove);
    const client = await spawnClient(ws.path);
    const child = stdioOf(client).process;
    await client.close();
    assert.ok(child.exitCode !== null || child.signalCode !== null, "the server has exited");
  });

  test("a server that dies fails pending and later requests", { timeout: 30_000 }, async () => {
    const ws = await workspace();
    cleanups.push(ws.remove);
    const client = await spawnClient(ws.path);
    try {
      const child = stdioOf(client).process;
      process.kill(child.pid!, "SIGSTOP");
      const pending = client.threadList({ identity: IDENTITY });
      process.kill(child.pid!, "SIGKILL");
      await assert.rejects(pending, (error: unknown) => error instanceof ConnectionLostError);
      const finished = await client.closed;
      assert.ok(finished instanceof ConnectionLostError);
      assert.match(finished.message, /server process/);
      await assert.rejects(client.threadList({ identity: IDENTITY }), ConnectionLostError);
    } finally {
      await client.close();
    }
  });

  test("a command that does not exist rejects with ConnectFailedError", async () => {
    await assert.rejects(
      AppServerClient.spawn(`${APPSERVER}-does-not-exist`, ["app-server"]),
      (error: unknown) => error instanceof ConnectFailedError && error.permanent,
    );
  });

  test("a server that exits at start rejects with ConnectFailedError", { timeout: 30_000 }, async () => {
    await assert.rejects(
      AppServerClient.spawn(APPSERVER, ["app-server", "--bogus"], { stderr: "pipe" }),
      (error: unknown) => error instanceof ConnectFailedError && /exited with code 2/.test(error.message),
    );
  });

  test("clientInfo defaults to appserver-node", { timeout: 30_000 }, async () => {
    const ws = await workspace();
    cleanups.push(ws.remove);
    const lines: string[] = [];
    const client = await AppServerClient.spawn(
      APPSERVER,
      ["app-server", "--workspace", ws.path, "--log-level", "debug"],
      { stderr: "pipe", onStderr: (line) => void lines.push(line) },
    );
    await client.close();
    assert.equal(client.clientName, "appserver-node");
    assert.ok(stdioOf(client).stderrText.length > 0);
    assert.ok(lines.length > 0);
  });
});
