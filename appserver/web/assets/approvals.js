// The approval questions the server asks (docs/web.md): one dialog at a time, in order;
// asked again after a reconnect or answered elsewhere. The dialog's content is
// approval-view.js.

import { showApproval } from "./approval-view.js";
import { $, refocusComposer, state } from "./page.js";
import { threadName } from "./threads.js";

// ------------------------------------------------------------------ approvals

export function approvalHandler(params) {
  return new Promise((resolve) => {
    // Asked again after a reconnect: the new question replaces the old one (whose
    // connection is gone), and a dialog already showing it stays as it is.
    const earlier = state.approvals.find((entry) => entry.params.requestId === params.requestId);
    if (earlier) {
      const stale = earlier.resolve;
      earlier.resolve = resolve;
      earlier.params = params;
      stale({ decision: "decline" });
      return;
    }
    state.approvals.push({ params, resolve });
    nextApproval();
  });
}

function nextApproval() {
  const dialog = $("approval");
  if (state.approvalShown || state.approvals.length === 0) return;
  const pending = state.approvals[0];
  state.approvalShown = pending;
  const { params } = pending;
  const summary = state.threads.get(params.threadId);
  // A SubAgent child asks through its parent's tab: it is named by its nickname.
  const child = params.subAgent?.agentNickname ? `${params.subAgent.agentNickname} (a SubAgent)` : "";
  // Exactly what runs or changes; "Allow once" is focused only when all of it fits.
  showApproval(dialog, params, summary ? threadName(summary) : child || params.threadId);
}

export function decide(decision) {
  const pending = state.approvalShown;
  if (!pending) return;
  const answer = { decision };
  if (decision === "acceptForSession") {
    const scope = document.querySelector('#approval-scopes input[name="scope"]:checked');
    if (scope) answer.scope = scope.value;
  }
  finishApproval(pending, answer);
}

function finishApproval(pending, answer) {
  state.approvals = state.approvals.filter((entry) => entry !== pending);
  if (state.approvalShown === pending) {
    state.approvalShown = null;
    $("approval").close();
  }
  pending.resolve(answer);
  nextApproval();
  if (!state.approvalShown) refocusComposer();
}

/** Another tab (or client) answered first: drop our question. */
export function resolvedElsewhere(requestId) {
  for (const pending of [...state.approvals]) {
    if (pending.params.requestId === requestId) finishApproval(pending, { decision: "decline" });
  }
}
