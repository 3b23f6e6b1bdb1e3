// The client's side of the protocol against a scripted WebSocket peer (no real server):
// server->client requests, approval answers, overload retries, odd frames.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { WebSocketServer, type WebSocket } from "ws";

import { AppServerClient, RpcError, SERVER_OVERLOADED, type ClientOptions } from "../src/index.js";

type Message = Record<string, any>;

/** A fake server: answers initialize, then lets the test script the rest. */
class Peer {
  readonly received: Message[] = [];
  private waiters: Array<{ match: (m: Message) => boolean; resolve: (m: Message) => void }> = [];
  onRequest: (message: Message, socket: WebSocket) => void = () => undefined;
  socket!: WebSocket;

  handle(socket: WebSocket, raw: string): void {
    this.socket = socket;
    const message = JSON.parse(raw) as Message;
    this.received.push(message);
    for (const waiter of [...this.waiters]) {
      if (waiter.match(message)) {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        waiter.resolve(message);
      }
    }
    if (message.method === "initialize") {
      socket.send(
        JSON.stringify({
          jsonrpc: "2.0",
          id: message.id,
          result: { serverInfo: { name: "fake", version: "0" }, capabilities: { approvalFlow: true } },
        }),
      );
    } else if (message.method !== undefined && message.id !== undefined) {
      this.onRequest(message, socket);
    }
  }

  next(match: (m: Message) => boolean): Promise<Message> {
    const found = this.received.find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => this.waiters.push({ match, resolve }));
  }

  /** Send a server->client request and resolve with the client's reply. */
  ask(id: number, method: string, params: unknown): Promise<Message> {
    this.socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    return this.next((m) => m.id === id && m.method === undefined);
  }
}

const APPROVAL = {
  threadId: "thread_1",
  turnId: "turn_1",
  itemId: "item_1",
  requestId: "req_1",
  approvalType: "shell",
  operation: "ls",
  target: ".",
  scopeKey: "shell:*",
  reason: "test",
};

describe("protocol (scripted peer)", () => {
  let server: WebSocketServer;
  let url: string;
  let peer: Peer;
  const quiet = { logger: { warn: () => undefined } };

  before(async () => {
    server = new WebSocketServer({ host: "127.0.0.1", port: 0, path: "/ws" });
    await new Promise((resolve) => server.once("listening", resolve));
    const address = server.address();
    assert.ok(typeof address === "object" && address);
    url = `ws://127.0.0.1:${address.port}/ws`;
    server.on("connection", (socket) => {
      socket.on("message", (data) => peer.handle(socket, data.toString()));
    });
  });

  after(async () => {
    for (const client of server.clients) client.terminate();
    await new Promise((resolve) => server.close(resolve));
  });

  async function open(options: ClientOptions = {}): Promise<AppServerClient> {
    peer = new Peer();
    return AppServerClient.connect(url, { reconnect: false, ...quiet, ...options });
  }

  test("handshake: initialize with clientInfo appserver-node, then initialized", async () => {
    const client = await open();
    try {
      const init = await peer.next((m) => m.method === "initialize");
      assert.equal(init.params.clientInfo.name, "appserver-node");
      assert.equal(typeof init.params.clientInfo.version, "string");
      await peer.next((m) => m.method === "initialized");
      assert.equal(client.serverInfo?.name, "fake");
    } finally {
      await client.close();
    }
  });

  test("unknown server requests get -32601; setRequestHandler answers", async () => {
    const client = await open();
    try {
      await peer.next((m) => m.method === "initialized");
      const unknown = await peer.ask(100, "something/new", {});
      assert.equal(unknown.error.code, -32601);
      client.setRequestHandler("something/new", async (params) => ({ echoed: params }));
      const handled = await peer.ask(101, "something/new", { a: 1 });
      assert.deepEqual(handled.result, { echoed: { a: 1 } });
      client.setRequestHandler("something/new", () => {
        throw new Error("boom");
      });
      const failed = await peer.ask(102, "something/new", {});
      assert.equal(failed.error.code, -32603);
    } finally {
      await client.close();
    }
  });

  test("channel tool and editor file handlers: typed over raw, failures, capabilities", async () => {
    const client = await open({ readTextFileHandler: () => "text" });
    try {
      const init = await peer.next((m) => m.method === "initialize");
      assert.deepEqual(init.params.capabilities.acpExtensions, { fsReadTextFile: true });
      await peer.next((m) => m.method === "initialized");
      const tool = "ext/channel/toolCall";
      const read = "ext/acp/fs/readTextFile";
      const write = "ext/acp/fs/writeTextFile";
      assert.deepEqual((await peer.ask(200, tool, {})).result, {
        success: false,
        errorCode: "noHandler",
        errorMessage: "no handler",
      });
      assert.deepEqual((await peer.ask(201, read, { path: "/a" })).result, { content: "text" });
      assert.equal((await peer.ask(202, write, {})).error.code, -32601);

      client.onReadTextFile(null);
      client.setRequestHandler(tool, () => ({ raw: true }));
      client.setRequestHandler(read, () => ({ content: "raw" }));
      assert.deepEqual((await peer.ask(203, tool, {})).result, { raw: true });
      assert.deepEqual((await peer.ask(204, read, {})).result, { content: "raw" });

      client.onChannelToolCall(async (params) => ({ success: true, structuredResult: params.tool }));
      client.onReadTextFile(async (params) => ({ content: params.path }));
      client.onWriteTextFile(() => {});
      assert.deepEqual((await peer.ask(205, tool, { tool: "t" })).result, { success: true, structuredResult: "t" });
      assert.deepEqual((await peer.ask(206, read, { path: "/b" })).result, { content: "/b" });
      assert.deepEqual((await peer.ask(207, write, { path: "/b", content: "" })).result, {});

      const boom = (): never => {
        throw new Error("boom");
      };
      client.onChannelToolCall(boom);
      client.onReadTextFile(boom);
      client.onWriteTextFile(boom);
      const failed = (await peer.ask(208, tool, {})).result;
      assert.equal(failed.errorCode, "handlerFailed");
      assert.equal((await peer.ask(209, read, {})).error.code, -32603);
      assert.equal((await peer.ask(210, write, {})).error.code, -32603);
      client.onReadTextFile(() => 42 as unknown as string);
      assert.equal((await peer.ask(211, read, {})).error.code, -32603);
    } finally {
      await client.close();
    }
  });

  test("approvals: none -> decline; handler answers; bad answers and throws decline", async () => {
    const client = await open();
    try {
      await peer.next((m) => m.method === "initialized");
      assert.deepEqual((await peer.ask(1, "item/approval/request", APPROVAL)).result, { decision: "decline" });
      client.onApproval((request) => (request.operation === "ls" ? "acceptAlways" : "decline"));
      assert.deepEqual((await peer.ask(2, "item/approval/request", APPROVAL)).result, { decision: "acceptAlways" });
      client.onApproval(async () => ({ decision: "cancel" }));
      assert.deepEqual((await peer.ask(3, "item/approval/request", APPROVAL)).result, { decision: "cancel" });
      client.onApproval(() => "yes please");
      assert.deepEqual((await peer.ask(4, "item/approval/request", APPROVAL)).result, { decision: "decline" });
      client.onApproval(() => {
        throw new Error("no UI");
      });
      assert.deepEqual((await peer.ask(5, "item/approval/request", APPROVAL)).result, { decision: "decline" });
      client.onApproval(null);
      assert.deepEqual((await peer.ask(6, "item/approval/request", APPROVAL)).result, { decision: "decline" });
    } finally {
      await client.close();
    }
  });

  test("-32001 Server overloaded is retried, other errors are not", async () => {
    const client = await open({ overloadRetries: 2 });
    try {
      let attempts = 0;
      peer.onRequest = (message, socket) => {
        attempts++;
        const overloaded = message.method === "model/list" && attempts < 3;
        socket.send(
          JSON.stringify(
            overloaded || message.method !== "model/list"
              ? {
                  jsonrpc: "2.0",
                  id: message.id,
                  error: overloaded
                    ? { code: SERVER_OVERLOADED, message: "Server overloaded; retry later." }
                    : { code: -32602, message: "Invalid params", data: { detail: "nope" } },
                }
              : { jsonrpc: "2.0", id: message.id, result: { models: [] } },
          ),
        );
      };
      const result = await client.modelList();
      assert.equal(attempts, 3);
      assert.deepEqual(result, { models: [] });
      attempts = 0;
      await assert.rejects(client.call("x/y", {}), (error: unknown) => {
        assert.ok(error instanceof RpcError);
        assert.equal(error.code, -32602);
        assert.deepEqual(error.data, { detail: "nope" });
        assert.equal(error.message, "Invalid params");
        assert.equal(String(error), "RpcError: x/y: -32602 Invalid params (nope)");
        return true;
      });
      assert.equal(attempts, 1);
    } finally {
      await client.close();
    }
  });

  test("non-JSON frames and unknown notifications do not break the client", async () => {
    const client = await open();
    try {
      await peer.next((m) => m.method === "initialized");
      const seen: string[] = [];
      client.onAny((event) => void seen.push(event.method));
      peer.socket.send("this is not json");
      peer.socket.send(JSON.stringify({ jsonrpc: "2.0", method: "future/thing", params: { threadId: "t", seq: 1 } }));
      peer.socket.send(JSON.stringify({ jsonrpc: "2.0", method: "future/thing", params: { threadId: "t", seq: 1 } }));
      peer.socket.send(JSON.stringify({ jsonrpc: "2.0", method: "future/thing", params: { threadId: "t", seq: 2 } }));
      peer.onRequest = (message, socket) =>
        socket.send(JSON.stringify({ jsonrpc: "2.0", id: message.id, result: { channels: [] } }));
      await client.channelList();
      assert.deepEqual(seen, ["future/thing", "future/thing"]);
      assert.equal(client.duplicatesDropped, 1);
      assert.equal(client.lastSeq("t"), 2);
    } finally {
      await client.close();
    }
  });

  test("a replay asked after broadcasts of the thread reaches the handlers", async () => {
    // The server answers thread/subscribe first, then replays from afterSeq in order,
    // leaving out the broadcast (seq 3) this connection already got.
    const client = await open();
    try {
      await peer.next((m) => m.method === "initialized");
      const seen: number[] = [];
      client.onAny((event) => void (event.seq !== undefined && seen.push(event.seq)));
      const event = (seq: number) =>
        JSON.stringify({ jsonrpc: "2.0", method: "thread/runtimeChanged", params: { threadId: "t", seq } });
      peer.socket.send(event(3));
      peer.onRequest = (message, socket) => {
        socket.send(JSON.stringify({ jsonrpc: "2.0", id: message.id, result: {} }));
        for (const seq of [1, 2, 4, 2, 5]) socket.send(event(seq));
      };
      await client.threadSubscribe({ threadId: "t", afterSeq: 0 });
      peer.socket.send(event(5));
      peer.socket.send(event(6));
      peer.onRequest = (message, socket) =>
        socket.send(JSON.stringify({ jsonrpc: "2.0", id: message.id, result: { models: [] } }));
      await client.modelList();
      assert.deepEqual(seen, [3, 1, 2, 4, 5, 6]);
      assert.equal(client.duplicatesDropped, 2); // a second 2 and a second 5
      assert.equal(client.lastSeq("t"), 6);
    } finally {
      await client.close();
    }
  });

  test("a connection lost without reconnect fails pending requests", async () => {
    const client = await open();
    await peer.next((m) => m.method === "initialized");
    peer.onRequest = (_message, socket) => socket.terminate();
    await assert.rejects(client.modelList(), { name: "ConnectionLostError" });
    assert.equal((await client.closed)?.name, "ConnectionLostError");
    await client.close();
  });
});
