// The thread list (loading, searching, names, live changes, SubAgent children nested
// under their parent) and opening a thread: its view, subscribed from its first event,
// or a drafted "New thread" (docs/web.md).

import { $, attempt, closeSidebar, el, state, stickToBottom, updateComposer, writeFragment } from "./page.js";
import { showModels } from "./settings-view.js";
import {
  childRecord,
  childRows,
  forgetChild,
  noteChildRuntime,
  refreshChildren,
  renderSubAgents,
  setChildren,
} from "./subagents-view.js";
import { ThreadView, renderQueue } from "./thread-view.js";
import { draftPage } from "./welcome-view.js";

const PAGE_SIZE = 30;

function when(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleString();
}

// ------------------------------------------------------------------ thread list

export function threadName(summary) {
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
  const children = childRows(summary.id, openThread);
  if (children) li.append(children);
  return li;
}

export function renderThreadList() {
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

export async function loadThreads(more = false) {
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
export async function search(more = false) {
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

export function addThread(thread, first) {
  if (!thread || state.threads.has(thread.id) || thread.userId !== state.identity.userId) return;
  // A SubAgent child is listed under its parent (`subagent/graphChanged` follows), as
  // `thread/list` leaves children out. Its view is made now: the tab whose turn spawned
  // it gets the child's events unasked, and a later subscribe does not send them again.
  if (thread.source?.kind === "subagent") {
    if (!state.views.has(thread.id)) state.views.set(thread.id, new ThreadView(thread.id));
    return;
  }
  const summary = { ...thread };
  if (first) state.threads = new Map([[thread.id, summary], ...state.threads]);
  else state.threads.set(thread.id, summary);
  renderThreadList();
}

export function renameThread(threadId, name) {
  const summary = state.threads.get(threadId);
  if (summary) {
    summary.displayName = name;
    renderThreadList();
  }
  if (state.current?.id === threadId) $("thread-title").textContent = name;
}

export function setThreadRuntime(threadId, runtime) {
  const summary = state.threads.get(threadId);
  const child = noteChildRuntime(threadId, runtime);
  if (!summary && !child) return;
  if (summary) summary.runtime = runtime;
  const button = document.querySelector(`.thread-item[data-thread-id="${CSS.escape(threadId)}"]`);
  button?.classList.toggle("running", Boolean(runtime?.running));
  if (child) renderSubAgents(openThread);
}

/** The SubAgent children changed: the list's nested rows and the open thread's panel. */
export function showSubAgents() {
  renderThreadList();
  renderSubAgents(openThread);
}

export function dropThread(threadId) {
  state.threads.delete(threadId);
  state.views.delete(threadId);
  forgetChild(threadId);
  if (state.current?.id === threadId) showView(null);
  renderThreadList();
}

// ------------------------------------------------------------------ opening threads

export async function openThread(threadId) {
  let view = state.views.get(threadId);
  if (!view?.subscribed) {
    const made = !view;
    view ??= new ThreadView(threadId);
    state.views.set(threadId, view);
    // Every stored event of the thread this connection did not get yet, then live ones;
    // after a reconnect the client re-subscribes from the last seq it saw.
    const ok = await attempt("Opening the thread", () => state.client.threadSubscribe({ threadId, afterSeq: 0 }));
    if (ok === undefined) {
      if (made) state.views.delete(threadId);
      return;
    }
    view.subscribed = true;
    // The queue as it is now, unless a thread/queue/updated already said.
    const read = await attempt("Reading the thread", () => state.client.threadRead({ threadId }));
    if (read && !view.queueKnown) view.queue = read.thread.queuedInputs ?? [];
    if (read) view.config = read.thread.configuration ?? {};
    // The title of a thread the list does not hold (a SubAgent's, an automation task's).
    if (read) view.title = read.thread.displayName;
    if (read) await learnFamily(view, read);
  }
  state.drafting = false;
  showView(view);
  closeSidebar();
}

/** What `thread/read` says of the thread's place in the tree: its children (`subAgents`,
 * absent when none), or, for a child, its parent (whose children are then listed, so
 * the child shows under it). */
async function learnFamily(view, read) {
  if (Array.isArray(read.subAgents)) setChildren(view.id, read.subAgents);
  const source = read.thread.source;
  if (source?.kind !== "subagent" || typeof source.subAgent?.parentThreadId !== "string") return;
  view.subAgent = source.subAgent;
  if (!childRecord(view.id)) await refreshChildren(source.subAgent.parentThreadId);
}

export function showView(view) {
  state.current = view;
  const chat = $("chat");
  chat.textContent = "";
  if (view) chat.append(view.root);
  else if (state.drafting) chat.append(draftPage());
  else chat.append(el("p", "empty", "Start a new thread or pick one from the list."));
  const summary = view ? state.threads.get(view.id) : null;
  $("thread-title").textContent = view ? (summary ? threadName(summary) : view.title || view.id) : state.drafting ? "New thread" : "";
  $("thread-bar").hidden = !view;
  // A child is archived and deleted with its parent (the server refuses it alone).
  $("thread-archive").hidden = Boolean(view?.subAgent);
  $("thread-delete").hidden = Boolean(view?.subAgent);
  renderSubAgents(openThread);
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
export function newThread() {
  state.drafting = true;
  state.draftModel = undefined;
  showView(null);
  closeSidebar();
}

/** Start the drafted thread (with the model picked for it) and open it. */
export async function startDraft() {
  const config = state.draftModel ? { config: { model: state.draftModel } } : {};
  const result = await attempt("Starting a thread", () => state.client.threadStart({ identity: state.identity, ...config }));
  if (!result) return null;
  addThread(result.thread, true);
  await openThread(result.thread.id);
  return state.current?.id === result.thread.id ? state.current : null;
}

/** The model the shown thread (or the drafted one) uses. */
export function currentModel() {
  if (state.current) return state.current.config?.model || state.status?.model;
  return state.draftModel || state.status?.model;
}
