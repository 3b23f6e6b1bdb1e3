/** Server notifications as events: their shape, filters, and an async iterator. */

import type { NotificationMethod, Notifications } from "./generated.js";

export const TERMINAL_TURN_METHODS: ReadonlySet<string> = new Set(["turn/completed", "turn/failed", "turn/cancelled"]);

/** One server->client notification, with the ids every filter uses read out for you. */
export interface NotificationEvent<M extends NotificationMethod = NotificationMethod> {
  readonly method: M;
  readonly params: Notifications[M];
  /**
   * The thread it is about: `params.threadId`, which every thread-scoped notification carries
   * (`thread.id` / `turn.threadId` are read when it is missing, as older servers sent).
   */
  readonly threadId: string | undefined;
  /** The turn it is about: `params.turnId` (`item/*`) or `params.turn.id` (`turn/*`). */
  readonly turnId: string | undefined;
  /** The thread's event sequence number (thread-scoped notifications). */
  readonly seq: number | undefined;
}

/**
 * Any notification, as a union discriminated by `method` (so `switch (event.method)`
 * narrows `params`). Notifications the schema does not know are delivered too.
 */
export type AnyNotification = { [M in NotificationMethod]: NotificationEvent<M> }[NotificationMethod];

/** Which notifications a handler or iterator wants; every given field must match. */
export interface NotificationFilter {
  threadId?: string;
  turnId?: string;
  /** Exact method names or globs (`"item/*"`, `"turn/*"`). */
  methods?: readonly string[];
}

function str(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

function field(value: unknown, name: string): unknown {
  return value !== null && typeof value === "object" ? (value as Record<string, unknown>)[name] : undefined;
}

/** Build the event for a notification frame's `method` and `params`. */
export function makeEvent(method: string, rawParams: unknown): AnyNotification {
  const params = rawParams !== null && typeof rawParams === "object" && !Array.isArray(rawParams) ? rawParams : {};
  const turn = field(params, "turn");
  const threadId = str(field(params, "threadId")) ?? str(field(field(params, "thread"), "id")) ?? str(field(turn, "threadId"));
  const turnId = str(field(params, "turnId")) ?? str(field(turn, "id"));
  const rawSeq = field(params, "seq");
  const seq = typeof rawSeq === "number" && Number.isInteger(rawSeq) ? rawSeq : undefined;
  return { method, params, threadId, turnId, seq } as AnyNotification;
}

function globToRegExp(pattern: string): RegExp {
  const body = pattern.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".");
  return new RegExp(`^${body}$`);
}

/** A compiled filter: `matches(event)`. */
export class Matcher {
  private readonly exact: Set<string> | undefined;
  private readonly patterns: RegExp[];

  constructor(private readonly filter: NotificationFilter = {}) {
    if (filter.methods) {
      this.exact = new Set(filter.methods.filter((m) => !/[*?]/.test(m)));
      this.patterns = filter.methods.filter((m) => /[*?]/.test(m)).map(globToRegExp);
    } else {
      this.exact = undefined;
      this.patterns = [];
    }
  }

  matches(event: AnyNotification): boolean {
    if (this.filter.threadId !== undefined && event.threadId !== this.filter.threadId) return false;
    if (this.filter.turnId !== undefined && event.turnId !== this.filter.turnId) return false;
    if (this.exact !== undefined && !this.exact.has(event.method)) {
      return this.patterns.some((pattern) => pattern.test(event.method));
    }
    return true;
  }
}

/**
 * An async iterator over the notifications matching a filter (`client.events()`).
 * It collects from the moment it is created, so create it before the request whose
 * events you want. It ends when you `close()` it (or `break` out of `for await`),
 * or when the client is closed; it throws if the connection is lost for good.
 */
export class NotificationIterator implements AsyncIterableIterator<AnyNotification> {
  private readonly queue: AnyNotification[] = [];
  private waiter: { resolve: (r: IteratorResult<AnyNotification>) => void; reject: (e: unknown) => void } | undefined;
  private ended = false;
  private error: Error | undefined;

  /** @internal */
  constructor(
    readonly matcher: Matcher,
    private readonly detach: (it: NotificationIterator) => void,
  ) {}

  /** Buffered notifications not yet taken. */
  get pending(): number {
    return this.queue.length;
  }

  /** @internal Called by the client for every notification. */
  offer(event: AnyNotification): void {
    if (this.ended || !this.matcher.matches(event)) return;
    if (this.waiter) {
      const { resolve } = this.waiter;
      this.waiter = undefined;
      resolve({ value: event, done: false });
    } else {
      this.queue.push(event);
    }
  }

  /** @internal Stop (with an error: iteration throws it after the buffered events). */
  end(error?: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    this.detach(this);
    if (this.waiter) {
      const { resolve, reject } = this.waiter;
      this.waiter = undefined;
      if (error) reject(error);
      else resolve({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<AnyNotification>> {
    const event = this.queue.shift();
    if (event) return Promise.resolve({ value: event, done: false });
    if (this.ended) {
      if (this.error) {
        const error = this.error;
        this.error = undefined; // thrown once
        return Promise.reject(error);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  return(): Promise<IteratorResult<AnyNotification>> {
    this.close();
    return Promise.resolve({ value: undefined, done: true });
  }

  /** Detach from the client; iteration ends after what is buffered. */
  close(): void {
    this.end();
  }

  [Symbol.asyncIterator](): NotificationIterator {
    return this;
  }
}
