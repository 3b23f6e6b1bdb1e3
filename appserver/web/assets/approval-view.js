// The approval dialog's content (docs/web.md): what would run or change, exactly.
//
// A command (and the directory) is shown as it runs: its lines numbered when there are
// several, invisible and control characters as ⟨U+XXXX⟩ badges. A file write or edit
// shows the server's unified diff of the real file. The dialog opens at the start of
// what it shows; "Allow once" has the focus only when everything fits unscrolled,
// otherwise "Decline" has it, so Enter never allows what was not seen.

import { revealedText, showDiff, showExact } from "./exact-text.js";

const $ = (id) => document.getElementById(id);

/** Fill the dialog for `params` (an `item/approval/request`), open it and pick the focus. */
export function showApproval(dialog, params, threadLabel) {
  $("approval-title").textContent = `Approve ${revealedText(params.approvalType)}?`;
  $("approval-thread").textContent = `Thread: ${revealedText(threadLabel)}`;
  showExact($("approval-operation"), params.operation);
  showExact($("approval-target"), params.target);
  showExact($("approval-reason"), params.reason || "—", { numbered: false });
  const change = $("approval-change");
  const diff = typeof params.diff === "string" && params.diff ? params.diff : null;
  change.hidden = diff === null;
  showDiff($("approval-diff"), diff ?? "");
  showScopes(params);
  if (!dialog.open) dialog.showModal();
  focusForReading(dialog);
}

function showScopes(params) {
  const scopes = $("approval-scopes");
  scopes.querySelectorAll("label").forEach((label) => label.remove());
  // Each choice is labelled by what it covers (the request's own words): a scope's name
  // ("exact") can cover more than it says, e.g. a file operation anywhere in the workspace.
  const offered = params.sessionScopes?.length
    ? params.sessionScopes
    : [{ scope: "exact", scopeKey: params.scopeKey, description: `this ${params.approvalType} operation for the rest of this thread` }];
  offered.forEach((scope, index) => {
    const label = document.createElement("label");
    label.className = "scope";
    const radio = document.createElement("input");
    radio.type = "radio";
    radio.name = "scope";
    radio.value = scope.scope;
    radio.checked = index === 0;
    label.dataset.scope = scope.scope;
    label.append(radio, ` ${revealedText(scope.description || scope.scopeKey || "")}`);
    scopes.append(label);
  });
}

function overflows(node) {
  return node.scrollHeight > node.clientHeight + 1 || node.scrollWidth > node.clientWidth + 1;
}

/** Scroll everything back to its start; focus "Allow once" only if nothing is cut off. */
function focusForReading(dialog) {
  const boxes = [...dialog.querySelectorAll(".scroll-box")].filter((box) => !box.closest("[hidden]"));
  const note = $("approval-overflow");
  note.hidden = true;
  const atStart = () => {
    for (const node of [dialog, ...boxes]) {
      node.scrollTop = 0;
      node.scrollLeft = 0;
    }
  };
  atStart();
  const fits = !overflows(dialog) && !boxes.some(overflows);
  dialog.dataset.fits = String(fits);
  note.hidden = fits;
  const button = dialog.querySelector(fits ? '[data-decision="accept"]' : '[data-decision="decline"]');
  button.focus({ preventScroll: true });
  atStart();
}
