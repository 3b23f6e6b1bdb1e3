/** Errors the client rejects with, and the protocol's error codes. */

// JSON-RPC's own codes and the ones the server adds (see docs/protocol.md).
export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;
export const METHOD_NOT_FOUND = -32601;
export const INVALID_PARAMS = -32602;
export const INTERNAL_ERROR = -32603;
export const SERVER_OVERLOADED = -32001;
export const NOT_INITIALIZED = -32002;
export const ALREADY_INITIALIZED = -32003;
export const THREAD_NOT_FOUND = -32010;
export const THREAD_NOT_ACTIVE = -32011;
export const TURN_IN_PROGRESS = -32012;
export const TURN_NOT_FOUND = -32013;
export const TURN_NOT_RUNNING = -32014;

/** Base class of every error this package rejects with. */
export class AppServerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/**
 * The server answered a request with a JSON-RPC error object: `code`, `message`
 * and `data` are the error object's; `method` is the request's.
 */
export class RpcError extends AppServerError {
  readonly code: number;
  readonly data: unknown;
  readonly method: string;

  constructor(code: number, message: string, data?: unknown, method = "") {
    super(message);
    this.code = code;
    this.data = data;
    this.method = method;
  }

  /** `thread/read: -32010 Thread not found: x` (plus `data.detail` when there is one). */
  override toString(): string {
    const data = this.data;
    let detail = "";
    if (data && typeof data === "object" && typeof (data as { detail?: unknown }).detail === "string") {
      detail = ` (${(data as { detail: string }).detail})`;
    }
    return `${this.name}: ${this.method ? `${this.method}: ` : ""}${this.code} ${this.message}${detail}`;
  }
}

/** No answer within the request's timeout (or the turn's, for `runTurn`). */
export class RequestTimeoutError extends AppServerError {
  readonly method: string;
  readonly timeoutMs: number;

  constructor(method: string, timeoutMs: number) {
    super(`${method}: no answer within ${timeoutMs} ms`);
    this.method = method;
    this.timeoutMs = timeoutMs;
  }
}

/**
 * The connection to the server went away. Requests in flight when it happened
 * reject with it (the client cannot know whether the server acted on them); so
 * does everything once the client gave up reconnecting, and everything at once
 * when a spawned (stdio) server exits.
 */
export class ConnectionLostError extends AppServerError {}

/** The client was closed with `close()`. */
export class ClientClosedError extends AppServerError {}

/**
 * The server could not be started or reached, or refused the connection.
 * `permanent` is true when retrying cannot help (HTTP 401/403/404, a bad URL,
 * a command that does not exist).
 */
export class ConnectFailedError extends AppServerError {
  readonly permanent: boolean;

  constructor(message: string, permanent = false) {
    super(message);
    this.permanent = permanent;
  }
}
