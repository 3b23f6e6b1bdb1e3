// The appserver web client (docs/web.md): one page, plain ES modules, no build step.
//
// It talks JSON-RPC through client.js, the browser build of the Node client
// (clients/node, generated types and all). Each open thread is subscribed once with
// `afterSeq: 0`: the server replays its stored events, then streams live ones, and the
// client re-subscribes with the last `seq` it saw after a reconnect, so the view is built
// from events alone and no text is ever shown twice.

import { AppServerClient, DECISIONS } from "./client.js";
import { showApproval } from "./approval-view.js";
import { revealedText, showDiff } from "./exact-text.js";
import { codeBlock, renderMarkdown } from "./markdown.js";
import { openSettings, showModels, showStatus } from "./settings-view.js";
import { say, turnStatus } from "./words.js";

const PAGE_SIZE = 30;
const TOKEN_KEY = "appserver.token";
const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function details(summaryText, className, open = false) {
  const box = el("details", className);
  box.open = open;
  box.append(el("summary", null, summaryText));
  return box;
}

function pretty(value) {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value ?? {}, null, 2);
}

/** Put `text` on the clipboard (a plain-http page on another host has no Clipboard API). */
async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  const area = el("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "visually-hidden";
  document.body.append(area);
  area.select();
  document.execCommand("copy");
  area.remove();
  return undefined;
}

/** A "Copy" button for `text()` (read when clicked, so a streamed text is copied whole). */
function copyButton(label, text) {
  // The word is drawn by CSS (::before), so copying or reading a message's text never
  // picks up "Copy"; the label names it for screen readers.
  const button = el("button", "copy small");
  button.type = "button";
  button.setAttribute("aria-label", label);
  button.addEventListener("click", async () => {
    await copyText(text());
    button.dataset.copied = "true";
    setTimeout(() => delete button.dataset.copied, 1500);
  });
  return button;
}

/** Copy buttons on every code block of a rendered message. */
function copyCodeBlocks(root) {
  for (const pre of root.querySelectorAll("pre")) {
    const wrap = el("div", "code-wrap");
    pre.replaceWith(wrap);
    wrap.append(pre, copyButton("Copy the code", () => pre.textContent));
  }
  return root;
}

function when(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleString();
}

// ------------------------------------------------------------------ the page's fragment

/** `#token=...&thread=...`: the fragment never reaches a server. The token is taken as
 * typed up to the next `&thread=` / `&user=` (a `+` or `&` in it stays), percent-decoded,
 * and removed from the address bar at once. */
function readFragment() {
  const raw = location.hash.slice(1);
  const found = /(?:^|&)token=(.*?)(?=&(?:thread|user)=|$)/.exec(raw);
  if (found) {
    let token = found[1];
    try {
      token = decodeURIComponent(token);
    } catch {
      // not percent-encoded after all: keep it as typed
    }
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    const rest = (raw.slice(0, found.index) + raw.slice(found.index + found[0].length)).replace(/^&/, "");
    history.replaceState(null, "", rest ? `#${rest}` : location.pathname);
  }
  return new URLSearchParams(location.hash.slice(1));
}

function writeFragment(threadId) {
  const params = new URLSearchParams(location.hash.slice(1));
  params.delete("token");
  if (threadId) params.set("thread", threadId);
  else params.delete("thread");
  const hash = params.toString();
  history.replaceState(null, "", hash ? `#${hash}` : location.pathname);
}

// ------------------------------------------------------------------ state

const state = {
  client: null,
  identity: { channelName: "web", userId: "local" },
  threads: new Map(), // id -> summary
  cursor: undefined,
  views: new Map(), // id -> ThreadView
  current: null, // ThreadView shown
  drafting: false, // "New thread": the thread is started with its first message
  draftModel: undefined, // the model picked for that thread before it exists
  status: null, // workspace/status
  models: null, // model/list
  approvals: [], // pending {params, resolve}
  approvalShown: null,
  follow: true, // the chat is scrolled to its end
  found: { term: "", threads: new Map(), cursor: undefined }, // the server's search results
};

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

function setStatus(kind, text) {
  const status = $("status");
  status.dataset.state = kind;
  status.textContent = text;
}

async function attempt(what, fn) {
  try {
    showError("");
    return await fn();
  } catch (error) {
    showError(`${what} failed: ${error?.message ?? error}`);
    return undefined;
  }
}

// ------------------------------------------------------------------ one thread's view

class ThreadView {
  constructor(id) {
    this.id = id;
    this.root = el("div", "thread-view");
    this.root.dataset.threadId = id;
    this.plan = el("section", "plan");
    this.plan.hidden = true;
    this.plan.setAttribute("aria-label", "Plan");
    this.turnsBox = el("div", "turns");
    this.root.append(this.plan, this.turnsBox);
    this.turns = new Map(); // turnId -> {section, items, footer, usage}
    this.items = new Map(); // itemId -> {box, type, text, output, args, toolName, payload, frame}
    this.runningTurn = null;
    this.queue = [];
    this.queueKnown = false;
    this.queuePaused = null; // {turnId, reason}: the queue waits after a turn that did not complete
  }

  turn(turnId) {
    let turn = this.turns.get(turnId);
    if (!turn) {
      const section = el("section", "turn");
      section.dataset.turnId = turnId;
      const items = el("div", "items");
      const footer = el("footer", "turn-footer");
      const status = el("span", "turn-status");
      const usage = el("span", "usage");
      footer.append(status, usage);
      section.append(items, footer);
      this.turnsBox.append(section);
      turn = { section, items, footer, status, usage };
      this.turns.set(turnId, turn);
    }
    return turn;
  }

  setTurnState(turnObject, status, extra = "") {
    const turn = this.turn(turnObject.id);
    turn.section.dataset.status = status;
    turn.status.textContent = turnStatus(status, extra);
    if (turnObject.tokenUsage) this.setUsage(turn, turnObject.tokenUsage.inputTokens, turnObject.tokenUsage.outputTokens);
    if (status === "running") this.runningTurn = turnObject.id;
    else if (this.runningTurn === turnObject.id) this.runningTurn = null;
    if (state.current === this) updateComposer();
  }

  /** `turn/diff/updated`: the turn's whole diff so far, in one fold above its footer. */
  setTurnDiff(turnId, diff) {
    const turn = this.turn(turnId);
    if (!turn.diff) {
      turn.diff = details("", "turn-diff");
      turn.section.insertBefore(turn.diff, turn.footer);
    }
    const files = (String(diff).match(/^\+\+\+ /gm) ?? []).length;
    turn.diff.hidden = !diff;
    turn.diff.querySelector("summary").textContent = `Changes in this turn (${files} file${files === 1 ? "" : "s"})`;
    turn.diff.querySelector("pre")?.remove();
    turn.diff.append(diffBlock(diff, "turn-diff-text"));
  }

  setUsage(turn, input, output) {
    turn.usage.textContent = `${input ?? 0} in · ${output ?? 0} out tokens`;
  }

  // -------------------------------------------------------------- items

  item(turnId, item) {
    let entry = this.items.get(item.id);
    if (!entry) {
      const box = el("div", `item item-${item.type}`);
      box.dataset.itemId = item.id;
      box.dataset.type = item.type;
      entry = { box, type: item.type, text: "", output: "", args: "", toolName: "", payload: {}, frame: 0 };
      this.items.set(item.id, entry);
      this.turn(turnId).items.append(box);
    }
    return entry;
  }

  started(turnId, item) {
    const entry = this.item(turnId, item);
    this.fill(entry, item);
  }

  completed(turnId, item) {
    const entry = this.item(turnId, item);
    entry.box.dataset.status = "completed";
    this.fill(entry, item, true);
  }

  delta(params, kind) {
    const entry = this.items.get(params.itemId);
    if (!entry) return;
    if (kind === "output") entry.output += params.delta;
    else if (kind === "args") {
      entry.args += params.delta;
      if (params.toolName) entry.toolName = params.toolName;
    } else entry.text += params.delta;
    entry.box.dataset.status = "streaming";
    this.schedule(entry);
  }

  schedule(entry) {
    if (entry.frame) return;
    entry.frame = requestAnimationFrame(() => {
      entry.frame = 0;
      this.draw(entry);
    });
  }

  fill(entry, item, final = false) {
    const payload = item.payload ?? {};
    entry.payload = payload;
    if (final || payload.text !== undefined) {
      if (typeof payload.text === "string" && (final || payload.text.length >= entry.text.length)) entry.text = payload.text;
    }
    if (typeof payload.aggregatedOutput === "string" && (final || payload.aggregatedOutput.length >= entry.output.length)) {
      entry.output = payload.aggregatedOutput;
    }
    if (payload.arguments !== undefined && final) entry.args = typeof payload.arguments === "string" ? payload.arguments : JSON.stringify(payload.arguments);
    if (payload.toolName) entry.toolName = payload.toolName;
    if (entry.frame) {
      cancelAnimationFrame(entry.frame);
      entry.frame = 0;
    }
    this.draw(entry);
  }

  draw(entry) {
    const { box, payload } = entry;
    // A fold the reader opened or closed stays so while the item streams.
    const fold = box.querySelector(":scope > details");
    const wasOpen = fold ? fold.open : undefined;
    box.textContent = "";
    switch (entry.type) {
      case "userMessage": {
        const mode = payload.deliveryMode && payload.deliveryMode !== "normal" ? payload.deliveryMode : "";
        if (mode) box.append(el("span", "badge", mode === "guidance" ? "steered" : mode));
        box.append(el("div", "user-text", entry.text));
        box.append(copyButton("Copy the message", () => entry.text));
        break;
      }
      case "agentMessage":
        box.append(copyCodeBlocks(renderMarkdown(entry.text)));
        box.append(copyButton("Copy the reply", () => entry.text));
        break;
      case "reasoningContent": {
        const fold = details("Reasoning", "reasoning");
        fold.append(el("div", "reasoning-text", entry.text));
        box.append(fold);
        break;
      }
      case "toolCall":
        box.append(toolCallView(entry));
        break;
      case "commandExecution": {
        const fold = details(`$ ${revealedText(payload.command ?? "")}`, "command", true);
        const pre = el("pre", "command-output", entry.output);
        fold.append(pre);
        const facts = [];
        if (payload.exitCode !== undefined && payload.exitCode !== null) facts.push(`exit code ${payload.exitCode}`);
        if (payload.durationMs !== undefined) facts.push(`${payload.durationMs} ms`);
        if (payload.workingDirectory) facts.push(`in ${payload.workingDirectory}`);
        if (facts.length) fold.append(el("div", "muted", facts.join(" · ")));
        box.append(fold);
        break;
      }
      case "toolResult": {
        const ok = payload.success !== false;
        const fold = details(ok ? "Result" : "Failed", ok ? "tool-result" : "tool-result failed");
        fold.append(el("pre", "result-text", typeof payload.result === "string" ? payload.result : pretty(payload.result)));
        box.append(fold);
        if (Array.isArray(payload.changes) && payload.changes.length) box.append(changesView(payload.changes));
        break;
      }
      case "approvalRequest":
        box.append(el("div", "muted", `Approval asked: ${payload.operation ?? ""} (${payload.target ?? ""})`));
        break;
      case "approvalResponse":
        box.append(el("div", "muted approval-word", say("decision", payload.decision ?? (payload.approved ? "accept" : "decline"))));
        break;
      case "error":
        box.append(el("div", "error", payload.message ?? "error"));
        break;
      default: {
        const text = entry.text || payload.message || payload.text || "";
        box.append(el("div", "muted", text ? `${entry.type}: ${text}` : entry.type));
      }
    }
    const again = box.querySelector(":scope > details");
    if (again && wasOpen !== undefined) again.open = wasOpen;
    if (state.current === this) stickToBottom();
  }

  setPlan(plan) {
    this.plan.textContent = "";
    this.plan.hidden = false;
    const fold = details(`Plan: ${plan.title}`, "plan-box", true);
    if (plan.overview) fold.append(el("p", "muted", plan.overview));
    const list = el("ol", "todos");
    for (const todo of plan.todos ?? []) {
      const li = el("li", `todo todo-${todo.status}`);
      li.dataset.status = todo.status;
      li.append(el("span", "todo-status", say("todo", todo.status)), " ", todo.content);
      if (todo.priority) li.append(el("span", `priority priority-${todo.priority}`, todo.priority));
      list.append(li);
    }
    fold.append(list);
    if (plan.content) fold.append(renderMarkdown(plan.content));
    this.plan.append(fold);
  }
}

/** A tool call: its name and arguments (what a file tool changed is shown from the
 * server's diff, on its result). */
function toolCallView(entry) {
  const name = entry.toolName || "tool";
  let args = null;
  try {
    args = entry.args ? JSON.parse(entry.args) : null;
  } catch {
    args = null; // still streaming
  }
  const target = args && typeof args.path === "string" ? ` ${args.path}` : args && typeof args.command === "string" ? ` ${args.command}` : "";
  const summary = revealedText(`${name}${target}`); // what ran, hidden characters shown
  const fold = details(summary, "tool-call");
  fold.append(codeBlock(args ? JSON.stringify(args, null, 2) : entry.args, args ? "json" : ""));
  return fold;
}

/** A unified diff from the server, one coloured line each (hidden characters revealed). */
function diffBlock(diff, className) {
  const pre = el("pre", `diff ${className}`);
  showDiff(pre, diff);
  return pre;
}

/** What a file tool applied (`toolResult.changes`): each file's diff, open. */
function changesView(changes) {
  const box = el("div", "changes");
  for (const change of changes) {
    const moved = change.movePath ? ` → ${change.movePath}` : "";
    const fold = details(revealedText(`${change.kind} ${change.path}${moved}`), "file-change", true);
    fold.dataset.path = change.path;
    fold.append(diffBlock(change.diff ?? "", "change-diff"));
    box.append(fold);
  }
  return box;
}

/** Follow new output, unless the reader scrolled up to read. */
function stickToBottom(force = false) {
  const chat = $("chat");
  if (force) state.follow = true;
  if (state.follow) chat.scrollTop = chat.scrollHeight;
}

// ------------------------------------------------------------------ notifications

function onNotification(event) {
  const { method, params, threadId } = event;
  if (method === "thread/started") return addThread(params.thread, true);
  if (method === "thread/renamed") return renameThread(threadId, params.displayName);
  if (method === "thread/runtimeChanged") return setThreadRuntime(threadId, params.runtime);
  if (method === "thread/deleted") return dropThread(threadId);
  if (method === "thread/statusChanged" && params.newStatus === "archived") return dropThread(threadId);
  if (method === "workspace/configChanged") return void refreshWorkspace();
  const view = threadId ? state.views.get(threadId) : undefined;
  if (!view) return;
  switch (method) {
    case "turn/started":
      view.setTurnState(params.turn, "running");
      break;
    case "turn/completed":
      view.setTurnState(params.turn, "completed");
      break;
    case "turn/failed":
      view.setTurnState(params.turn, "failed", params.error);
      break;
    case "turn/cancelled":
      view.setTurnState(params.turn, "cancelled", params.reason);
      break;
    case "item/started":
      view.started(params.turnId, params.item);
      break;
    case "item/completed":
      view.completed(params.turnId, params.item);
      break;
    case "item/agentMessage/delta":
    case "item/reasoning/delta":
      view.delta(params, "text");
      break;
    case "item/toolCall/argumentsDelta":
      view.delta(params, "args");
      break;
    case "item/commandExecution/outputDelta":
      view.delta(params, "output");
      break;
    case "turn/diff/updated":
      view.setTurnDiff(params.turnId, params.diff ?? "");
      break;
    case "item/usage/delta":
      view.setUsage(view.turn(params.turnId), params.totalInputTokens ?? params.inputTokens, params.totalOutputTokens ?? params.outputTokens);
      break;
    case "item/approval/resolved":
      resolvedElsewhere(params.item?.payload?.requestId);
      break;
    case "plan/updated":
      view.setPlan(params);
      break;
    case "thread/queue/updated":
      view.queue = params.queuedInputs ?? [];
      view.queuePaused = params.paused ?? null;
      view.queueKnown = true;
      if (state.current === view) renderQueue();
      break;
  }
}

// ------------------------------------------------------------------ thread list

function threadName(summary) {
  return summary.displayName || "New thread";
}

function threadButton(summary) {
  const li = el("li");
  li.dataset.threadId = summary.id;
  const button = el("button", "thread-item");
  button.type = "button";
  button.dataset.threadId = summary.id;
  button.append(el("span", "thread-name", threadName(summary)), el("span", "thread-meta", when(summary.lastActiveAt)));
  if (summary.runtime?.running) button.classList.add("running");
  if (state.current?.id === summary.id) button.setAttribute("aria-current", "true");
  button.addEventListener("click", () => openThread(summary.id));
  li.append(button);
  return li;
}

function renderThreadList() {
  const list = $("thread-list");
  const query = $("thread-search").value.trim();
  list.textContent = "";
  if (!query) {
    for (const summary of state.threads.values()) list.append(threadButton(summary));
    $("more-threads").hidden = !state.cursor;
    return;
  }
  // The threads loaded here that match at once, then the server's matches (thread/list searchTerm).
  const needle = query.toLowerCase();
  const shown = new Set();
  for (const summary of state.threads.values()) {
    if (`${threadName(summary)} ${summary.id}`.toLowerCase().includes(needle)) {
      shown.add(summary.id);
      list.append(threadButton(summary));
    }
  }
  if (state.found.term === query) {
    for (const summary of state.found.threads.values()) {
      if (!shown.has(summary.id)) list.append(threadButton(state.threads.get(summary.id) ?? summary));
    }
  }
  $("more-threads").hidden = !(state.found.term === query && state.found.cursor);
}

async function loadThreads(more = false) {
  const before = new Set(state.threads.keys());
  const result = await attempt("Listing threads", () =>
    state.client.threadList({ identity: state.identity, limit: PAGE_SIZE, ...(more && state.cursor ? { cursor: state.cursor } : {}) }),
  );
  if (!result) return;
  if (!more) {
    // A thread started while the list was asked for (`thread/started`) stays, first.
    const arrived = [...state.threads.values()].filter((summary) => !before.has(summary.id));
    state.threads = new Map(arrived.map((summary) => [summary.id, summary]));
  }
  for (const summary of result.data) state.threads.set(summary.id, summary);
  state.cursor = result.nextCursor;
  renderThreadList();
}

/** Filter the list at once, then ask the server for every match (`thread/list` with `searchTerm`). */
async function search(more = false) {
  renderThreadList();
  const term = $("thread-search").value.trim();
  if (!term) return;
  if (!more) await new Promise((resolve) => setTimeout(resolve, 150)); // typing: ask once it pauses
  if ($("thread-search").value.trim() !== term) return; // a newer query asks for itself
  const cursor = more && state.found.term === term ? state.found.cursor : undefined;
  const result = await attempt("Searching threads", () =>
    state.client.threadList({ identity: state.identity, limit: PAGE_SIZE, searchTerm: term, ...(cursor ? { cursor } : {}) }),
  );
  if (!result || $("thread-search").value.trim() !== term) return;
  if (!cursor) state.found = { term, threads: new Map(), cursor: undefined };
  for (const summary of result.data) state.found.threads.set(summary.id, summary);
  state.found.cursor = result.nextCursor;
  renderThreadList();
}

function addThread(thread, first) {
  if (!thread || state.threads.has(thread.id) || thread.userId !== state.identity.userId) return;
  const summary = { ...thread };
  if (first) state.threads = new Map([[thread.id, summary], ...state.threads]);
  else state.threads.set(thread.id, summary);
  renderThreadList();
}

function renameThread(threadId, name) {
  const summary = state.threads.get(threadId);
  if (summary) {
    summary.displayName = name;
    renderThreadList();
  }
  if (state.current?.id === threadId) $("thread-title").textContent = name;
}

function setThreadRuntime(threadId, runtime) {
  const summary = state.threads.get(threadId);
  if (!summary) return;
  summary.runtime = runtime;
  const button = document.querySelector(`.thread-item[data-thread-id="${CSS.escape(threadId)}"]`);
  button?.classList.toggle("running", Boolean(runtime?.running));
}

function dropThread(threadId) {
  state.threads.delete(threadId);
  state.views.delete(threadId);
  if (state.current?.id === threadId) showView(null);
  renderThreadList();
}

// ------------------------------------------------------------------ opening threads

async function openThread(threadId) {
  let view = state.views.get(threadId);
  if (!view) {
    view = new ThreadView(threadId);
    state.views.set(threadId, view);
    // Every stored event of the thread, then live ones; after a reconnect the client
    // re-subscribes from the last seq it saw.
    const ok = await attempt("Opening the thread", () => state.client.threadSubscribe({ threadId, afterSeq: 0 }));
    if (ok === undefined) {
      state.views.delete(threadId);
      return;
    }
    // The queue as it is now, unless a thread/queue/updated already said.
    const read = await attempt("Reading the thread", () => state.client.threadRead({ threadId }));
    if (read && !view.queueKnown) view.queue = read.thread.queuedInputs ?? [];
    if (read) view.config = read.thread.configuration ?? {};
  }
  state.drafting = false;
  showView(view);
  closeSidebar();
}

function showView(view) {
  state.current = view;
  const chat = $("chat");
  chat.textContent = "";
  if (view) chat.append(view.root);
  else if (state.drafting) chat.append(el("p", "empty", "New thread: it starts when you send the first message."));
  else chat.append(el("p", "empty", "Start a new thread or pick one from the list."));
  const summary = view ? state.threads.get(view.id) : null;
  $("thread-title").textContent = view ? (summary ? threadName(summary) : view.id) : state.drafting ? "New thread" : "";
  $("thread-bar").hidden = !view;
  showModels(state.models, currentModel());
  writeFragment(view?.id);
  renderThreadList();
  renderQueue();
  updateComposer();
  stickToBottom(true);
  if (view || state.drafting) $("composer").focus();
}

/** "New thread": an empty page; the thread is started with its first message, so no
 * empty thread is ever left in the list. */
function newThread() {
  state.drafting = true;
  state.draftModel = undefined;
  showView(null);
  closeSidebar();
}

/** Start the drafted thread (with the model picked for it) and open it. */
async function startDraft() {
  const config = state.draftModel ? { config: { model: state.draftModel } } : {};
  const result = await attempt("Starting a thread", () => state.client.threadStart({ identity: state.identity, ...config }));
  if (!result) return null;
  addThread(result.thread, true);
  await openThread(result.thread.id);
  return state.current?.id === result.thread.id ? state.current : null;
}

// ------------------------------------------------------------------ workspace, model, thread actions

/** The model the shown thread (or the drafted one) uses. */
function currentModel() {
  if (state.current) return state.current.config?.model || state.status?.model;
  return state.draftModel || state.status?.model;
}

/** What is in use (header) and the provider's models (picker). */
async function refreshWorkspace() {
  const status = await attempt("Reading the workspace", () => state.client.workspaceStatus());
  if (!status) return;
  state.status = status;
  showStatus(status);
  state.models = await attempt("Listing models", () => state.client.modelList());
  showModels(state.models, currentModel());
}

/** The picker changed: the shown thread's configuration gets the model (`thread/config/update`
 * replaces the whole configuration, so the rest is sent back as it was). */
async function pickModel(model) {
  const view = state.current;
  if (!view) {
    state.draftModel = model;
    return;
  }
  const config = { ...(view.config ?? {}), model };
  const done = await attempt("Switching the model", () => state.client.threadConfigUpdate({ threadId: view.id, config }));
  if (done !== undefined) view.config = config;
  showModels(state.models, currentModel());
}

function renameCurrent() {
  const view = state.current;
  if (!view) return;
  const dialog = $("rename-dialog");
  $("rename-input").value = threadName(state.threads.get(view.id) ?? {});
  dialog.returnValue = "";
  dialog.onclose = () => {
    const name = $("rename-input").value.trim();
    if (dialog.returnValue === "save" && name) {
      void attempt("Renaming", () => state.client.threadRename({ threadId: view.id, displayName: name })).then(
        (done) => done !== undefined && renameThread(view.id, name),
      );
    }
    refocusComposer();
  };
  dialog.showModal();
  $("rename-input").select();
}

async function archiveCurrent() {
  const view = state.current;
  if (!view) return;
  const done = await attempt("Archiving", () => state.client.threadArchive({ threadId: view.id }));
  if (done !== undefined) dropThread(view.id);
}

function deleteCurrent() {
  const view = state.current;
  if (!view) return;
  const dialog = $("delete-dialog");
  dialog.returnValue = "";
  dialog.onclose = async () => {
    if (dialog.returnValue !== "delete") return refocusComposer();
    const done = await attempt("Deleting", () => state.client.threadDelete({ threadId: view.id }));
    if (done !== undefined) dropThread(view.id);
  };
  dialog.showModal();
  $("delete-confirm").focus();
}

// ------------------------------------------------------------------ composer

function updateComposer() {
  const view = state.current;
  const running = Boolean(view?.runningTurn);
  const usable = (Boolean(view) || state.drafting) && Boolean(state.client);
  $("composer").disabled = !usable;
  $("send").disabled = !usable;
  $("send").textContent = running ? "Queue" : "Send";
  $("steer").disabled = !usable || !running;
  $("interrupt").disabled = !usable || !running;
  document.body.dataset.turn = running ? "running" : "idle";
}

function takeMessage() {
  const box = $("composer");
  const text = box.value;
  if (!text.trim()) return null;
  box.value = "";
  return [{ type: "text", text }];
}

async function send() {
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

async function steer() {
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

async function interrupt() {
  const view = state.current;
  if (!view?.runningTurn) return;
  await attempt("Interrupting", () => state.client.turnInterrupt({ threadId: view.id, turnId: view.runningTurn }));
}

// The queued inputs still waiting to run (not those handed to the running turn).
function waiting(view) {
  return (view?.queue ?? []).filter((queued) => (queued.status ?? "queued") === "queued");
}

function renderQueue() {
  const list = $("queue");
  list.textContent = "";
  const view = state.current;
  const queue = view?.queue ?? [];
  list.hidden = queue.length === 0;
  if (view && !view.runningTurn && view.queuePaused && waiting(view).length > 0) {
    const note = el("li", "queue-paused", say("queuePaused", view.queuePaused.reason));
    note.setAttribute("role", "status");
    list.append(note);
  }
  for (const queued of queue) {
    const li = el("li", "queued");
    li.dataset.status = queued.status ?? "queued";
    li.append(el("span", "queued-text", queued.displayText));
    const badge = el("span", "badge", queued.status === "guidancePending" ? "steering" : "queued");
    badge.title = say("queued", queued.status ?? "queued");
    li.append(badge);
    const remove = el("button", "small", "Remove");
    remove.type = "button";
    remove.setAttribute("aria-label", `Remove queued message: ${queued.displayText}`);
    remove.addEventListener("click", () =>
      attempt("Removing", () => state.client.turnQueueRemove({ threadId: queued.threadId, queuedInputId: queued.id })),
    );
    li.append(remove);
    list.append(li);
  }
}

// ------------------------------------------------------------------ approvals

function approvalHandler(params) {
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
  // Exactly what runs or changes; "Allow once" is focused only when all of it fits.
  showApproval(dialog, params, summary ? threadName(summary) : params.threadId);
}

function decide(decision) {
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

/** Back to the message box once a dialog has closed (after the browser restored focus). */
function refocusComposer() {
  requestAnimationFrame(() => {
    const box = $("composer");
    if (document.querySelector("dialog[open]")) return;
    box.blur();
    box.focus();
  });
}

/** Another tab (or client) answered first: drop our question. */
function resolvedElsewhere(requestId) {
  for (const pending of [...state.approvals]) {
    if (pending.params.requestId === requestId) finishApproval(pending, { decision: "decline" });
  }
}

// ------------------------------------------------------------------ sidebar on small screens

function closeSidebar() {
  document.body.classList.remove("sidebar-open");
  $("threads-toggle").setAttribute("aria-expanded", "false");
}

function toggleSidebar() {
  const open = !document.body.classList.contains("sidebar-open");
  document.body.classList.toggle("sidebar-open", open);
  $("threads-toggle").setAttribute("aria-expanded", String(open));
  if (open) $("new-thread").focus();
}

// ------------------------------------------------------------------ connecting

function websocketUrl() {
  return `${location.protocol === "https:" ? "wss:" : "ws:"}//${location.host}/ws`;
}

function askToken(message) {
  const dialog = $("token-dialog");
  const error = $("token-error");
  error.textContent = message ?? "";
  error.hidden = !message;
  if (!dialog.open) dialog.showModal();
  $("token-input").focus();
}

async function connect() {
  const needsToken = document.querySelector('meta[name="appserver-auth"]')?.content === "token";
  const token = sessionStorage.getItem(TOKEN_KEY) ?? undefined;
  if (needsToken && !token) {
    setStatus("disconnected", "token needed");
    askToken();
    return;
  }
  setStatus("connecting", "connecting…");
  let client;
  try {
    client = await AppServerClient.connect(websocketUrl(), {
      token,
      clientName: "appserver-web",
      clientTitle: "appserver web client",
      capabilities: { approvalSupport: true, streamingSupport: true, commandExecutionStreaming: true },
      approvalHandler,
      requestTimeoutMs: 30_000,
      backoffInitialMs: 250,
      backoffMaxMs: 5_000,
      // The client's warnings (a handler that threw, a dropped connection) go to the console.
      logger: { warn: (...args) => console.warn(...args) },
    });
  } catch (error) {
    setStatus("disconnected", "not connected");
    if (needsToken) {
      sessionStorage.removeItem(TOKEN_KEY);
      askToken("The server refused the connection: wrong token? (Too many wrong tokens lock you out for a while.)");
    } else {
      showError(`Could not connect to ${websocketUrl()}: ${error?.message ?? error}`);
    }
    return;
  }
  state.client = client;
  client.onAny(onNotification);
  client.onDisconnect(() => setStatus("reconnecting", "reconnecting…"));
  client.onReconnect(() => {
    setStatus("connected", "connected");
    void loadThreads();
  });
  void client.closed.then(() => setStatus("disconnected", "disconnected"));
  setStatus("connected", "connected");
  updateComposer();
  await refreshWorkspace();
  await loadThreads();
  const wanted = new URLSearchParams(location.hash.slice(1)).get("thread");
  if (wanted) await openThread(wanted);
}

// ------------------------------------------------------------------ wiring

function wire() {
  // A pasted #thread= link, or Back/Forward between threads, opens that thread.
  window.addEventListener("hashchange", () => {
    const wanted = new URLSearchParams(location.hash.slice(1)).get("thread");
    if (wanted && state.client && state.current?.id !== wanted) void openThread(wanted);
  });
  $("composer-form").addEventListener("submit", (event) => {
    event.preventDefault();
    void send();
  });
  $("composer").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      void send();
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !document.querySelector("dialog[open]")) {
      if (document.body.classList.contains("sidebar-open")) {
        closeSidebar();
        $("threads-toggle").focus(); // back where the list was opened from, not the page itself
      } else void interrupt();
    }
  });
  $("steer").addEventListener("click", () => void steer());
  $("interrupt").addEventListener("click", () => void interrupt());
  $("new-thread").addEventListener("click", newThread);
  $("model-select").addEventListener("change", (event) => void pickModel(event.target.value));
  $("settings-open").addEventListener("click", () =>
    void attempt("Opening the settings", () => openSettings(state.client, refreshWorkspace)),
  );
  $("thread-rename").addEventListener("click", renameCurrent);
  $("thread-archive").addEventListener("click", () => void archiveCurrent());
  $("thread-delete").addEventListener("click", deleteCurrent);
  $("more-threads").addEventListener("click", () =>
    void ($("thread-search").value.trim() ? search(true) : loadThreads(true)),
  );
  $("thread-search").addEventListener("input", () => void search());
  $("threads-toggle").addEventListener("click", toggleSidebar);
  $("chat").addEventListener("scroll", () => {
    const chat = $("chat");
    state.follow = chat.scrollHeight - chat.scrollTop - chat.clientHeight < 60;
  });
  for (const button of document.querySelectorAll("#approval .decision")) {
    if (!DECISIONS.includes(button.dataset.decision)) continue;
    button.addEventListener("click", () => decide(button.dataset.decision));
  }
  // Esc in the approval dialog decides nothing: the question stays until answered.
  $("approval").addEventListener("cancel", (event) => event.preventDefault());
  $("approval-form").addEventListener("submit", (event) => event.preventDefault());
  $("token-dialog").addEventListener("cancel", (event) => event.preventDefault());
  $("token-form").addEventListener("submit", () => {
    const token = $("token-input").value.trim();
    if (!token) return;
    $("token-input").value = "";
    sessionStorage.setItem(TOKEN_KEY, token);
    void connect();
  });
  window.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    showError(String(event.reason?.message ?? event.reason));
  });
}

const fragment = readFragment();
// `#user=NAME`: whose threads to list and start (the terminal chat's are your login name's).
if (fragment.get("user")) state.identity.userId = fragment.get("user");
writeFragment(fragment.get("thread"));
wire();
void connect();
