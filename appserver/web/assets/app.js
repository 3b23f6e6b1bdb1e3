// The appserver web client (docs/web.md): one page, plain ES modules, no build step.
//
// It talks JSON-RPC through client.js, the browser build of the Node client
// (clients/node, generated types and all). Each open thread is subscribed once with
// `afterSeq: 0`: the server replays its stored events, then streams live ones, and the
// client re-subscribes with the last `seq` it saw after a reconnect, so the view is built
// from events alone and no text is ever shown twice.

import { approvalHandler, decide, resolvedElsewhere } from "./approvals.js";
import { AppServerClient, DECISIONS } from "./client.js";
import { interrupt, send, steer } from "./composer.js";
import {
  $,
  TOKEN_KEY,
  attempt,
  closeSidebar,
  readFragment,
  refocusComposer,
  setStatus,
  showError,
  state,
  toggleSidebar,
  updateComposer,
  writeFragment,
} from "./page.js";
import { openSettings, showModels, showStatus } from "./settings-view.js";
import { noteProgress, refreshChildren, renderSubAgents, showsParent } from "./subagents-view.js";
import { openTasks, refreshTasks, showTasksButton, taskUpdated } from "./tasks-view.js";
import { renderQueue } from "./thread-view.js";
import {
  addThread,
  currentModel,
  dropThread,
  loadThreads,
  newThread,
  openThread,
  renameThread,
  search,
  setThreadRuntime,
  showSubAgents,
  threadName,
} from "./threads.js";
import { suggestionsUpdated } from "./welcome-view.js";

// ------------------------------------------------------------------ notifications

function onNotification(event) {
  const { method, params, threadId } = event;
  if (method === "thread/started") return addThread(params.thread, true);
  if (method === "thread/renamed") return renameThread(threadId, params.displayName);
  if (method === "thread/runtimeChanged") return setThreadRuntime(threadId, params.runtime);
  if (method === "thread/deleted") return dropThread(threadId);
  if (method === "thread/statusChanged" && params.newStatus === "archived") return dropThread(threadId);
  if (method === "workspace/configChanged") return void refreshWorkspace();
  if (method === "subagent/graphChanged") return void childrenChanged(params?.parentThreadId);
  if (method === "subagent/progress") return subAgentProgress(params);
  if (method === "welcome/suggestionsUpdated") return suggestionsUpdated(params);
  if (method === "automation/task/updated") return taskUpdated(params);
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

// ------------------------------------------------------------------ SubAgent children

const listing = new Map(); // parent id -> "again" while its children are being listed

/** A child of `parentId` was made, closed or reopened: list its children again (sent to
 * every connection, so only for a parent this page shows). One listing at a time per
 * parent; a change that comes meanwhile lists them once more after it. */
async function childrenChanged(parentId) {
  if (typeof parentId !== "string" || !showsParent(parentId)) return;
  if (listing.has(parentId)) return void listing.set(parentId, "again");
  try {
    do {
      listing.set(parentId, "listing");
      if (await refreshChildren(parentId)) showSubAgents();
    } while (listing.get(parentId) === "again");
  } finally {
    listing.delete(parentId);
  }
}

/** What the children of a parent turn do now; a child not known yet lists them again. */
function subAgentProgress(params) {
  const unknown = noteProgress(params);
  if (unknown.length) void childrenChanged(params.threadId);
  else if (state.current?.id === params?.threadId) renderSubAgents(openThread);
}

// ------------------------------------------------------------------ workspace, model, thread actions

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
    // A child's view made from events only (never subscribed) misses the gap: it is made
    // again from the server's record when opened.
    for (const [threadId, view] of state.views) if (!view.subscribed) state.views.delete(threadId);
    // Children made or closed while the connection was down.
    for (const parentId of state.children.keys()) void childrenChanged(parentId);
    // Runs that ended while the connection was down sent their news to nobody.
    void refreshTasks();
  });
  void client.closed.then(() => setStatus("disconnected", "disconnected"));
  showTasksButton(); // the server's capabilities are known now
  setStatus("connected", "connected");
  updateComposer();
  await refreshWorkspace();
  void refreshTasks(); // for the header's ● while a task runs
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
  $("tasks-open").addEventListener("click", () => void openTasks());
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
