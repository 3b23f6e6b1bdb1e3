/**
 * What every transport gives the client: `transport.ts` (Node: stdio and `ws`) and
 * `browser_transport.ts` (the browser's WebSocket, bundled in its place) share it.
 */

import type { ConnectionLostError } from "./errors.js";

export const MAX_FRAME_BYTES = 64 * 1024 * 1024;

/** What the client is told about the connection. */
export interface TransportEvents {
  /** One complete frame (a JSON text). */
  frame(text: string): void;
  /** The connection ended (called once). */
  closed(error: ConnectionLostError): void;
}

/** What the client needs from a connection. */
export interface Transport {
  readonly kind: "stdio" | "websocket";
  /** Start delivering frames to `events` (called once, right after opening). */
  attach(events: TransportEvents): void;
  /** Write one frame; rejects with `ConnectionLostError` if the peer is gone. */
  send(frame: string): Promise<void>;
  /** Close the connection (idempotent); resolves once it is closed. */
  close(): Promise<void>;
}
