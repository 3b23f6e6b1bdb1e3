// The same end-to-end checks over both transports, against a real server with the offline model.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AppServerClient,
  RequestTimeoutError,
  RpcError,
  THREAD_NOT_FOUND,
  type AnyNotification,
  type ApprovalRequestParams,
  type ClientOptions,
} from "../src/index.js";
import { IDENTITY } from "./helpers.js";

export interface Harness {
  /** A connected client (closed by the test). */
  open(options?: ClientOptions): Promise<AppServerClient>;
  /** The pid of the server process a client talks to. */
  serverPid(client: AppServerClient): number;
}

const T = { timeout: 30_000 };

async function withClient(
  harness: Harness,
  options: ClientOptions,
  body: (client: AppServerClient) => Promise<void>,
): Promise<void> {
  const client = await harness.open(options);
  try {
    await body(client);
  } finally {
    await client.close();
  }
}

export function transportScenarios(kind: "stdio" | "websocket", harness: Harness): void {
  test("initialize: server info and capabilities", T, async () => {
    await withClient(harness, {}, async (client) => {
      assert.equal(client.kind, kind);
      assert.equal(client.connected, true);
      assert.equal(client.serverInfo?.name, "appserver");
      assert.equal(client.serverInfo?.protocolVersion, "1");
      assert.equal(client.serverCapabilities.threadManagement, true);
      assert.equal(client.serverCapabilities.approvalFlow, true);
    });
  });

  test("thread/start + turn/start: streamed deltas reconstruct the reply", T, async () => {
    await withClient(harness, {}, async (client) => {
      const { thread } = await client.threadStart({ identity: IDENTITY });
      assert.match(thread.id, /^thread_/);
      let viaHandler = "";
      let otherThread = 0;
      client.on("item/agentMessage/delta", (params) => void (viaHandler += params.delta), { threadId: thread.id });
      client.on("item/agentMessage/delta", () => void otherThread++, { threadId: "thread_other" });
      const events = client.events({ threadId: thread.id });
      const { turn } = await client.turnStart({ threadId: thread.id, input: [{ type: "text", text: "hello" }] });
      assert.equal(turn.status, "running");
      let deltas = "";
      let completedText: unknown;
      const methods: string[] = [];
      for await (const event of events) {
        methods.push(event.method);
        assert.equal(typeof event.seq, "number");
        if (event.method === "item/agentMessage/delta") deltas += event.params.delta;
        if (event.method === "item/completed" && event.params.item.type === "agentMessage") {
          completedText = event.params.item.payload?.text;
        }
        if (event.method === "turn/completed") {
          assert.equal(event.params.turn.id, turn.id);
          break;
        }
      }
      assert.equal(deltas, "You said: hello");
      assert.equal(completedText, "You said: hello");
      assert.equal(viaHandler, "You said: hello");
      assert.equal(otherThread, 0);
      assert.ok(methods.indexOf("turn/started") < methods.indexOf("item/agentMessage/delta"));
      assert.ok(methods.filter((m) => m === "item/agentMessage/delta").length >= 2);
      assert.equal(client.lastSeq(thread.id) !== undefined, true);
    });
  });

  test("runTurn: text, items, status", T, async () => {
    await withClient(harness, {}, async (client) => {
      const { thread } = await client.threadStart({ identity: IDENTITY });
      const seen: string[] = [];
      const outcome = await client.runTurn(thread.id, "hello", { onNotification: (e) => void seen.push(e.method) });
      assert.equal(outcome.status, "completed");
      assert.equal(outcome.ok, true);
      assert.equal(outcome.text, "You said: hello");
      assert.deepEqual(
        outcome.items.map((item) => item.type),
        ["userMessage", "agentMessage"],
      );
      assert.equal(outcome.turn.status, "completed");
      assert.equal(seen.at(-1), "turn/completed");
      assert.ok(seen.includes("item/agentMessage/delta"));
    });
  });

  test("approval round trip: the handler accepts, the command runs", T, async () => {
    const asked: ApprovalRequestParams[] = [];
    await withClient(
      harness,
      {
        approvalHandler: async (request) => {
          asked.push(request);
          return "accept";
        },
      },
      async (client) => {
        const { thread } = await client.threadStart({ identity: IDENTITY });
        const approvalEvents: AnyNotification[] = [];
        client.onAny((event) => void approvalEvents.push(event), { methods: ["item/approval/*"] });
        const outcome = await client.runTurn(thread.id, "!echo hi");
        assert.equal(outcome.status, "completed");
        assert.equal(asked.length, 1);
        assert.equal(asked[0]!.approvalType, "shell");
        assert.equal(asked[0]!.operation, "echo hi");
        assert.equal(asked[0]!.threadId, thread.id);
        const result = outcome.items.find((item) => item.type === "toolResult");
        assert.ok(result, "a toolResult item");
        assert.equal(result.payload?.success, true);
        assert.match(String(result.payload?.result), /exit code: 0/);
        const response = outcome.items.find((item) => item.type === "approvalResponse");
        assert.equal(response?.payload?.decision, "accept");
        assert.match(outcome.text, /exited with code 0/);
        assert.deepEqual(
          approvalEvents.map((e) => e.method),
          ["item/approval/resolved"],
        );
      },
    );
  });

  test("approval without a handler is declined", T, async () => {
    await withClient(harness, {}, async (client) => {
      const { thread } = await client.threadStart({ identity: IDENTITY });
      const outcome = await client.runTurn(thread.id, "!echo hi");
      assert.equal(outcome.status, "completed");
      const response = outcome.items.find((item) => item.type === "approvalResponse");
      assert.equal(response?.payload?.decision, "decline");
      assert.equal(response?.payload?.approved, false);
      assert.ok(!outcome.items.some((item) => item.type === "toolResult" && item.payload?.success === true));
      assert.equal(outcome.text, "The shell call was declined.");
    });
  });

  test("onApproval: sync handler, replaced and removed", T, async () => {
    await withClient(harness, { approvalHandler: () => "cancel" }, async (client) => {
      const { thread } = await client.threadStart({ identity: IDENTITY });
      client.onApproval(() => ({ decision: "acceptForSession", scope: "wider" }));
      const first = await client.runTurn(thread.id, "!echo one");
      assert.match(first.text, /exited with code 0/);
      client.onApproval(null);
      // acceptForSession with the wider scope covers shell:* on this thread: no new request.
      const second = await client.runTurn(thread.id, "!echo two");
      assert.match(second.text, /exited with code 0/);
      assert.ok(!second.items.some((item) => item.type === "approvalRequest"));
    });
  });

  test("RpcError for an unknown thread (-32010)", T, async () => {
    await withClient(harness, {}, async (client) => {
      await assert.rejects(client.threadRead({ threadId: "thread_does_not_exist" }), (error: unknown) => {
        assert.ok(error instanceof RpcError);
        assert.equal(error.code, THREAD_NOT_FOUND);
        assert.equal(error.method, "thread/read");
        assert.match(error.message, /not found/i);
        assert.match(String(error), /^RpcError: thread\/read: -32010 /);
        return true;
      });
      await assert.rejects(
        client.runTurn("thread_does_not_exist", "hello"),
        (error: unknown) => error instanceof RpcError && error.code === THREAD_NOT_FOUND,
      );
      // The connection is still fine.
      const listed = await client.threadList({ identity: IDENTITY });
      assert.ok(Array.isArray(listed.data));
    });
  });

  test("a request that gets no answer in time rejects; the late answer is ignored", T, async () => {
    await withClient(harness, {}, async (client) => {
      const pid = harness.serverPid(client);
      process.kill(pid, "SIGSTOP"); // the server cannot answer while stopped
      try {
        const started = Date.now();
        await assert.rejects(
          client.threadList({ identity: IDENTITY }, { timeoutMs: 300 }),
          (error: unknown) => error instanceof RequestTimeoutError && error.method === "thread/list",
        );
        assert.ok(Date.now() - started < 2000);
      } finally {
        process.kill(pid, "SIGCONT");
      }
      const listed = await client.threadList({ identity: IDENTITY }, { timeoutMs: 10_000 });
      assert.ok(Array.isArray(listed.data));
      assert.equal(client.connected, true);
    });
  });

  test("close(): later requests reject, close is idempotent", T, async () => {
    const client = await harness.open();
    await client.close();
    await client.close();
    assert.equal(client.connected, false);
    assert.equal(await client.closed, null);
    await assert.rejects(client.threadList({ identity: IDENTITY }), { name: "ClientClosedError" });
  });
}
