// The browser transport (src/browser_transport.ts, what the web client's bundle uses) over
// a DOM-style WebSocket: `ws`'s class stands in for the browser's (same onopen/onmessage/
// onclose/send/close surface), against a real server. The bundle itself runs in a real
// Chromium in tests/test_web_browser.py.
import assert from "node:assert/strict";
import { test } from "node:test";
import WebSocket from "ws";

import { ConnectFailedError } from "../src/errors.js";
import { StdioTransport, WebSocketTransport, websocketUrl } from "../src/browser_transport.js";
import { startWsServer, workspace } from "./helpers.js";

(globalThis as { WebSocket?: unknown }).WebSocket ??= WebSocket;

function nextFrame(transport: WebSocketTransport): Promise<string> {
  return new Promise((resolve, reject) =>
    transport.attach({ frame: resolve, closed: (error) => reject(error) }),
  );
}

test("browser transport: a JSON-RPC round trip, with the token in the WebSocket URL", { timeout: 30_000 }, async () => {
  const ws = await workspace();
  const server = await startWsServer(ws.path, ["--token", "br0wser"]);
  try {
    await assert.rejects(WebSocketTransport.open(websocketUrl(server.url)), ConnectFailedError);
    await assert.rejects(WebSocketTransport.open(websocketUrl(server.url, "wrong")), ConnectFailedError);
    const transport = await WebSocketTransport.open(websocketUrl(server.url, "br0wser"));
    assert.equal(transport.kind, "websocket");
    const answer = nextFrame(transport);
    await transport.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { clientInfo: { name: "b", version: "1" } } }));
    const reply = JSON.parse(await answer) as { id: number; result: { serverInfo: { name: string } } };
    assert.equal(reply.id, 1);
    assert.ok(reply.result.serverInfo.name);
    await transport.close();
    await assert.rejects(transport.send("{}"));
  } finally {
    await server.stop();
    await ws.remove();
  }
});

test("browser transport: no child processes, URLs as the Node transport makes them", async () => {
  await assert.rejects(StdioTransport.start("appserver", []), ConnectFailedError);
  assert.equal(websocketUrl("ws://127.0.0.1:9100", "a b"), "ws://127.0.0.1:9100/ws?token=a+b");
  assert.throws(() => websocketUrl("http://127.0.0.1:9100"), ConnectFailedError);
});
