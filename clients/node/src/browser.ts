/**
 * The browser build's entry point (`npm run build:browser` writes it to
 * appserver/web/assets/client.js, an ES module): the same client and generated
 * types as the Node package, on the browser's WebSocket
 * (`browser_transport.ts` stands in for `transport.ts`).
 *
 *     import { AppServerClient } from "./client.js";
 *     const client = await AppServerClient.connect("ws://127.0.0.1:9100/ws", { token });
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
  type ClientOptions,
  type ConnectOptions,
  type Decision,
  type InputPart,
  type RunTurnOptions,
  type TurnOutcome,
} from "./client.js";
export { Matcher, NotificationIterator, TERMINAL_TURN_METHODS, makeEvent } from "./notifications.js";
export { WebSocketTransport, websocketUrl } from "./browser_transport.js";
