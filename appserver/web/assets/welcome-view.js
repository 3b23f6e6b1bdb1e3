// A new thread's empty page (docs/web.md): the welcome suggestions the server keeps for the
// workspace (`welcome/suggestions`, re-read when `welcome/suggestionsUpdated` says they
// changed). Clicking one puts its prompt in the message box; nothing is sent until you do.

import { $, el, state } from "./page.js";

let shown = null; // the suggestions' list on the page, while a new thread is drafted

/** The empty page of a new thread: what it is, and the suggestions once they are read. */
export function draftPage() {
  const page = el("div", "draft");
  const list = el("ul", "welcome-suggestions");
  list.setAttribute("aria-label", "Suggestions");
  list.hidden = true;
  page.append(el("p", "empty", "New thread: it starts when you send the first message."), list);
  shown = list;
  void load(list);
  return page;
}

/** `welcome/suggestionsUpdated`: show the new ones if a new thread's page is open. */
export function suggestionsUpdated(result) {
  if (shown?.isConnected) render(shown, result);
}

async function load(list) {
  let result;
  try {
    result = await state.client?.welcomeSuggestions({ identity: state.identity });
  } catch (error) {
    // A server without them (-32601), or one that could not answer: the page is only emptier.
    console.warn("welcome/suggestions:", error?.message ?? error);
    return;
  }
  if (result && list.isConnected) render(list, result);
}

function render(list, result) {
  list.textContent = "";
  for (const item of result.items ?? []) {
    const button = el("button", "suggestion");
    button.type = "button";
    button.title = item.prompt;
    button.append(el("strong", null, item.title));
    if (item.reason) button.append(el("small", null, item.reason));
    button.addEventListener("click", () => {
      const box = $("composer");
      box.value = item.prompt;
      box.focus();
      box.setSelectionRange(box.value.length, box.value.length);
    });
    const entry = el("li");
    entry.append(button);
    list.append(entry);
  }
  list.hidden = list.childElementCount === 0;
}
