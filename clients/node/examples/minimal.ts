// The minimal Node client from the DotCraft AppServer protocol page, against appserver:
// spawn the server over stdio, initialize, initialized, thread/start, turn/start, and
// print every message of the stream. It uses no library, only node:child_process and
// node:readline, to show the wire protocol itself (src/ is the full client).
//
// Changes from the page: the server is found as below, the prompt may be given as an
// argument, approval requests are answered (declined), the example exits when the turn
// ends, and the agent works in a temporary workspace that is removed at exit (so running
// the example leaves no `.craft/` behind).
//
// The server command: $APPSERVER_COMMAND (e.g. "appserver app-server"), else
// `$APPSERVER_BIN app-server`, else this repository's `.venv/bin/appserver app-server`
// (what `make` builds), else `appserver app-server` from PATH. The workspace:
// $APPSERVER_WORKSPACE, else a fresh temporary directory.
//
//   npm run example [-- "your prompt"]     (builds, then runs dist/examples/minimal.js)
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../../.."); // from dist/examples
const VENV_APPSERVER = join(REPO_ROOT, ".venv", "bin", "appserver");

function serverCommand(): string[] {
  if (process.env.APPSERVER_COMMAND) return process.env.APPSERVER_COMMAND.split(/\s+/).filter(Boolean);
  if (process.env.APPSERVER_BIN) return [process.env.APPSERVER_BIN, "app-server"];
  return [existsSync(VENV_APPSERVER) ? VENV_APPSERVER : "appserver", "app-server"];
}

const [command = "appserver", ...args] = serverCommand();
const prompt = process.argv[2] ?? "Summarize this repository.";

const ownWorkspace = !process.env.APPSERVER_WORKSPACE;
const workspacePath = process.env.APPSERVER_WORKSPACE ?? mkdtempSync(join(tmpdir(), "appserver-example-"));
if (ownWorkspace) {
  process.on("exit", () => rmSync(workspacePath, { recursive: true, force: true }));
}
console.error(`workspace: ${workspacePath}`);
if (!args.includes("--workspace")) args.push("--workspace", workspacePath);

const proc = spawn(command, args, {
  cwd: workspacePath,
  stdio: ["pipe", "pipe", "inherit"],
});

const rl = readline.createInterface({ input: proc.stdout });
let nextId = 0;
let threadId: string | undefined;

function send(method: string, params?: unknown, id = ++nextId) {
  proc.stdin.write(
    JSON.stringify({ jsonrpc: "2.0", id, method, params: params ?? {} }) + "\n",
  );
  return id;
}

function notify(method: string, params?: unknown) {
  proc.stdin.write(
    JSON.stringify({ jsonrpc: "2.0", method, params: params ?? {} }) + "\n",
  );
}

function reply(id: unknown, result: unknown) {
  proc.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, result }) + "\n");
}

rl.on("line", (line) => {
  const message = JSON.parse(line);
  console.log("server:", message);

  if (message.id === 0 && message.result) {
    notify("initialized");
    send("thread/start", {
      identity: {
        channelName: "custom",
        userId: "local-user",
        channelContext: `workspace:${workspacePath}`,
        workspacePath,
      },
      historyMode: "server",
    });
    return;
  }

  if (message.result?.thread?.id && !threadId) {
    threadId = message.result.thread.id;
    send("turn/start", {
      threadId,
      input: [{ type: "text", text: prompt }],
    });
    return;
  }

  // A server-initiated request (it has a method and an id): this client has no
  // approval UI, so it declines; anything else it does not know.
  if (message.method && message.id !== undefined) {
    if (message.method === "item/approval/request") {
      reply(message.id, { decision: "decline" });
    } else {
      proc.stdin.write(
        JSON.stringify({
          jsonrpc: "2.0",
          id: message.id,
          error: { code: -32601, message: `Method not found: ${message.method}` },
        }) + "\n",
      );
    }
    return;
  }

  // The turn is over: close stdin, and the server exits.
  if (["turn/completed", "turn/failed", "turn/cancelled"].includes(message.method)) {
    proc.stdin.end();
  }
});

proc.on("error", (error) => {
  console.error(`could not start ${command}: ${error.message} (set APPSERVER_BIN or APPSERVER_COMMAND; see README.md)`);
  process.exitCode = 1;
});
proc.on("exit", (code) => {
  if (code) process.exitCode = code;
});

send(
  "initialize",
  {
    clientInfo: {
      name: "custom-client",
      title: "Custom Client",
      version: "0.1.0",
    },
    capabilities: {
      approvalSupport: true,
      streamingSupport: true,
      commandExecutionStreaming: true,
      toolExecutionLifecycle: true,
      configChange: true,
    },
  },
  0,
);
