// docs/clients.md: route notifications by `params.threadId`. Every thread-scoped notification
// of a real turn carries it at the top of params, and the client's events agree.
import assert from "node:assert/strict";
import { test } from "node:test";

import { makeEvent, type AnyNotification } from "../src/index.js";
import { spawnClient, workspace } from "./helpers.js";

test("every thread-scoped notification of a turn carries params.threadId", { timeout: 30_000 }, async () => {
  const ws = await workspace();
  const client = await spawnClient(ws.path);
  try {
    const seen: AnyNotification[] = [];
    client.onAny((event) => {
      seen.push(event);
    });
    const { thread } = await client.threadStart({ identity: { channelName: "cli", userId: "me" } });
    const other = await client.threadStart({ identity: { channelName: "cli", userId: "me" } });
    const mine: AnyNotification[] = [];
    const outcome = await client.runTurn(thread.id, "hello", { onNotification: (event) => void mine.push(event) });
    assert.equal(outcome.status, "completed");

    const scoped = seen.filter((event) => /^(thread|turn|item)\//.test(event.method));
    const methods = new Set(scoped.map((event) => event.method));
    for (const method of ["thread/started", "turn/started", "item/started", "item/completed", "turn/completed"]) {
      assert.ok(methods.has(method as AnyNotification["method"]), `saw ${method}`);
    }
    for (const event of scoped) {
      const params = event.params as { threadId?: unknown };
      assert.equal(typeof params.threadId, "string", `${event.method} has params.threadId`);
      assert.equal(event.threadId, params.threadId, `${event.method}: event.threadId is params.threadId`);
    }
    // Routing by threadId separates the two threads.
    const forThread = scoped.filter((event) => event.threadId === thread.id).map((event) => event.method);
    assert.ok(forThread.includes("turn/started") && forThread.includes("turn/completed"));
    assert.ok(scoped.some((event) => event.threadId === other.thread.id && event.method === "thread/started"));
    assert.ok(!scoped.some((event) => event.threadId === other.thread.id && event.method.startsWith("turn/")));
    assert.ok(mine.every((event) => event.threadId === thread.id));
  } finally {
    await client.close();
    await ws.remove();
  }
});

test("makeEvent reads params.threadId first", () => {
  const event = makeEvent("turn/started", { threadId: "t1", turn: { id: "turn_001", threadId: "t1" } });
  assert.equal(event.threadId, "t1");
  assert.equal(event.turnId, "turn_001");
  const item = makeEvent("item/completed", { threadId: "t2", turnId: "turn_002", item: { id: "item_1" } });
  assert.equal(item.threadId, "t2");
  assert.equal(item.turnId, "turn_002");
});
