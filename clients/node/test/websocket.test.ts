// End to end over WebSocket: one server per suite (`--listen ws://127.0.0.1:0`), clients connect to it.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  AppServerClient,
  ConnectFailedError,
  WebSocketTransport,
  websocketUrl,
} from "../src/index.js";
import { IDENTITY, startWsServer, workspace, type WsServer } from "./helpers.js";
import { transportScenarios } from "./scenarios.js";

describe("websocket", () => {
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

  transportScenarios("websocket", {
    open: (options = {}) => AppServerClient.connect(server.url, options),
    serverPid: () => server.process.pid!,
  });

  test("websocketUrl adds /ws and the token", () => {
    assert.equal(websocketUrl("ws://127.0.0.1:9100"), "ws://127.0.0.1:9100/ws");
    assert.equal(websocketUrl("ws://h:1/ws", "a b"), "ws://h:1/ws?token=a+b");
    assert.throws(() => websocketUrl("http://h:1"), ConnectFailedError);
  });

  test("the URL without /ws works too", { timeout: 30_000 }, async () => {
    const client = await AppServerClient.connect(server.url.replace(/\/ws$/, ""));
    await client.close();
  });

  test("reconnect: a dropped connection resumes the turn with no gap and no duplicate", { timeout: 30_000 }, async () => {
    const client = await AppServerClient.connect(server.url, { backoffInitialMs: 50, logger: { warn: () => undefined } });
    try {
      const { thread } = await client.threadStart({ identity: IDENTITY });
      let deltas = "";
      let dropped = false;
      let reconnected = 0;
      const lost: string[] = [];
      client.onReconnect(() => void reconnected++);
      client.onDisconnect((error) => void lost.push(error.message));
      const outcome = await client.runTurn(thread.id, "?stream 6\n?delay 150", {
        onNotification: (event) => {
          if (event.method !== "item/agentMessage/delta") return;
          deltas += event.params.delta;
          if (!dropped) {
            dropped = true;
            assert.ok(client.transport instanceof WebSocketTransport);
            client.transport.ws.terminate(); // the network goes away mid-turn
          }
        },
      });
      assert.equal(outcome.status, "completed");
      assert.equal(outcome.text, "chunk 1 chunk 2 chunk 3 chunk 4 chunk 5 chunk 6 ");
      assert.equal(deltas, outcome.text);
      assert.equal(client.reconnects, 1);
      assert.equal(reconnected, 1);
      assert.equal(lost.length, 1);
      const again = await client.runTurn(thread.id, "hello");
      assert.equal(again.text, "You said: hello");
    } finally {
      await client.close();
    }
  });

  test("token: refused without it, accepted with it", { timeout: 30_000 }, async () => {
    const ws = await workspace();
    const guarded = await startWsServer(ws.path, ["--token", "s3cret"]);
    try {
      await assert.rejects(
        AppServerClient.connect(guarded.url, { reconnect: false }),
        (error: unknown) => error instanceof ConnectFailedError && error.permanent,
      );
      const client = await AppServerClient.connect(guarded.url, { token: "s3cret" });
      assert.equal(client.serverInfo?.name, "appserver");
      await client.close();
    } finally {
      await guarded.stop();
      await ws.remove();
    }
  });

  test("a server that is not there rejects with ConnectFailedError", async () => {
    await assert.rejects(
      AppServerClient.connect("ws://127.0.0.1:9/ws", { openTimeoutMs: 2000 }),
      (error: unknown) => error instanceof ConnectFailedError && !error.permanent,
    );
  });
});
