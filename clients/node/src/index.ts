/**
 * appserver-client: a TypeScript client for the appserver JSON-RPC 2.0 AppServer.
 *
 *     import { AppServerClient } from "appserver-client";
 *     const client = await AppServerClient.spawn();          // `appserver app-server` over stdio
 *     const { thread } = await client.threadStart({ identity: { channelName: "cli", userId: "me" } });
 *     const outcome = await client.runTurn(thread.id, "hello");
 *     console.log(outcome.text);                              // "You said: hello" (offline model)
 *     await client.close();
 */

export * from "./generated.js";
export * from "./errors.js";
export {
  AppServerClient,
  DECISIONS,
  DEFAULT_CLIENT_NAME,
  VERSION,
  type ApprovalAnswer,
  type ApprovalHandler,
  type ChannelToolCallHandler,
  type ClientOptions,
  type ConnectOptions,
  type Decision,
  type InputPart,
  type Logger,
  type ReadTextFileHandler,
  type RequestHandler,
  type RunTurnOptions,
  type SpawnOptions,
  type TerminalHandler,
  type ToolCallHandler,
  type TurnOutcome,
  type WriteTextFileHandler,
} from "./client.js";
export {
  Matcher,
  NotificationIterator,
  TERMINAL_TURN_METHODS,
  makeEvent,
  type AnyNotification,
  type NotificationEvent,
  type NotificationFilter,
} from "./notifications.js";
export {
  MAX_FRAME_BYTES,
  StdioTransport,
  WebSocketTransport,
  websocketUrl,
  type StderrMode,
  type StdioOptions,
  type Transport,
  type TransportEvents,
  type WebSocketOptions,
} from "./transport.js";
