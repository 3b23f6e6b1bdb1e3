// The IDE's files: onReadTextFile / onWriteTextFile serve the file tools from the
// editor's buffers (ext/acp/fs/*), over stdio and WebSocket; the capability is advertised.
import assert from "node:assert/strict";
import { readFile, realpath, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { AppServerClient, type Item, type ReadTextFileParams, type WriteTextFileParams } from "../src/index.js";
import { IDENTITY, spawnClient, startWsServer, workspace, type WsServer } from "./helpers.js";

function toolResult(items: Item[]): Record<string, unknown> {
  const found = items.filter((item) => item.type === "toolResult");
  assert.equal(found.length, 1);
  return (found[0]!.payload ?? {}) as Record<string, unknown>;
}

/** An editor whose unsaved buffers (absolute path -> text) differ from the disk. */
class Buffers {
  readonly reads: ReadTextFileParams[] = [];
  readonly writes: WriteTextFileParams[] = [];
  constructor(readonly buffers: Map<string, string>) {}
  read = (params: ReadTextFileParams): string => {
    this.reads.push(params);
    return this.buffers.get(params.path) ?? "";
  };
  write = async (params: WriteTextFileParams): Promise<void> => {
    this.writes.push(params);
    this.buffers.set(params.path, params.content);
  };
}

async function prepare(dir: string): Promise<{ path: string; editor: Buffers }> {
  await writeFile(join(dir, "x.txt"), "on disk\n");
  const path = join(await realpath(dir), "x.txt");
  return { path, editor: new Buffers(new Map([[path, "in the buffer\n"]])) };
}

async function scenario(client: AppServerClient, dir: string, path: string, editor: Buffers): Promise<void> {
  assert.deepEqual(client.initializeCapabilities().acpExtensions, { fsReadTextFile: true, fsWriteTextFile: true });
  const { thread } = await client.threadStart({ identity: IDENTITY });
  const read = await client.runTurn(thread.id, '?tool read_file {"path": "x.txt"}');
  assert.equal(read.status, "completed");
  const result = toolResult(read.items);
  assert.equal(result.success, true);
  assert.equal(result.result, "in the buffer\n");
  assert.deepEqual(editor.reads, [{ threadId: thread.id, path }]);

  const written = await client.runTurn(thread.id, '?tool write_file {"path": "x.txt", "content": "written\\n"}');
  assert.equal(written.status, "completed");
  assert.equal(toolResult(written.items).success, true);
  assert.equal(editor.buffers.get(path), "written\n");
  assert.equal(await readFile(join(dir, "x.txt"), "utf8"), "on disk\n");
}

describe("editor files", () => {
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

  test("onReadTextFile / onWriteTextFile over WebSocket", { timeout: 30_000 }, async () => {
    const { path, editor } = await prepare(dir.path);
    const client = await AppServerClient.connect(server.url, {
      readTextFileHandler: editor.read,
      writeTextFileHandler: editor.write,
      approvalHandler: () => "accept",
    });
    try {
      await scenario(client, dir.path, path, editor);
    } finally {
      await client.close();
    }
  });

  test("onReadTextFile / onWriteTextFile over stdio", { timeout: 30_000 }, async () => {
    const ws = await workspace();
    const { path, editor } = await prepare(ws.path);
    const client = await spawnClient(ws.path, {
      readTextFileHandler: editor.read,
      writeTextFileHandler: editor.write,
      approvalHandler: () => "accept",
    });
    try {
      await scenario(client, ws.path, path, editor);
    } finally {
      await client.close();
      await ws.remove();
    }
  });
});
