/**
 * The browser's stand-in for `transport.ts`: a WebSocket transport on the
 * browser's own `WebSocket` (no `ws`, no child processes). The browser build
 * (`npm run build:browser`, scripts/browser.mjs) bundles `client.ts` with this
 * module in place of `transport.ts`, so `AppServerClient.connect(url, {token})`
 * works unchanged in a page. Browsers cannot set headers on a WebSocket: the
 * token travels as `?token=` in the WebSocket URL (never in the page's URL).
 */

import { ConnectFailedError, ConnectionLostError } from "./errors.js";

import { MAX_FRAME_BYTES, type Transport, type TransportEvents } from "./transport_contract.js";

export { MAX_FRAME_BYTES, type Transport, type TransportEvents };

export type StderrMode = "inherit" | "pipe" | "ignore";

export interface StdioOptions {
  cwd?: string;
  env?: Record<string, string | undefined>;
  stderr?: StderrMode;
  onStderr?: (line: string) => void;
  closeTimeoutMs?: number;
  detached?: boolean;
}

export interface WebSocketOptions {
  /** Milliseconds to wait for the connection to open (default 10000). */
  openTimeoutMs?: number;
  /** Ignored in a browser (a page cannot set WebSocket headers). */
  headers?: Record<string, string>;
}

/** The part of the DOM's WebSocket this module uses. */
interface DomWebSocket {
  readonly readyState: number;
  onopen: ((event: unknown) => void) | null;
  onerror: ((event: unknown) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}
type DomWebSocketConstructor = new (url: string) => DomWebSocket;

const OPEN = 1;
const CLOSED = 3;

function domWebSocket(): DomWebSocketConstructor {
  const ctor = (globalThis as { WebSocket?: DomWebSocketConstructor }).WebSocket;
  if (!ctor) throw new ConnectFailedError("this environment has no WebSocket", true);
  return ctor;
}

/** No child processes in a browser. */
export class StdioTransport implements Transport {
  readonly kind = "stdio" as const;
  static start(command: string, _args: readonly string[], _options: StdioOptions = {}): Promise<StdioTransport> {
    return Promise.reject(new ConnectFailedError(`cannot start ${JSON.stringify(command)} in a browser`, true));
  }
  attach(): void {}
  send(): Promise<void> {
    return Promise.reject(new ConnectionLostError("no stdio in a browser"));
  }
  async close(): Promise<void> {}
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

/**
 * One JSON-RPC message per WebSocket text frame, on the browser's WebSocket.
 * A refused upgrade (401, 403, 429) is not visible to a page: it fails as
 * `ConnectFailedError` ("could not connect"), and reconnects retry it.
 */
export class WebSocketTransport implements Transport {
  readonly kind = "websocket" as const;
  readonly ws: DomWebSocket;
  private events: TransportEvents | undefined;
  private ended = false;
  private readonly closedPromise: Promise<void>;
  private resolveClosed!: () => void;

  private constructor(ws: DomWebSocket) {
    this.ws = ws;
    this.closedPromise = new Promise((resolve) => {
      this.resolveClosed = resolve;
    });
    ws.onclose = (event) => {
      this.resolveClosed();
      if (this.ended) return;
      this.ended = true;
      const why = event.reason ? `${event.code} ${event.reason}` : `${event.code}`;
      this.events?.closed(new ConnectionLostError(`WebSocket closed (${why})`));
    };
    ws.onmessage = (event) => {
      if (!this.ended && typeof event.data === "string") this.events?.frame(event.data);
    };
  }

  /** Connect to a full URL (see `websocketUrl`); rejects with `ConnectFailedError`. */
  static open(url: string, options: WebSocketOptions = {}): Promise<WebSocketTransport> {
    const openTimeoutMs = options.openTimeoutMs ?? 10_000;
    return new Promise((resolve, reject) => {
      let ws: DomWebSocket;
      try {
        ws = new (domWebSocket())(url);
      } catch (error) {
        reject(new ConnectFailedError(`invalid URL: ${String(error)}`, true));
        return;
      }
      let settled = false;
      const timer = setTimeout(() => fail(new ConnectFailedError(`no answer within ${openTimeoutMs} ms`)), openTimeoutMs);
      const fail = (error: ConnectFailedError) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        ws.onopen = ws.onerror = ws.onclose = null;
        try {
          ws.close();
        } catch {
          // already closed
        }
        reject(error);
      };
      ws.onerror = () => fail(new ConnectFailedError("could not connect (refused, wrong token or origin?)"));
      ws.onclose = () => fail(new ConnectFailedError("could not connect (refused, wrong token or origin?)"));
      ws.onopen = () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        ws.onerror = null;
        resolve(new WebSocketTransport(ws));
      };
    });
  }

  attach(events: TransportEvents): void {
    this.events = events;
  }

  send(frame: string): Promise<void> {
    if (this.ws.readyState !== OPEN) return Promise.reject(new ConnectionLostError("WebSocket is not open"));
    try {
      this.ws.send(frame);
    } catch (error) {
      return Promise.reject(new ConnectionLostError(`WebSocket send failed: ${String(error)}`));
    }
    return Promise.resolve();
  }

  async close(): Promise<void> {
    if (this.ws.readyState === CLOSED) return;
    this.ws.close(1000);
    await Promise.race([this.closedPromise, new Promise((resolve) => setTimeout(resolve, 2000))]);
  }
}
