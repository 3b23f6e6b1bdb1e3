/**
 * The two ways to reach a server: a child process over stdio (JSON lines), or
 * WebSocket (one JSON-RPC message per text frame, with the `ws` package).
 */

import { spawn as spawnProcess, type ChildProcess } from "node:child_process";
import WebSocket from "ws";

import { ConnectFailedError, ConnectionLostError } from "./errors.js";

import { MAX_FRAME_BYTES, type Transport, type TransportEvents } from "./transport_contract.js";

export { MAX_FRAME_BYTES, type Transport, type TransportEvents };

/**
 * Where a spawned server's stderr goes: `"inherit"` passes it through,
 * `"pipe"` keeps its last 200 lines (for error messages, `stderrText`) and
 * hands each line to `onStderr`, `"ignore"` drops it.
 */
export type StderrMode = "inherit" | "pipe" | "ignore";

export interface StdioOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  stderr?: StderrMode;
  /** Each stderr line, with `stderr: "pipe"`. */
  onStderr?: (line: string) => void;
  /** How long `close()` waits for the process to exit after closing its stdin, then after SIGTERM (ms, default 5000). */
  closeTimeoutMs?: number;
  /** Run the server in its own process group, so a terminal's Ctrl-C reaches only this process (default true; ignored on Windows). */
  detached?: boolean;
}

function waitFor(emitterDone: Promise<void>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    void emitterDone.then(() => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/** JSON lines over a child process's stdin/stdout (one client per process). */
export class StdioTransport implements Transport {
  readonly kind = "stdio" as const;
  readonly process: ChildProcess;
  readonly closeTimeoutMs: number;
  private readonly stderrLines: string[] = [];
  private events: TransportEvents | undefined;
  private buffer = "";
  private closing = false;
  private ended = false;
  private readonly exited: Promise<void>;

  private constructor(child: ChildProcess, options: StdioOptions) {
    this.process = child;
    this.closeTimeoutMs = options.closeTimeoutMs ?? 5000;
    // "close": the process exited and its stdio streams are done.
    this.exited = new Promise((resolve) => child.once("close", () => resolve()));
  }

  /** Spawn `command args`; rejects with `ConnectFailedError` if it cannot be started. */
  static start(command: string, args: readonly string[], options: StdioOptions = {}): Promise<StdioTransport> {
    const stderr = options.stderr ?? "inherit";
    return new Promise((resolve, reject) => {
      let child: ChildProcess;
      try {
        child = spawnProcess(command, [...args], {
          cwd: options.cwd,
          env: options.env,
          stdio: ["pipe", "pipe", stderr],
          detached: (options.detached ?? true) && process.platform !== "win32",
          windowsHide: true,
        });
      } catch (error) {
        reject(new ConnectFailedError(`could not start ${JSON.stringify(command)}: ${String(error)}`, true));
        return;
      }
      const onError = (error: Error) => {
        reject(new ConnectFailedError(`could not start ${JSON.stringify(command)}: ${error.message}`, true));
      };
      child.once("error", onError);
      child.once("spawn", () => {
        child.off("error", onError);
        const transport = new StdioTransport(child, options);
        // Errors after spawning (EPIPE on stdin and the like) surface as "close".
        child.on("error", () => undefined);
        child.stdin?.on("error", () => undefined);
        transport.readStderr(options.onStderr);
        resolve(transport);
      });
    });
  }

  /** The last captured stderr lines (`stderr: "pipe"` only). */
  get stderrText(): string {
    return this.stderrLines.join("\n");
  }

  private readStderr(onStderr: ((line: string) => void) | undefined): void {
    const stream = this.process.stderr;
    if (!stream) return;
    stream.setEncoding("utf8");
    let partial = "";
    const take = (line: string) => {
      this.stderrLines.push(line);
      if (this.stderrLines.length > 200) this.stderrLines.shift();
      if (onStderr) {
        try {
          onStderr(line);
        } catch {
          // a failing callback must not stop the reader
        }
      }
    };
    stream.on("data", (chunk: string) => {
      const lines = (partial + chunk).split("\n");
      partial = lines.pop() ?? "";
      for (const line of lines) take(line.replace(/\r$/, ""));
    });
    stream.on("end", () => {
      if (partial) take(partial);
      partial = "";
    });
  }

  attach(events: TransportEvents): void {
    this.events = events;
    const stdout = this.process.stdout;
    if (!stdout) throw new Error("the child has no stdout pipe");
    stdout.setEncoding("utf8");
    stdout.on("data", (chunk: string) => this.onData(chunk));
    void this.exited.then(() => this.end());
  }

  private onData(chunk: string): void {
    this.buffer += chunk;
    if (this.buffer.length > MAX_FRAME_BYTES && !this.buffer.includes("\n")) {
      this.buffer = "";
      this.end(new ConnectionLostError(`frame over ${MAX_FRAME_BYTES} bytes from server`));
      void this.close();
      return;
    }
    let newline: number;
    while ((newline = this.buffer.indexOf("\n")) !== -1) {
      const line = this.buffer.slice(0, newline).trim();
      this.buffer = this.buffer.slice(newline + 1);
      if (line && !this.ended) this.events?.frame(line);
    }
  }

  private gone(): ConnectionLostError {
    const code = this.process.exitCode;
    const signal = this.process.signalCode;
    const status =
      code !== null ? `exited with code ${code}` : signal !== null ? `was killed by ${signal}` : "closed its output";
    const tail = this.stderrLines.filter((line) => line.trim()).slice(-5);
    const detail = tail.length ? `; stderr: ${tail.join(" | ")}` : "";
    return new ConnectionLostError(`server process ${status}${detail}`);
  }

  private end(error?: ConnectionLostError): void {
    if (this.ended) return;
    this.ended = true;
    this.events?.closed(error ?? this.gone());
  }

  send(frame: string): Promise<void> {
    const stdin = this.process.stdin;
    if (!stdin || this.closing || this.ended || stdin.destroyed || !stdin.writable) {
      return Promise.reject(this.gone());
    }
    return new Promise((resolve, reject) => {
      stdin.write(frame + "\n", "utf8", (error) => (error ? reject(this.gone()) : resolve()));
    });
  }

  /** Close stdin (the server finishes and exits), wait, then SIGTERM, then SIGKILL. */
  async close(): Promise<void> {
    if (!this.closing) {
      this.closing = true;
      this.process.stdin?.end();
    }
    if (this.process.exitCode !== null || this.process.signalCode !== null) {
      await this.exited;
      return;
    }
    if (await waitFor(this.exited, this.closeTimeoutMs)) return;
    this.process.kill("SIGTERM");
    if (await waitFor(this.exited, this.closeTimeoutMs)) return;
    this.process.kill("SIGKILL");
    await waitFor(this.exited, this.closeTimeoutMs);
  }
}

/** `url` with the default `/ws` path and `?token=` added. */
export function websocketUrl(url: string, token?: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConnectFailedError(`invalid URL: ${JSON.stringify(url)}`, true);
  }
  if (parsed.protocol !== "ws:" && parsed.protocol !== "wss:") {
    throw new ConnectFailedError(`expected a ws:// or wss:// URL, got ${JSON.stringify(url)}`, true);
  }
  if (parsed.pathname === "" || parsed.pathname === "/") parsed.pathname = "/ws";
  if (token !== undefined) parsed.searchParams.set("token", token);
  return parsed.toString();
}

export interface WebSocketOptions {
  /** Milliseconds to wait for the connection to open (default 10000). */
  openTimeoutMs?: number;
  /** Extra HTTP headers for the upgrade request (e.g. `Origin`). */
  headers?: Record<string, string>;
}

/** One JSON-RPC message per WebSocket text frame. */
export class WebSocketTransport implements Transport {
  readonly kind = "websocket" as const;
  readonly ws: WebSocket;
  private events: TransportEvents | undefined;
  private ended = false;
  private readonly closedPromise: Promise<void>;

  private constructor(ws: WebSocket) {
    this.ws = ws;
    this.closedPromise = new Promise((resolve) => ws.once("close", () => resolve()));
  }

  /** Connect to a full URL (see `websocketUrl`); rejects with `ConnectFailedError`. */
  static open(url: string, options: WebSocketOptions = {}): Promise<WebSocketTransport> {
    const openTimeoutMs = options.openTimeoutMs ?? 10_000;
    return new Promise((resolve, reject) => {
      let ws: WebSocket;
      try {
        ws = new WebSocket(url, {
          maxPayload: MAX_FRAME_BYTES,
          handshakeTimeout: openTimeoutMs,
          headers: options.headers,
          perMessageDeflate: false,
        });
      } catch (error) {
        reject(new ConnectFailedError(`invalid URL: ${String(error)}`, true));
        return;
      }
      let settled = false;
      const fail = (error: ConnectFailedError) => {
        if (settled) return;
        settled = true;
        ws.terminate();
        reject(error);
      };
      ws.once("unexpected-response", (_request, response) => {
        const status = response.statusCode ?? 0;
        response.resume();
        fail(
          new ConnectFailedError(
            `server refused the WebSocket upgrade with HTTP ${status}`,
            status === 401 || status === 403 || status === 404,
          ),
        );
      });
      ws.once("error", (error) => fail(new ConnectFailedError(`could not connect: ${error.message}`)));
      ws.once("open", () => {
        if (settled) return;
        settled = true;
        ws.removeAllListeners("error");
        ws.on("error", () => undefined); // reported through "close"
        resolve(new WebSocketTransport(ws));
      });
    });
  }

  attach(events: TransportEvents): void {
    this.events = events;
    this.ws.on("message", (data, isBinary) => {
      if (this.ended) return;
      const text = Array.isArray(data)
        ? Buffer.concat(data).toString("utf8")
        : Buffer.isBuffer(data)
          ? data.toString("utf8")
          : Buffer.from(new Uint8Array(data)).toString("utf8");
      if (!isBinary || text) this.events?.frame(text);
    });
    this.ws.once("close", (code, reason) => {
      if (this.ended) return;
      this.ended = true;
      const why = reason.length ? `${code} ${reason.toString("utf8")}` : `${code}`;
      this.events?.closed(new ConnectionLostError(`WebSocket closed (${why})`));
    });
  }

  send(frame: string): Promise<void> {
    if (this.ws.readyState !== WebSocket.OPEN) {
      return Promise.reject(new ConnectionLostError("WebSocket is not open"));
    }
    return new Promise((resolve, reject) => {
      this.ws.send(frame, (error) =>
        error ? reject(new ConnectionLostError(`WebSocket send failed: ${error.message}`)) : resolve(),
      );
    });
  }

  async close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    if (this.ws.readyState !== WebSocket.CLOSING) this.ws.close(1000);
    if (!(await waitFor(this.closedPromise, 2000))) {
      this.ws.terminate();
      await waitFor(this.closedPromise, 1000);
    }
  }
}
