// SubAgent children (docs/web.md, docs/subagents.md): the children the page knows of each
// parent thread, their live progress, the "SubAgents" panel of the open thread and the
// rows nested under a parent in the thread list.
//
// `thread/list` leaves children out, so they are learnt per parent: from `thread/read`'s
// `subAgents` when a thread is opened, and from `subagent/children/list` (closed ones and
// each child's thread too) whenever `subagent/graphChanged` names a parent the page shows.
// `thread/runtimeChanged` of a child says whether it runs; `subagent/progress` (sent while
// a parent turn follows its children) says what each does. Everything here is built from
// text nodes: nicknames, roles and tool displays come from a model.

import { revealedText } from "./exact-text.js";
import { $, attempt, el, state } from "./page.js";

/** A child as the page keeps it: its edge and its thread (summary or wire thread). */
function record(entry) {
  const edge = entry?.edge ?? {};
  const thread = entry?.thread ?? { id: edge.childThreadId };
  return { edge, thread };
}

function oldestFirst(left, right) {
  return String(left.edge.createdAt ?? "").localeCompare(String(right.edge.createdAt ?? ""));
}

/** The children of `parentId` the page knows, oldest first (none: an empty list). */
export function childrenOf(parentId) {
  return state.children.get(parentId) ?? [];
}

/** The known child `childId`, with its parent's id; undefined for any other thread. */
export function childRecord(childId) {
  for (const [parentId, children] of state.children) {
    const found = children.find((child) => child.thread.id === childId);
    if (found) return { parentId, ...found };
  }
  return undefined;
}

/** Whether a `subagent/graphChanged` about `parentId` concerns this page: a thread it
 * lists, has open, found by a search, or a child it shows (a grandchild was made). */
export function showsParent(parentId) {
  return (
    state.threads.has(parentId) ||
    state.views.has(parentId) ||
    state.found.threads.has(parentId) ||
    childRecord(parentId) !== undefined
  );
}

/** Keep `entries` (`[{edge, thread}]` of `thread/read` or `subagent/children/list`) as
 * the children of `parentId`. Entries without a child id are dropped, never shown. */
export function setChildren(parentId, entries) {
  const children = (Array.isArray(entries) ? entries : [])
    .map(record)
    .filter((child) => typeof child.thread.id === "string" && child.thread.id);
  if (children.length) state.children.set(parentId, children.sort(oldestFirst));
  else state.children.delete(parentId);
}

/** Ask the server for every child of `parentId` (closed ones included, with their
 * threads), as DotCraft's desktop does on `subagent/graphChanged`. */
export async function refreshChildren(parentId) {
  const result = await attempt("Listing the SubAgents", () =>
    state.client.subagentChildrenList({ parentThreadId: parentId, includeClosed: true, includeThreads: true }),
  );
  if (result) setChildren(parentId, result.data);
  return Boolean(result);
}

/** `thread/runtimeChanged`: whether `threadId` is a known child (its runtime is kept). */
export function noteChildRuntime(threadId, runtime) {
  const child = childRecord(threadId);
  if (child) child.thread.runtime = runtime;
  return Boolean(child);
}

/** `subagent/progress`: keep each entry by its child; the ids of children the page did
 * not know yet (their parent is worth listing again). */
export function noteProgress(params) {
  const parentId = params?.threadId;
  const unknown = [];
  for (const entry of Array.isArray(params?.entries) ? params.entries : []) {
    // Entries carry the child's id; an older server's only the label (the nickname).
    const byLabel = childrenOf(parentId).find((child) => child.edge.agentNickname === entry?.label);
    const childId = typeof entry?.childThreadId === "string" ? entry.childThreadId : byLabel?.thread.id;
    if (!childId) continue;
    state.progress.set(childId, entry);
    if (!childRecord(childId)) unknown.push(childId);
  }
  return unknown;
}

/** A deleted thread: gone as a child, and its own children with it. */
export function forgetChild(threadId) {
  state.children.delete(threadId);
  state.progress.delete(threadId);
  for (const [parentId, children] of state.children) {
    const kept = children.filter((child) => child.thread.id !== threadId);
    if (kept.length !== children.length) setChildren(parentId, kept);
  }
}

// ------------------------------------------------------------------ words

function nickname(child) {
  return revealedText(child.edge.agentNickname || child.thread.displayName || child.thread.id);
}

function running(child) {
  return Boolean(child.thread.runtime?.running);
}

/** `1234` -> `1.2k`, `2500000` -> `2.5M`: tokens at a glance. */
function tokens(count) {
  const value = Number(count) || 0;
  if (value >= 1_000_000) return `${(value / 1_000_000).toFixed(1)}M`;
  if (value >= 1_000) return `${(value / 1_000).toFixed(1)}k`;
  return String(value);
}

/** "done · shell make test · 1.2k in · 40 out tokens", or "" before any progress. */
function progressText(child) {
  const entry = state.progress.get(child.thread.id);
  if (!entry) return "";
  const parts = [];
  // A child whose thread runs again (SendInput) is not done, whatever the last snapshot said.
  if (entry.isCompleted && !running(child)) parts.push("done");
  if (entry.currentTool) {
    const display = entry.currentToolDisplay ? ` ${entry.currentToolDisplay}` : "";
    parts.push(revealedText(`${entry.currentTool}${display}`));
  }
  parts.push(`${tokens(entry.inputTokens)} in · ${tokens(entry.outputTokens)} out tokens`);
  return parts.join(" · ");
}

// ------------------------------------------------------------------ the thread list

/** The children of `parentId` as list rows nested under it, or null when it has none. */
export function childRows(parentId, open) {
  const children = childrenOf(parentId);
  if (!children.length) return null;
  const list = el("ul", "thread-children");
  list.setAttribute("aria-label", "SubAgents");
  for (const child of children) {
    const li = el("li");
    const button = el("button", "thread-item thread-child");
    button.type = "button";
    button.dataset.threadId = child.thread.id;
    const facts = [child.edge.agentRole, child.edge.status === "closed" ? "closed" : ""].filter(Boolean);
    button.append(el("span", "thread-name", nickname(child)), el("span", "thread-meta", revealedText(facts.join(" · "))));
    button.classList.toggle("running", running(child));
    if (state.current?.id === child.thread.id) button.setAttribute("aria-current", "true");
    button.addEventListener("click", () => open(child.thread.id));
    li.append(button);
    list.append(li);
  }
  return list;
}

// ------------------------------------------------------------------ the panel

function childRow(child, open) {
  const li = el("li", "subagent");
  li.dataset.childId = child.thread.id;
  li.dataset.status = child.edge.status ?? "open";
  li.dataset.running = String(running(child));
  li.dataset.completed = String(Boolean(state.progress.get(child.thread.id)?.isCompleted) && !running(child));
  const button = el("button", "subagent-open small", nickname(child));
  button.type = "button";
  button.dataset.focus = child.thread.id;
  button.title = "Open this SubAgent's thread";
  button.addEventListener("click", () => open(child.thread.id));
  const facts = [child.edge.agentRole, child.edge.profileName, child.edge.status ?? "open"].filter(Boolean);
  const activity = el("span", `subagent-state ${running(child) ? "running" : "idle"}`, running(child) ? "running" : "idle");
  li.append(button, el("span", "subagent-facts", revealedText(facts.join(" · "))), activity);
  const progress = progressText(child);
  if (progress) li.append(el("div", "subagent-progress", progress));
  return li;
}

/** The open thread's "SubAgents" panel: its children with their progress, or, for a
 * child, which parent it works for. Hidden for every other thread. */
export function renderSubAgents(open) {
  const panel = $("subagents");
  const view = state.current;
  // Drawn again on every progress snapshot: what had the focus keeps it.
  const focused = panel.contains(document.activeElement) ? document.activeElement.dataset.focus : undefined;
  panel.textContent = "";
  drawPanel(panel, view, open);
  if (focused) panel.querySelector(`[data-focus="${CSS.escape(focused)}"]`)?.focus();
}

function drawPanel(panel, view, open) {
  const children = view ? childrenOf(view.id) : [];
  const parentId = view?.subAgent?.parentThreadId;
  panel.hidden = !children.length && !parentId;
  if (panel.hidden) return;
  if (parentId) {
    const me = childRecord(view.id);
    const line = el("p", "subagent-of muted");
    const role = me?.edge.agentRole ?? view.subAgent.agentRole;
    line.append(`A SubAgent${role ? ` (${revealedText(role)})` : ""} of `);
    const back = el("button", "small", revealedText(state.threads.get(parentId)?.displayName || "its parent thread"));
    back.type = "button";
    back.dataset.threadId = parentId;
    back.dataset.focus = "parent";
    back.addEventListener("click", () => open(parentId));
    line.append(back);
    panel.append(line);
  }
  if (!children.length) return;
  const busy = children.filter(running).length;
  const fold = el("details", "subagents-box");
  fold.open = !state.subAgentsFolded;
  fold.addEventListener("toggle", () => (state.subAgentsFolded = !fold.open));
  const summary = el("summary", null, `SubAgents (${children.length}${busy ? `, ${busy} running` : ""})`);
  summary.dataset.focus = "summary";
  fold.append(summary);
  const list = el("ul", "subagent-list");
  for (const child of children) list.append(childRow(child, open));
  fold.append(list);
  panel.append(fold);
}
