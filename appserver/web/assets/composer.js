// The message box's actions (docs/web.md): send (or queue behind a running turn), steer
// the running turn, interrupt it.

import { $, attempt, state, stickToBottom } from "./page.js";
import { waiting } from "./thread-view.js";
import { startDraft } from "./threads.js";

function takeMessage() {
  const box = $("composer");
  const text = box.value;
  if (!text.trim()) return null;
  box.value = "";
  return [{ type: "text", text }];
}

export async function send() {
  let view = state.current;
  if (!view && !state.drafting) return;
  const input = takeMessage();
  if (!input) return;
  if (!view) {
    view = await startDraft();
    if (!view) {
      $("composer").value = input[0].text; // not started: the message is kept
      return;
    }
  }
  stickToBottom(true);
  // Behind a running turn, or behind inputs that wait (a paused queue): queued, so the
  // older messages run first (the server starts the oldest waiting one).
  if (view.runningTurn || waiting(view).length > 0) {
    await attempt("Queueing", () => state.client.turnEnqueue({ threadId: view.id, input }));
    return;
  }
  const result = await attempt("Sending", () => state.client.turnStart({ threadId: view.id, input }));
  if (result?.turn && result.turn.status === "running" && !view.turns.has(result.turn.id)) view.setTurnState(result.turn, "running");
}

export async function steer() {
  const view = state.current;
  if (!view?.runningTurn) return;
  const input = takeMessage();
  if (!input) return;
  const turnId = view.runningTurn;
  const queued = await attempt("Queueing", () => state.client.turnEnqueue({ threadId: view.id, input }));
  if (!queued) return;
  await attempt("Steering", () =>
    state.client.turnSteer({ threadId: view.id, expectedTurnId: turnId, queuedInputId: queued.queuedInput.id }),
  );
}

export async function interrupt() {
  const view = state.current;
  if (!view?.runningTurn) return;
  await attempt("Interrupting", () => state.client.turnInterrupt({ threadId: view.id, turnId: view.runningTurn }));
}
