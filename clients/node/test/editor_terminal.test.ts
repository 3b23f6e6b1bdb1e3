// The IDE's terminals: onTerminal / terminalHandler run the agent's shell commands
// in the editor (ext/acp/terminal/*), over stdio and WebSocket; the capability is advertised.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  AppServerClient,
  type EditorTerminalCreateParams,
  type EditorTerminalOutputResult,
  type EditorTerminalParams,
  type EditorTerminalWaitParams,
  type Item,
  type TerminalHandler,
} from "../src/index.js";
import { IDENTITY, spawnClient, startWsServer, workspace, type WsServer } from "./helpers.js";

function toolResult(items: Item[]): Record<string, unknown> {
  const found = items.filter((item) => item.type === "toolResult");
  assert.equal(found.length, 1);
  return (found[0]!.payload ?? {}) as Record<string, unknown>;
}

/** Terminals that "run" a command by echoing it. */
class FakeTerminals implements TerminalHandler {
  readonly calls: [string, unknown][] = [];
  private command = "";
  create = async (params: EditorTerminalCreateParams): Promise<string> => {
    this.calls.push(["create", params]);
    this.command = params.command;
    return "t1";
  };
  waitForExit = (params: EditorTerminalWaitParams): EditorTerminalOutputResult => {
    this.calls.push(["waitForExit", params]);
    return { output: `ran: ${this.command}`, exitCode: 0 };
  };
  getOutput = (): EditorTerminalOutputResult => {
    throw new Error("not asked: the wait answered the output");
  };
  kill = (): void => {
    throw new Error("not asked: the command exited");
  };
  release = async (params: EditorTerminalParams): Promise<void> => {
    this.calls.push(["release", params]);
  };
}

async function scenario(client: AppServerClient, terminals: FakeTerminals): Promise<void> {
  assert.deepEqual(client.initializeCapabilities().acpExtensions, { terminalCreate: true });
  const { thread } = await client.threadStart({ identity: IDENTITY });
  const outcome = await client.runTurn(thread.id, '?tool shell {"command": "make build"}');
  assert.equal(outcome.status, "completed");
  const result = toolResult(outcome.items);
  assert.equal(result.success, true);
  assert.equal(result.result, "exit code: 0\nran: make build");
  assert.deepEqual(
    terminals.calls.map(([name]) => name),
    ["create", "waitForExit", "release"],
  );
  assert.deepEqual(terminals.calls[2]![1], { threadId: thread.id, terminalId: "t1" });
}

describe("editor terminals", () => {
  let server: WsServer;
  let dir: { path: string; remove(): Promise<void> };

  before(async () => {
    dir = await workspace();
    server = await startWsServer(dir.path);
  });

  after(async () => {
    await server?.stop();
    await dir?.remove();
  });

  test("terminalHandler over WebSocket", { timeout: 30_000 }, async () => {
    const terminals = new FakeTerminals();
    const client = await AppServerClient.connect(server.url, {
      terminalHandler: terminals,
      approvalHandler: () => "accept",
    });
    try {
      await scenario(client, terminals);
    } finally {
      await client.close();
    }
  });

  test("onTerminal over stdio", { timeout: 30_000 }, async () => {
    const ws = await workspace();
    const terminals = new FakeTerminals();
    const client = new AppServerClient({ approvalHandler: () => "accept" });
    client.onTerminal(terminals);
    assert.equal(client.initializeCapabilities().acpExtensions?.terminalCreate, true);
    const spawned = await spawnClient(ws.path, { terminalHandler: terminals, approvalHandler: () => "accept" });
    try {
      await scenario(spawned, terminals);
    } finally {
      await spawned.close();
      await ws.remove();
    }
  });
});
