// Client tools: a tool declared in threadStart({dynamicTools}) is run by onToolCall (stdio and WebSocket).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { AppServerClient, type DynamicToolSpec, type Item, type ToolCallParams } from "../src/index.js";
import { IDENTITY, spawnClient, startWsServer, workspace, type WsServer } from "./helpers.js";

const LOOKUP: DynamicToolSpec = {
  namespace: "ide",
  name: "lookup",
  description: "Look a word up in the editor.",
  inputSchema: { type: "object", properties: { word: { type: "string" } } },
};

function dynamicItem(items: Item[]): Item {
  const found = items.filter((item) => item.type === "dynamicToolCall");
  assert.equal(found.length, 1);
  return found[0]!;
}

async function scenario(client: AppServerClient): Promise<void> {
  const seen: ToolCallParams[] = [];
  client.onToolCall(async (params) => {
    seen.push(params);
    return { success: true, contentItems: [{ type: "text", text: `${String(params.arguments.word)}: a fruit` }] };
  });
  const { thread } = await client.threadStart({ identity: IDENTITY, dynamicTools: [LOOKUP] });
  const outcome = await client.runTurn(thread.id, '?tool ide__lookup {"word": "apple"}');
  assert.equal(outcome.status, "completed");
  assert.deepEqual(
    seen.map((p) => [p.namespace, p.tool, p.arguments]),
    [["ide", "lookup", { word: "apple" }]],
  );
  assert.equal(dynamicItem(outcome.items).payload?.success, true);
  assert.match(outcome.text, /apple: a fruit/);

  // Without a handler the call fails ("no handler"); the turn still completes.
  client.onToolCall(null);
  const failed = await client.runTurn(thread.id, "?tool ide__lookup {}");
  assert.equal(failed.status, "completed");
  const payload = dynamicItem(failed.items).payload ?? {};
  assert.equal(payload.success, false);
  assert.equal(payload.errorMessage, "no handler");
}

describe("dynamic tools", () => {
  let server: WsServer;
  let removeWorkspace: () => Promise<void>;

  before(async () => {
    const ws = await workspace();
    removeWorkspace = ws.remove;
    server = await startWsServer(ws.path);
  });

  after(async () => {
    await server?.stop();
    await removeWorkspace?.();
  });

  test("onToolCall over WebSocket", { timeout: 30_000 }, async () => {
    const client = await AppServerClient.connect(server.url);
    try {
      await scenario(client);
    } finally {
      await client.close();
    }
  });

  test("onToolCall over stdio", { timeout: 30_000 }, async () => {
    const ws = await workspace();
    const client = await spawnClient(ws.path);
    try {
      await scenario(client);
    } finally {
      await client.close();
      await ws.remove();
    }
  });
});
