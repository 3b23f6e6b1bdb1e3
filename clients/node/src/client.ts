/** The client: requests, notifications, approvals, turns, reconnects. */

import {
  GeneratedMethods,
  type ApprovalRequestParams,
  type ApprovalRequestResult,
  type ChannelToolCallParams,
  type ChannelToolCallResult,
  type ChatMessage,
  type ClientCapabilities,
  type EditorTerminalCreateParams,
  type EditorTerminalCreateResult,
  type EditorTerminalOutputResult,
  type EditorTerminalParams,
  type EditorTerminalWaitParams,
  type Item,
  type Method,
  type NotificationMethod,
  type Notifications,
  type ParamsOf,
  type ReadTextFileParams,
  type ReadTextFileResult,
  type RequestOptions,
  type ResultOf,
  type SenderContext,
  type ServerInfo,
  type ToolCallParams,
  type ToolCallResult,
  type Turn,
  type TurnStartParams,
  type WriteTextFileParams,
  type WriteTextFileResult,
} from "./generated.js";
import {
  AppServerError,
  ClientClosedError,
  ConnectFailedError,
  ConnectionLostError,
  METHOD_NOT_FOUND,
  INTERNAL_ERROR,
  RequestTimeoutError,
  RpcError,
  SERVER_OVERLOADED,
} from "./errors.js";
import {
  Matcher,
  NotificationIterator,
  TERMINAL_TURN_METHODS,
  makeEvent,
  type AnyNotification,
  type NotificationEvent,
  type NotificationFilter,
} from "./notifications.js";
import {
  StdioTransport,
  WebSocketTransport,
  websocketUrl,
  type StdioOptions,
  type Transport,
  type WebSocketOptions,
} from "./transport.js";

/** This package's version (sent as `clientInfo.version`). */
export const VERSION = "0.1.0";
export const DEFAULT_CLIENT_NAME = "appserver-node";

/** The decisions an approval can take. */
export const DECISIONS: readonly Decision[] = ["accept", "acceptForSession", "acceptAlways", "decline", "cancel"];
export type Decision = ApprovalRequestResult["decision"];
/**
 * What an approval handler returns: a decision, or a whole result object. (Any
 * string is accepted by the type so that `async () => "accept"` compiles; one
 * that is not a decision declines.)
 */
export type ApprovalAnswer = Decision | (string & {}) | ApprovalRequestResult;
/**
 * Called with each `item/approval/request`'s params; returns (or resolves to) a
 * decision. Throwing, or returning anything that is not a decision, declines.
 */
export type ApprovalHandler = (request: ApprovalRequestParams) => ApprovalAnswer | Promise<ApprovalAnswer>;
/**
 * Called with each `item/tool/call`'s params (a tool this client declared in
 * `threadStart({dynamicTools})`); returns (or resolves to) the result
 * `{success, contentItems?, structuredResult?, errorCode?, errorMessage?}`.
 * Throwing, or returning something without a boolean `success`, fails the call.
 */
export type ToolCallHandler = (request: ToolCallParams) => ToolCallResult | Promise<ToolCallResult>;
/**
 * Called with each `ext/channel/toolCall`'s params (a tool this channel adapter
 * lists in `capabilities.channelAdapter.channelTools`); returns (or resolves
 * to) the result, with the rules of a `ToolCallHandler`.
 */
export type ChannelToolCallHandler = (
  request: ChannelToolCallParams,
) => ChannelToolCallResult | Promise<ChannelToolCallResult>;
/**
 * Called with each `ext/acp/fs/readTextFile`'s params (`threadId`, absolute
 * `path`, `line?`, `limit?`); returns (or resolves to) the editor's text of the
 * file, a string or `{content}`. Throwing, or returning anything else, answers a
 * JSON-RPC error: the agent's tool call fails, not the turn.
 */
export type ReadTextFileHandler = (
  request: ReadTextFileParams,
) => string | ReadTextFileResult | Promise<string | ReadTextFileResult>;
/**
 * Called with each `ext/acp/fs/writeTextFile`'s params (`threadId`, absolute
 * `path`, `content`); writes the file in the editor. The answer is `{}` (or the
 * object it returns); throwing answers a JSON-RPC error.
 */
export type WriteTextFileHandler = (
  request: WriteTextFileParams,
) => void | WriteTextFileResult | Promise<void | WriteTextFileResult>;
/**
 * Runs the agent's `shell` commands in this client's terminals (an IDE:
 * `ext/acp/terminal/*`). Each method may return a value or a promise; one that
 * throws answers a JSON-RPC error, which fails the agent's `shell` call, not
 * the turn.
 */
export interface TerminalHandler {
  /** Start `command` in `cwd`; the new terminal's id (a string or `{terminalId}`). */
  create(
    request: EditorTerminalCreateParams,
  ): string | EditorTerminalCreateResult | Promise<string | EditorTerminalCreateResult>;
  /** Wait at most `timeout` seconds; `{output, exitCode}` (no `exitCode`: still running, the server kills it). */
  waitForExit(request: EditorTerminalWaitParams): EditorTerminalOutputResult | Promise<EditorTerminalOutputResult>;
  /** What the terminal printed so far: `{output, exitCode?}`. */
  getOutput(request: EditorTerminalParams): EditorTerminalOutputResult | Promise<EditorTerminalOutputResult>;
  /** Kill the command (the terminal stays until `release`). */
  kill(request: EditorTerminalParams): unknown;
  /** The server is done with the terminal. */
  release(request: EditorTerminalParams): unknown;
}
/** Answers one kind of server->client request; its return value is the result. */
export type RequestHandler = (params: unknown) => unknown;
/** One part of a turn's input (`{type: "text", text}`, `fileRef`, `localImage`, ...). */
export type InputPart = TurnStartParams["input"][number];

export interface Logger {
  warn(message: string, ...rest: unknown[]): void;
}

/** Options of `AppServerClient.spawn` and `AppServerClient.connect`. */
export interface ClientOptions {
  /** `clientInfo.name` (default `"appserver-node"`). */
  clientName?: string;
  /** `clientInfo.version` (default: this package's version). */
  clientVersion?: string;
  /** `clientInfo.title`. */
  clientTitle?: string;
  /** `initialize` capabilities (default `{}`: the server's defaults, which include approvals and streaming). */
  capabilities?: ClientCapabilities;
  /** Decides approvals; without one every approval is declined. Also settable with `onApproval`. */
  approvalHandler?: ApprovalHandler | null;
  /** Runs the tools this client declares; without one every call fails (`"no handler"`). Also settable with `onToolCall`. */
  toolCallHandler?: ToolCallHandler | null;
  /** Runs this channel adapter's `channelTools`; without one every call fails (`"no handler"`). Also settable with `onChannelToolCall`. */
  channelToolCallHandler?: ChannelToolCallHandler | null;
  /** Serves `ext/acp/fs/readTextFile` from the editor; advertises `acpExtensions.fsReadTextFile` (see `onReadTextFile`). */
  readTextFileHandler?: ReadTextFileHandler | null;
  /** Serves `ext/acp/fs/writeTextFile` through the editor; advertises `acpExtensions.fsWriteTextFile` (see `onWriteTextFile`). */
  writeTextFileHandler?: WriteTextFileHandler | null;
  /** Runs the agent's shell commands in the IDE's terminals; advertises `acpExtensions.terminalCreate` (see `onTerminal`). */
  terminalHandler?: TerminalHandler | null;
  /** Milliseconds each request waits for its answer (default 60000; `0` or `Infinity`: no limit). */
  requestTimeoutMs?: number;
  /** How often `-32001 Server overloaded` is retried with backoff (default 4). */
  overloadRetries?: number;
  /** Where handler failures and odd frames are reported (default `console`). */
  logger?: Logger;
}

/** Options of `AppServerClient.spawn`. */
export interface SpawnOptions extends ClientOptions, StdioOptions {}

/** Options of `AppServerClient.connect`. */
export interface ConnectOptions extends ClientOptions, WebSocketOptions {
  /** Sent as `?token=` (the server's `--token` / `$APPSERVER_TOKEN`). */
  token?: string;
  /** Re-open a lost connection and catch up with `afterSeq` (default true). */
  reconnect?: boolean;
  /** First reconnect delay in ms, doubling (with jitter) up to `backoffMaxMs` (defaults 500 and 30000). */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Give up after this many failed reconnect attempts (default: never). */
  maxReconnectAttempts?: number;
}

/** Options of `runTurn`. */
export interface RunTurnOptions {
  sender?: SenderContext | null;
  messages?: ChatMessage[] | null;
  /** Sees each of the turn's notifications as it arrives (e.g. to print `item/agentMessage/delta`). */
  onNotification?: (event: AnyNotification) => unknown;
  /** Milliseconds the whole turn may take (default: no limit); rejects with `RequestTimeoutError`. */
  timeoutMs?: number;
}

/** How a turn run with `runTurn` ended. A failed or cancelled turn is returned, not thrown. */
export interface TurnOutcome {
  /** The last agent message's text (`""` if there was none). */
  text: string;
  /** The turn's completed items, in order. */
  items: Item[];
  /** The turn object from the terminal notification. */
  turn: Turn;
  status: "completed" | "failed" | "cancelled";
  /** `turn/failed`'s error. */
  error?: string;
  /** `turn/cancelled`'s reason. */
  reason?: string;
  /** Every notification of the turn, in order. */
  notifications: AnyNotification[];
  /** `status === "completed"`. */
  ok: boolean;
}

interface Pending {
  method: string;
  params: unknown;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

interface Listener {
  matcher: Matcher;
  deliver(event: AnyNotification): void;
  end(error?: AppServerError): void;
  handler?: unknown;
  method?: string;
}

type Opener = () => Promise<Transport>;

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function finite(ms: number | undefined): boolean {
  return ms !== undefined && ms > 0 && Number.isFinite(ms);
}

/**
 * A connection to an appserver, with one typed method per protocol method
 * (`threadStart`, `turnStart`, `threadModeSet`, ...). Open one with `spawn`
 * (a child process over stdio) or `connect` (WebSocket); the `initialize`
 * handshake is done for you. Requests may be issued concurrently.
 */
export class AppServerClient extends GeneratedMethods {
  /** The server's `initialize` `serverInfo`. */
  serverInfo: ServerInfo | undefined;
  /** The server's `initialize` `capabilities`. */
  serverCapabilities: Record<string, unknown> = {};
  /** Successful reconnects so far. */
  reconnects = 0;
  /** Notifications the `seq` check discarded as already seen. */
  duplicatesDropped = 0;
  /** Resolves when the client is finished: `null` after `close()`, the error if the connection was lost for good. */
  readonly closed: Promise<AppServerError | null>;

  readonly clientName: string;
  readonly clientVersion: string;
  readonly clientTitle: string | undefined;
  readonly capabilities: ClientCapabilities;
  requestTimeoutMs: number;
  overloadRetries: number;
  private readonly logger: Logger;

  private approvalHandler: ApprovalHandler | null;
  private toolCallHandler: ToolCallHandler | null;
  private channelToolCallHandler: ChannelToolCallHandler | null;
  private readTextFileHandler: ReadTextFileHandler | null;
  private writeTextFileHandler: WriteTextFileHandler | null;
  private terminalHandler: TerminalHandler | null;
  private readonly requestHandlers = new Map<string, RequestHandler>();
  private readonly reconnectCallbacks = new Set<(client: AppServerClient) => unknown>();
  private readonly disconnectCallbacks = new Set<(error: Error, client: AppServerClient) => unknown>();
  private current: Transport | undefined;
  private opener: Opener | undefined;
  private reconnectEnabled = false;
  private backoffInitialMs = 500;
  private backoffMaxMs = 30_000;
  private maxReconnectAttempts = Infinity;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly listeners = new Set<Listener>();
  private readonly lastSeqs = new Map<string, number>();
  private readonly subscribed = new Set<string>();
  private readonly runningTurns = new Map<string, Set<string>>();
  private holding = new Map<string, AnyNotification[]>();
  private ready = false;
  private opened = false;
  private reconnecting = false;
  private readyWaiters = new Set<() => void>();
  private closing = false;
  private finished = false;
  private failure: AppServerError | null = null;
  private resolveClosed!: (value: AppServerError | null) => void;
  private cancelSleep: (() => void) | undefined;

  /** Not usually called directly: use `spawn` or `connect`. */
  constructor(options: ClientOptions = {}) {
    super();
    this.clientName = options.clientName ?? DEFAULT_CLIENT_NAME;
    this.clientVersion = options.clientVersion ?? VERSION;
    this.clientTitle = options.clientTitle;
    this.capabilities = { ...(options.capabilities ?? {}) };
    this.approvalHandler = options.approvalHandler ?? null;
    this.toolCallHandler = options.toolCallHandler ?? null;
    this.channelToolCallHandler = options.channelToolCallHandler ?? null;
    this.readTextFileHandler = options.readTextFileHandler ?? null;
    this.writeTextFileHandler = options.writeTextFileHandler ?? null;
    this.terminalHandler = options.terminalHandler ?? null;
    this.requestTimeoutMs = options.requestTimeoutMs ?? 60_000;
    this.overloadRetries = options.overloadRetries ?? 4;
    this.logger = options.logger ?? console;
    this.closed = new Promise((resolve) => {
      this.resolveClosed = resolve;
    });
  }

  // ------------------------------------------------------------------ opening

  /**
   * Start `command args` (default `appserver app-server`) and talk to it over its
   * stdin/stdout, JSON lines. `close()` closes its stdin, waits for it to exit,
   * then terminates it. A process that exits before the handshake is done
   * rejects with `ConnectFailedError`; later, everything rejects with
   * `ConnectionLostError` (there is no reconnect).
   */
  static async spawn(
    command = "appserver",
    args: readonly string[] = ["app-server"],
    options: SpawnOptions = {},
  ): Promise<AppServerClient> {
    const client = new AppServerClient(options);
    await client.open(() => StdioTransport.start(command, args, options));
    return client;
  }

  /**
   * Connect to `ws://HOST:PORT[/ws]` (the `/ws` path is added when missing;
   * `token` is sent as `?token=`). With `reconnect` (default) a lost
   * connection is re-opened with exponential backoff and jitter; the client
   * initializes again and re-subscribes every thread it follows with
   * `afterSeq` = the last `seq` it saw, so handlers continue with no gap and no
   * duplicate. Requests in flight at the loss reject with
   * `ConnectionLostError`; new ones wait for the reconnect. The first
   * connection is not retried: failure rejects with `ConnectFailedError`.
   */
  static async connect(url: string, options: ConnectOptions = {}): Promise<AppServerClient> {
    const fullUrl = websocketUrl(url, options.token);
    const client = new AppServerClient(options);
    client.reconnectEnabled = options.reconnect ?? true;
    client.backoffInitialMs = options.backoffInitialMs ?? 500;
    client.backoffMaxMs = options.backoffMaxMs ?? 30_000;
    client.maxReconnectAttempts = options.maxReconnectAttempts ?? Infinity;
    await client.open(() => WebSocketTransport.open(fullUrl, options));
    return client;
  }

  private async open(opener: Opener): Promise<void> {
    this.opener = opener;
    const transport = await opener();
    this.attach(transport);
    try {
      await this.handshake();
    } catch (error) {
      this.closing = true;
      await transport.close();
      this.shutdown(null);
      // Lost before the handshake finished (a spawned server that exited at
      // start, a connection dropped at once): opening failed, as the README says.
      if (error instanceof ConnectionLostError) throw new ConnectFailedError(error.message);
      throw error;
    }
    this.opened = true;
    this.setReady();
  }

  private attach(transport: Transport): void {
    this.current = transport;
    transport.attach({
      frame: (text) => this.onFrame(transport, text),
      closed: (error) => this.onTransportClosed(transport, error),
    });
  }

  private async handshake(): Promise<void> {
    const clientInfo: Record<string, unknown> = { name: this.clientName, version: this.clientVersion };
    if (this.clientTitle !== undefined) clientInfo.title = this.clientTitle;
    const result = (await this.callOnce(
      "initialize",
      { clientInfo, capabilities: this.initializeCapabilities() },
      this.requestTimeoutMs,
    )) as ResultOf<"initialize">;
    this.serverInfo = result.serverInfo;
    this.serverCapabilities = { ...(result.capabilities ?? {}) };
    await this.sendFrame({ jsonrpc: "2.0", method: "initialized", params: {} });
  }

  /**
   * The `capabilities` sent in `initialize`: `capabilities`, plus
   * `acpExtensions.fsReadTextFile` / `fsWriteTextFile` for the editor file
   * handlers that are set, unless `capabilities` has `acpExtensions` (then it
   * is sent as given).
   */
  initializeCapabilities(): ClientCapabilities {
    const capabilities: ClientCapabilities = { ...this.capabilities };
    if (!("acpExtensions" in capabilities)) {
      const acp: NonNullable<ClientCapabilities["acpExtensions"]> = {};
      if (this.readTextFileHandler) acp.fsReadTextFile = true;
      if (this.writeTextFileHandler) acp.fsWriteTextFile = true;
      if (this.terminalHandler) acp.terminalCreate = true;
      if (Object.keys(acp).length > 0) capabilities.acpExtensions = acp;
    }
    return capabilities;
  }

  // ------------------------------------------------------------------ state

  /** `"stdio"` or `"websocket"`. */
  get kind(): "stdio" | "websocket" | undefined {
    return this.current?.kind;
  }

  /** Whether the connection is up and initialized right now. */
  get connected(): boolean {
    return this.ready && !this.closing && this.failure === null;
  }

  /** The current transport (a new one after each reconnect). */
  get transport(): Transport | undefined {
    return this.current;
  }

  /** Threads this client re-subscribes after a reconnect. */
  get subscribedThreads(): ReadonlySet<string> {
    return new Set(this.subscribed);
  }

  /** The highest `seq` seen for the thread (`undefined`: none yet). */
  lastSeq(threadId: string): number | undefined {
    return this.lastSeqs.get(threadId);
  }

  // ------------------------------------------------------------------ requests

  /**
   * Send `method` with `params` and resolve with its result. Rejects with
   * `RpcError` for a JSON-RPC error (after retrying `-32001 Server overloaded`
   * with backoff), `RequestTimeoutError` after `timeoutMs` (which also covers
   * waiting for a reconnect), `ConnectionLostError` or `ClientClosedError`.
   */
  async request<M extends Method>(method: M, params: ParamsOf<M>, options: RequestOptions = {}): Promise<ResultOf<M>> {
    return (await this.call(method, params, options)) as ResultOf<M>;
  }

  /** `request` for any method name, untyped (methods the schema does not know, extensions). */
  async call(method: string, params?: unknown, options: RequestOptions = {}): Promise<unknown> {
    const limit = options.timeoutMs ?? this.requestTimeoutMs;
    const deadline = finite(limit) ? Date.now() + limit : Infinity;
    for (let attempt = 0; ; attempt++) {
      await this.waitReady(method, limit, deadline, options.signal);
      try {
        return await this.callOnce(method, params, limit, deadline, options.signal);
      } catch (error) {
        if (!(error instanceof RpcError) || error.code !== SERVER_OVERLOADED || attempt >= this.overloadRetries) {
          throw error;
        }
        const delay = 50 * 2 ** attempt * (0.5 + Math.random());
        if (Date.now() + delay >= deadline) throw new RequestTimeoutError(method, limit);
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  /** Send a client->server notification (the server ignores all but `initialized`). */
  async notify(method: string, params?: unknown): Promise<void> {
    await this.waitReady(method, this.requestTimeoutMs, Infinity);
    await this.sendFrame(params === undefined ? { jsonrpc: "2.0", method } : { jsonrpc: "2.0", method, params });
  }

  private waitReady(method: string, limit: number, deadline: number, signal?: AbortSignal): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.closing) return Promise.reject(new ClientClosedError("client is closed"));
    if (this.ready) return Promise.resolve();
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        this.readyWaiters.delete(wake);
        if (timer) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      const wake = () => {
        done();
        if (this.failure) reject(this.failure);
        else if (this.closing) reject(new ClientClosedError("client is closed"));
        else resolve();
      };
      const onAbort = () => {
        done();
        reject(signal?.reason);
      };
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      this.readyWaiters.add(wake);
      signal?.addEventListener("abort", onAbort, { once: true });
      if (Number.isFinite(deadline)) {
        timer = setTimeout(
          () => {
            done();
            reject(new RequestTimeoutError(method, limit));
          },
          Math.max(0, deadline - Date.now()),
        );
      }
    });
  }

  private setReady(): void {
    this.ready = true;
    for (const wake of [...this.readyWaiters]) wake();
  }

  private sendFrame(message: unknown): Promise<void> {
    const transport = this.current;
    if (!transport) return Promise.reject(new ConnectionLostError("not connected"));
    return transport.send(JSON.stringify(message));
  }

  /** One request on the current connection (no readiness wait, no retry). */
  private callOnce(
    method: string,
    params: unknown,
    limit: number,
    deadline: number = finite(limit) ? Date.now() + limit : Infinity,
    signal?: AbortSignal,
  ): Promise<unknown> {
    const id = this.nextId++;
    const wireParams = params ?? {};
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      let settled = false;
      const settle = (action: () => void) => {
        if (settled) return;
        settled = true;
        this.pending.delete(id);
        if (timer) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        action();
      };
      const onAbort = () => settle(() => reject(signal?.reason));
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const entry: Pending = {
        method,
        params: wireParams,
        resolve: (value) => settle(() => resolve(value)),
        reject: (error) => settle(() => reject(error)),
      };
      this.pending.set(id, entry);
      signal?.addEventListener("abort", onAbort, { once: true });
      if (Number.isFinite(deadline)) {
        timer = setTimeout(
          () => entry.reject(new RequestTimeoutError(method, limit)),
          Math.max(0, deadline - Date.now()),
        );
      }
      this.sendFrame({ jsonrpc: "2.0", id, method, params: wireParams }).catch((error: unknown) =>
        entry.reject(error),
      );
    });
  }

  // ------------------------------------------------------------------ notifications

  /**
   * Call `handler(params, event)` for each `method` notification (optionally only
   * those of one thread or turn). Returns a function that removes the handler.
   * The handler may be async; a throw or rejection is logged, never fatal.
   */
  on<M extends NotificationMethod>(
    method: M,
    handler: (params: Notifications[M], event: NotificationEvent<M>) => unknown,
    filter: Omit<NotificationFilter, "methods"> = {},
  ): () => void {
    const listener: Listener = {
      matcher: new Matcher({ ...filter, methods: [method] }),
      deliver: (event) =>
        this.invoke(`handler for ${method}`, () =>
          handler(event.params as Notifications[M], event as unknown as NotificationEvent<M>),
        ),
      end: () => undefined,
      handler,
      method,
    };
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Remove a handler added with `on(method, handler)` (or `onAny(handler)`: no method). */
  off(method: NotificationMethod | undefined, handler: unknown): void {
    for (const listener of this.listeners) {
      if (listener.handler === handler && listener.method === method) this.listeners.delete(listener);
    }
  }

  /** Call `handler(event)` for every notification matching `filter` (all of them by default). */
  onAny(handler: (event: AnyNotification) => unknown, filter: NotificationFilter = {}): () => void {
    const listener: Listener = {
      matcher: new Matcher(filter),
      deliver: (event) => this.invoke("notification handler", () => handler(event)),
      end: () => undefined,
      handler,
    };
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * An async iterator over the notifications matching `filter`, collecting from
   * now: `for await (const event of client.events({threadId})) { ... }`.
   * `break` (or `close()`) detaches it.
   */
  events(filter: NotificationFilter = {}): NotificationIterator {
    let listener: Listener | undefined;
    const iterator = new NotificationIterator(new Matcher(filter), () => {
      if (listener) this.listeners.delete(listener);
    });
    listener = {
      matcher: iterator.matcher,
      deliver: (event) => iterator.offer(event),
      end: (error) => iterator.end(error),
    };
    if (this.finished) iterator.end(this.failure ?? undefined);
    else this.listeners.add(listener);
    return iterator;
  }

  /**
   * The next `method` notification matching `filter`. Rejects with
   * `RequestTimeoutError` after `timeoutMs` (default: the request timeout).
   */
  waitFor<M extends NotificationMethod>(
    method: M,
    filter: Omit<NotificationFilter, "methods"> & { timeoutMs?: number } = {},
  ): Promise<NotificationEvent<M>> {
    const limit = filter.timeoutMs ?? this.requestTimeoutMs;
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const listener: Listener = {
        matcher: new Matcher({ threadId: filter.threadId, turnId: filter.turnId, methods: [method] }),
        deliver: (event) => {
          this.listeners.delete(listener);
          if (timer) clearTimeout(timer);
          resolve(event as unknown as NotificationEvent<M>);
        },
        end: (error) => {
          if (timer) clearTimeout(timer);
          reject(error ?? new ClientClosedError("client is closed"));
        },
      };
      if (this.finished) {
        reject(this.failure ?? new ClientClosedError("client is closed"));
        return;
      }
      this.listeners.add(listener);
      if (finite(limit)) {
        timer = setTimeout(() => {
          this.listeners.delete(listener);
          reject(new RequestTimeoutError(method, limit));
        }, limit);
      }
    });
  }

  private invoke(what: string, fn: () => unknown): void {
    try {
      const result = fn();
      if (result instanceof Promise) {
        result.catch((error: unknown) => this.logger.warn(`appserver-client: ${what} failed:`, error));
      }
    } catch (error) {
      this.logger.warn(`appserver-client: ${what} failed:`, error);
    }
  }

  // ------------------------------------------------------------------ approvals and server requests

  /**
   * Decide approvals with `handler` (sync or async), replacing any previous one;
   * `null` removes it. Without a handler every approval is declined.
   */
  onApproval(handler: ApprovalHandler | null): void {
    this.approvalHandler = handler;
  }

  /**
   * Run the tools this client declares in `threadStart({dynamicTools})`:
   * `handler` (sync or async) answers each `item/tool/call`, replacing any
   * previous one; `null` removes it. Without a handler a call fails with
   * `errorMessage: "no handler"` (unless a `setRequestHandler` handler for
   * `item/tool/call` answers it raw).
   */
  onToolCall(handler: ToolCallHandler | null): void {
    this.toolCallHandler = handler;
  }

  /**
   * Run the channel tools this adapter lists in
   * `capabilities.channelAdapter.channelTools`: `handler` (sync or async)
   * answers each `ext/channel/toolCall`, replacing any previous one; `null`
   * removes it. The rules of `onToolCall` apply (no handler: `errorCode:
   * "noHandler"` unless a `setRequestHandler` handler answers it raw; a
   * failing handler: `"handlerFailed"`).
   */
  onChannelToolCall(handler: ChannelToolCallHandler | null): void {
    this.channelToolCallHandler = handler;
  }

  /**
   * Serve `ext/acp/fs/readTextFile` (the agent reading a file as the editor has
   * it): `handler` (sync or async) returns the text, a string or `{content}`;
   * `null` removes it. A handler that throws or returns something else answers
   * a JSON-RPC error (-32603), which fails the agent's tool call ("the editor
   * refused ..."), not the turn. Without a handler the request goes to a
   * `setRequestHandler` handler if one is set, else is answered -32601.
   *
   * The server only sends it if `initialize` advertised
   * `acpExtensions.fsReadTextFile`, which the client adds when this handler is
   * set at that moment (the `readTextFileHandler` option of `spawn`/`connect`;
   * set later, it counts from the next reconnect) and `capabilities` has no
   * `acpExtensions` of its own.
   */
  onReadTextFile(handler: ReadTextFileHandler | null): void {
    this.readTextFileHandler = handler;
  }

  /**
   * Serve `ext/acp/fs/writeTextFile` (the agent writing a file through the
   * editor): `handler` (sync or async) writes `content` to `path`; the answer
   * is `{}`. Errors, the fallback and the `acpExtensions.fsWriteTextFile`
   * advertisement as in `onReadTextFile`.
   */
  onWriteTextFile(handler: WriteTextFileHandler | null): void {
    this.writeTextFileHandler = handler;
  }

  /**
   * Run the agent's `shell` commands in this client's terminals (an IDE):
   * `handler` answers `ext/acp/terminal/create|waitForExit|getOutput|kill|release`;
   * `null` removes it. The server sends them after its sandbox and approvals,
   * when `initialize` advertised `acpExtensions.terminalCreate` (added as for
   * `onReadTextFile`). Errors and the fallback as in `onReadTextFile`.
   */
  onTerminal(handler: TerminalHandler | null): void {
    this.terminalHandler = handler;
  }

  /**
   * Answer server->client requests `method` with `handler(params)` (sync or
   * async; its value is the result). `item/approval/request` goes to the
   * approval handler instead. Anything unhandled is answered with -32601.
   */
  setRequestHandler(method: string, handler: RequestHandler | null): void {
    if (handler) this.requestHandlers.set(method, handler);
    else this.requestHandlers.delete(method);
  }

  /** Call `callback(client)` after each successful reconnect (re-initialized and re-subscribed). */
  onReconnect(callback: (client: AppServerClient) => unknown): () => void {
    this.reconnectCallbacks.add(callback);
    return () => this.reconnectCallbacks.delete(callback);
  }

  /**
   * Call `callback(error, client)` when the connection is lost and the client starts
   * reconnecting (with `reconnect` on; otherwise the client closes: see `closed`).
   * Returns a function that removes the callback.
   */
  onDisconnect(callback: (error: Error, client: AppServerClient) => unknown): () => void {
    this.disconnectCallbacks.add(callback);
    return () => this.disconnectCallbacks.delete(callback);
  }

  private async answer(transport: Transport, id: unknown, method: string, params: unknown): Promise<void> {
    const reply: Record<string, unknown> = { jsonrpc: "2.0", id };
    try {
      if (method === "item/approval/request") {
        reply.result = await this.approve(params as ApprovalRequestParams);
      } else if (method === "item/tool/call" && (this.toolCallHandler || !this.requestHandlers.has(method))) {
        reply.result = await this.callTool(params as ToolCallParams);
      } else if (
        method === "ext/channel/toolCall" &&
        (this.channelToolCallHandler || !this.requestHandlers.has(method))
      ) {
        const handler = this.channelToolCallHandler;
        reply.result = await this.runTool(handler && (() => handler(params as ChannelToolCallParams)));
      } else if (method === "ext/acp/fs/readTextFile" && this.readTextFileHandler) {
        const answer: unknown = await this.readTextFileHandler(params as ReadTextFileParams);
        if (typeof answer === "string") reply.result = { content: answer };
        else if (isObject(answer) && typeof answer.content === "string") reply.result = answer;
        else throw new Error(`the readTextFile handler returned ${JSON.stringify(answer)}, not the text`);
      } else if (method === "ext/acp/fs/writeTextFile" && this.writeTextFileHandler) {
        const answer: unknown = await this.writeTextFileHandler(params as WriteTextFileParams);
        reply.result = isObject(answer) ? answer : {};
      } else if (method.startsWith(TERMINAL_PREFIX) && this.terminalHandler) {
        reply.result = await runTerminal(this.terminalHandler, method, params);
      } else {
        const handler = this.requestHandlers.get(method);
        if (handler) reply.result = (await handler(params)) ?? {};
        else reply.error = { code: METHOD_NOT_FOUND, message: `Method not found: ${method}` };
      }
    } catch (error) {
      this.logger.warn(`appserver-client: handler for server request ${method} failed:`, error);
      reply.error = { code: INTERNAL_ERROR, message: "Internal error", data: { detail: String(error) } };
    }
    try {
      await transport.send(JSON.stringify(reply));
    } catch {
      // the connection is gone; the server resolves the request by its own rules
    }
  }

  private async approve(params: ApprovalRequestParams): Promise<ApprovalRequestResult> {
    const handler = this.approvalHandler;
    if (!handler) return { decision: "decline" };
    let answer: unknown;
    try {
      answer = await handler(params);
    } catch (error) {
      this.logger.warn("appserver-client: approval handler failed; declining:", error);
      return { decision: "decline" };
    }
    const result = typeof answer === "string" ? { decision: answer } : answer;
    if (!isObject(result) || !DECISIONS.includes(result.decision as Decision)) {
      this.logger.warn(`appserver-client: approval handler returned ${JSON.stringify(answer)}; declining`);
      return { decision: "decline" };
    }
    return result as unknown as ApprovalRequestResult;
  }

  private callTool(params: ToolCallParams): Promise<ToolCallResult> {
    const handler = this.toolCallHandler;
    return this.runTool(handler && (() => handler(params)));
  }

  /** A tool-call result from a handler (`null`: no handler); never throws. */
  private async runTool(call: (() => unknown) | null): Promise<ToolCallResult> {
    if (!call) return { success: false, errorCode: "noHandler", errorMessage: "no handler" };
    let answer: unknown;
    try {
      answer = await call();
    } catch (error) {
      this.logger.warn("appserver-client: tool call handler failed:", error);
      return { success: false, errorCode: "handlerFailed", errorMessage: String(error) };
    }
    if (!isObject(answer) || typeof answer.success !== "boolean") {
      this.logger.warn(`appserver-client: tool call handler returned ${JSON.stringify(answer)}; failing the call`);
      return { success: false, errorCode: "handlerFailed", errorMessage: "the tool call handler returned no result" };
    }
    return answer as unknown as ToolCallResult;
  }

  // ------------------------------------------------------------------ turns

  /**
   * Start a turn with `input` (text, or input parts) and resolve when it ends,
   * with its final text, items, turn and status. Needs no subscription.
   * Approvals go to the approval handler. A failed or cancelled turn resolves
   * (`status`), it does not reject.
   */
  runTurn(threadId: string, input: string | readonly InputPart[], options: RunTurnOptions = {}): Promise<TurnOutcome> {
    const parts: InputPart[] = typeof input === "string" ? [{ type: "text", text: input }] : [...input];
    return new Promise((resolve, reject) => {
      let turnId: string | undefined;
      let done = false;
      let timer: NodeJS.Timeout | undefined;
      const early: AnyNotification[] = [];
      const items: Item[] = [];
      const seen: AnyNotification[] = [];
      const finish = (action: () => void) => {
        if (done) return;
        done = true;
        if (timer) clearTimeout(timer);
        this.listeners.delete(listener);
        action();
      };
      const consume = (event: AnyNotification) => {
        if (done || event.turnId !== turnId) return;
        seen.push(event);
        const onNotification = options.onNotification;
        if (onNotification) this.invoke("runTurn onNotification", () => onNotification(event));
        if (event.method === "item/completed") items.push(event.params.item);
        else if (TERMINAL_TURN_METHODS.has(event.method)) finish(() => resolve(outcome(event, items, seen)));
      };
      const listener: Listener = {
        matcher: new Matcher({ threadId }),
        // Events can arrive before the turn/start answer is handled: keep them until the turn id is known.
        deliver: (event) => (turnId === undefined ? early.push(event) : consume(event)),
        end: (error) => finish(() => reject(error ?? new ClientClosedError("client closed before the turn ended"))),
      };
      this.listeners.add(listener);
      if (finite(options.timeoutMs)) {
        timer = setTimeout(
          () => finish(() => reject(new RequestTimeoutError("runTurn", options.timeoutMs!))),
          options.timeoutMs,
        );
      }
      const params: TurnStartParams = { threadId, input: parts };
      if (options.sender !== undefined) params.sender = options.sender;
      if (options.messages !== undefined) params.messages = options.messages;
      this.turnStart(params).then(
        (result) => {
          if (done) return;
          turnId = result.turn.id;
          for (const event of early.splice(0)) consume(event);
        },
        (error: unknown) => finish(() => reject(error)),
      );
    });
  }

  // ------------------------------------------------------------------ closing

  /**
   * Close the connection (a spawned server exits). Idempotent. Pending requests
   * reject with `ClientClosedError`; iterators end.
   */
  async close(): Promise<void> {
    if (this.closing) {
      await this.closed;
      return;
    }
    this.closing = true;
    this.cancelSleep?.();
    this.failPending(new ClientClosedError("client is closed"));
    const transport = this.current;
    if (transport) await transport.close();
    this.shutdown(null);
  }

  // ------------------------------------------------------------------ internals: receiving

  private onFrame(transport: Transport, text: string): void {
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch {
      this.logger.warn(`appserver-client: ignoring a frame that is not JSON: ${text.slice(0, 200)}`);
      return;
    }
    if (!isObject(message)) return;
    try {
      this.onMessage(transport, message);
    } catch (error) {
      this.logger.warn(`appserver-client: failed to handle ${text.slice(0, 200)}:`, error);
    }
  }

  private onMessage(transport: Transport, message: Record<string, unknown>): void {
    const method = message.method;
    if (typeof method === "string") {
      if ("id" in message) void this.answer(transport, message.id, method, message.params);
      else this.onNotification(makeEvent(method, message.params));
      return;
    }
    const id = message.id;
    const entry = typeof id === "number" ? this.pending.get(id) : undefined;
    if (!entry) {
      if ("error" in message) this.logger.warn("appserver-client: server error without a request:", message.error);
      return;
    }
    if ("error" in message) {
      const error = isObject(message.error) ? message.error : {};
      entry.reject(new RpcError(Number(error.code ?? 0), String(error.message ?? ""), error.data, entry.method));
    } else {
      this.observeResult(entry.method, entry.params, message.result);
      entry.resolve(message.result);
    }
  }

  /** Bookkeeping for reconnects, done as the response is read (before any later notification). */
  private observeResult(method: string, params: unknown, result: unknown): void {
    const threadId = isObject(params) ? params.threadId : undefined;
    if (typeof threadId !== "string") return;
    if (method === "thread/subscribe") {
      this.subscribed.add(threadId);
      // What it replays follows this answer in seq order, from `afterSeq` on, leaving out
      // what this connection already got as broadcasts: seqs below those are new to it.
      if (isObject(params) && typeof params.afterSeq === "number") this.lastSeqs.set(threadId, params.afterSeq);
      else if (isObject(params) && params.replayRecent) this.lastSeqs.delete(threadId);
      const seq = isObject(result) ? result.seq : undefined;
      if (typeof seq === "number" && !this.lastSeqs.has(threadId)) this.lastSeqs.set(threadId, seq);
    } else if (method === "thread/unsubscribe") {
      this.subscribed.delete(threadId);
    } else if (method === "thread/delete") {
      this.forgetThread(threadId);
    } else if (method === "turn/start" && isObject(result) && isObject(result.turn)) {
      const turn = result.turn;
      if (typeof turn.id === "string" && (turn.status === "running" || turn.status === "waitingApproval")) {
        let running = this.runningTurns.get(threadId);
        if (!running) this.runningTurns.set(threadId, (running = new Set()));
        running.add(turn.id);
      }
    }
  }

  private forgetThread(threadId: string): void {
    this.subscribed.delete(threadId);
    this.runningTurns.delete(threadId);
  }

  private onNotification(event: AnyNotification): void {
    const { threadId, seq } = event;
    if (threadId !== undefined && seq !== undefined) {
      const held = this.holding.get(threadId);
      if (held) {
        held.push(event);
        return;
      }
      const last = this.lastSeqs.get(threadId);
      if (last !== undefined && seq <= last) {
        this.duplicatesDropped++;
        return;
      }
      this.lastSeqs.set(threadId, seq);
    }
    if (threadId !== undefined) {
      if (TERMINAL_TURN_METHODS.has(event.method)) {
        const running = this.runningTurns.get(threadId);
        if (running) {
          running.delete(event.turnId ?? "");
          if (running.size === 0) this.runningTurns.delete(threadId);
        }
      } else if (event.method === "thread/deleted") {
        this.forgetThread(threadId);
      }
    }
    for (const listener of [...this.listeners]) {
      if (this.listeners.has(listener) && listener.matcher.matches(event)) listener.deliver(event);
    }
  }

  // ------------------------------------------------------------------ internals: loss and reconnect

  private onTransportClosed(transport: Transport, error: ConnectionLostError): void {
    if (transport !== this.current) return;
    this.ready = false;
    if (this.closing) return;
    this.failPending(error);
    if (!this.opened || this.reconnecting) return; // the handshake in progress fails and handles it
    if (!this.reconnectEnabled || !this.opener) {
      this.shutdown(error);
      return;
    }
    this.logger.warn(`appserver-client: connection lost (${error.message}); reconnecting`);
    for (const callback of [...this.disconnectCallbacks]) this.invoke("onDisconnect callback", () => callback(error, this));
    void this.reconnectLoop().then(
      (failure) => {
        if (failure) this.shutdown(failure);
      },
      (bug: unknown) => this.shutdown(new ConnectionLostError(`client failed: ${String(bug)}`)),
    );
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.cancelSleep = undefined;
        resolve();
      }, ms);
      this.cancelSleep = () => {
        clearTimeout(timer);
        this.cancelSleep = undefined;
        resolve();
      };
    });
  }

  /** Reconnect until it works (`null`), or give up (the error). */
  private async reconnectLoop(): Promise<AppServerError | null> {
    this.reconnecting = true;
    try {
      for (let attempt = 0; ; attempt++) {
        if (this.closing) return new ClientClosedError("client is closed");
        if (attempt >= this.maxReconnectAttempts) {
          return new ConnectionLostError(`gave up reconnecting after ${attempt} attempt(s)`);
        }
        const delay = Math.min(this.backoffMaxMs, this.backoffInitialMs * 2 ** attempt);
        await this.sleep(delay * (0.5 + Math.random() / 2));
        if (this.closing) return new ClientClosedError("client is closed");
        let transport: Transport;
        try {
          transport = await this.opener!();
        } catch (error) {
          if (error instanceof ConnectFailedError && error.permanent) return error;
          continue;
        }
        if (this.closing) {
          await transport.close();
          return new ClientClosedError("client is closed");
        }
        this.attach(transport);
        try {
          await this.handshake();
          await this.resubscribe();
        } catch {
          this.holding = new Map();
          await transport.close();
          this.failPending(new ConnectionLostError("connection lost during reconnect"));
          continue;
        }
        this.reconnects++;
        this.setReady();
        this.releaseHeld();
        for (const callback of [...this.reconnectCallbacks]) this.invoke("onReconnect callback", () => callback(this));
        return null;
      }
    } finally {
      this.reconnecting = false;
    }
  }

  /**
   * Re-subscribe followed threads, replaying what was missed. Each thread's
   * notifications are held back from `thread/subscribe {afterSeq}` until a
   * second (idempotent) `thread/subscribe` answers: the server runs it only
   * after the replay was queued, so by then every replayed event is in.
   */
  private async resubscribe(): Promise<void> {
    const threads = [...new Set([...this.subscribed, ...this.runningTurns.keys()])].sort();
    this.holding = new Map(threads.map((thread) => [thread, []]));
    await Promise.all(threads.map((thread) => this.resubscribeOne(thread)));
  }

  private async resubscribeOne(threadId: string): Promise<void> {
    try {
      await this.callOnce(
        "thread/subscribe",
        { threadId, afterSeq: this.lastSeqs.get(threadId) ?? 0 },
        this.requestTimeoutMs,
      );
    } catch (error) {
      if (!(error instanceof RpcError) || error.code === SERVER_OVERLOADED) throw error;
      this.logger.warn(`appserver-client: could not re-subscribe ${threadId}: ${error.message}`);
      this.forgetThread(threadId);
      return;
    }
    await this.callOnce("thread/subscribe", { threadId }, this.requestTimeoutMs);
  }

  private releaseHeld(): void {
    const holding = this.holding;
    this.holding = new Map();
    for (const held of holding.values()) {
      held.sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0));
      for (const event of held) this.onNotification(event);
    }
  }

  private failPending(error: AppServerError): void {
    for (const entry of [...this.pending.values()]) entry.reject(error);
  }

  /** The client is finished: fail everything, end every listener. */
  private shutdown(error: AppServerError | null): void {
    if (this.finished) return;
    this.finished = true;
    if (error && !this.failure) this.failure = error;
    this.ready = false;
    this.failPending(error ?? new ClientClosedError("client is closed"));
    for (const listener of [...this.listeners]) listener.end(error ?? undefined);
    this.listeners.clear();
    for (const wake of [...this.readyWaiters]) wake();
    this.resolveClosed(error);
  }
}

function outcome(terminal: AnyNotification, collected: Item[], seen: AnyNotification[]): TurnOutcome {
  const params = terminal.params as unknown as Record<string, unknown>;
  const turn = (isObject(params.turn) ? params.turn : {}) as unknown as Turn;
  const items = Array.isArray(turn.items) && turn.items.length > 0 ? [...turn.items] : collected;
  let text = "";
  for (const item of items) {
    if (item.type === "agentMessage") text = String(item.payload?.text ?? "");
  }
  const status = terminal.method.split("/")[1] as TurnOutcome["status"];
  const result: TurnOutcome = { text, items, turn, status, notifications: seen, ok: status === "completed" };
  if (typeof params.error === "string") result.error = params.error;
  if (typeof params.reason === "string") result.reason = params.reason;
  return result;
}

const TERMINAL_PREFIX = "ext/acp/terminal/";

/** Answer one `ext/acp/terminal/*` request with `handler`. */
async function runTerminal(handler: TerminalHandler, method: string, params: unknown): Promise<unknown> {
  const name = method.slice(TERMINAL_PREFIX.length);
  let answer: unknown;
  switch (name) {
    case "create":
      answer = await handler.create(params as EditorTerminalCreateParams);
      return typeof answer === "string" ? { terminalId: answer } : answer;
    case "waitForExit":
      answer = await handler.waitForExit(params as EditorTerminalWaitParams);
      break;
    case "getOutput":
      answer = await handler.getOutput(params as EditorTerminalParams);
      break;
    case "kill":
    case "release":
      answer = await handler[name](params as EditorTerminalParams);
      return isObject(answer) ? answer : {};
    default:
      throw new Error(`unknown terminal request ${method}`);
  }
  if (!isObject(answer)) throw new Error(`the terminal handler's ${name} returned ${JSON.stringify(answer)}, not an object`);
  return answer;
}
