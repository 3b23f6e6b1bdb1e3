// Shared by the tests: the real server (from the repository's .venv), temp workspaces.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { AppServerClient, type SpawnOptions } from "../src/index.js";

const HERE = dirname(fileURLToPath(import.meta.url)); // clients/node/dist/test
export const PACKAGE_ROOT = resolve(HERE, "../..");
export const REPO_ROOT = resolve(PACKAGE_ROOT, "../..");
/** The server executable: $APPSERVER_BIN, else the repository's .venv (what `make test` builds). */
export const APPSERVER = process.env.APPSERVER_BIN ?? join(REPO_ROOT, ".venv", "bin", "appserver");

/** A fresh workspace directory; `remove()` deletes it. */
export async function workspace(): Promise<{ path: string; remove(): Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), "appserver-node-test-"));
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}

/** A client over stdio to a server spawned for `dir`. */
export function spawnClient(dir: string, options: SpawnOptions = {}): Promise<AppServerClient> {
  return AppServerClient.spawn(APPSERVER, ["app-server", "--workspace", dir, "--log-level", "warning"], {
    stderr: "pipe",
    ...options,
  });
}

export interface WsServer {
  url: string;
  process: ChildProcess;
  stderr(): string;
  stop(): Promise<void>;
}

/** A WebSocket server for `dir` on a free port; the URL comes from its stderr. */
export function startWsServer(dir: string, extraArgs: string[] = []): Promise<WsServer> {
  const child = spawn(
    APPSERVER,
    ["app-server", "--listen", "ws://127.0.0.1:0", "--workspace", dir, "--log-level", "warning", ...extraArgs],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let text = "";
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    }
  };
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      void stop();
      reject(new Error(`server did not report its address: ${text}`));
    }, 15_000);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}: ${text}`));
    });
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (chunk: string) => {
      text += chunk;
      const match = /appserver: listening on (ws:\/\/\S+)/.exec(text);
      if (match) {
        clearTimeout(timer);
        resolvePromise({ url: match[1]!, process: child, stderr: () => text, stop });
      }
    });
  });
}

export const IDENTITY = { channelName: "node-test", userId: "tester" };
