// The page's shared state and the small helpers every part of it uses: finding and making
// elements, the error banner and connection status, the message box's buttons, the
// address bar's fragment (docs/web.md).

export const TOKEN_KEY = "appserver.token";
export const $ = (id) => document.getElementById(id);

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function details(summaryText, className, open = false) {
  const box = el("details", className);
  box.open = open;
  box.append(el("summary", null, summaryText));
  return box;
}

// ------------------------------------------------------------------ the page's fragment

/** `#token=...&thread=...`: the fragment never reaches a server. The token is taken as
 * typed up to the next `&thread=` / `&user=` (a `+` or `&` in it stays), percent-decoded,
 * and removed from the address bar at once. */
export function readFragment() {
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

export function writeFragment(threadId) {
  const params = new URLSearchParams(location.hash.slice(1));
  params.delete("token");
  if (threadId) params.set("thread", threadId);
  else params.delete("thread");
  const hash = params.toString();
  history.replaceState(null, "", hash ? `#${hash}` : location.pathname);
}

// ------------------------------------------------------------------ state

export const state = {
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
  children: new Map(), // parent id -> [{edge, thread}]: its SubAgent children (subagents-view.js)
  progress: new Map(), // child id -> its last `subagent/progress` entry
  subAgentsFolded: false, // the reader folded the SubAgents panel
  tasks: new Map(), // id -> the workspace's automation task (tasks-view.js)
};

export function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

export function setStatus(kind, text) {
  const status = $("status");
  status.dataset.state = kind;
  status.textContent = text;
}

export async function attempt(what, fn) {
  try {
    showError("");
    return await fn();
  } catch (error) {
    showError(`${what} failed: ${error?.message ?? error}`);
    return undefined;
  }
}

// ------------------------------------------------------------------ scrolling, the composer's buttons, focus

/** Follow new output, unless the reader scrolled up to read. */
export function stickToBottom(force = false) {
  const chat = $("chat");
  if (force) state.follow = true;
  if (state.follow) chat.scrollTop = chat.scrollHeight;
}

export function updateComposer() {
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

/** Back to the message box once a dialog has closed (after the browser restored focus). */
export function refocusComposer() {
  requestAnimationFrame(() => {
    const box = $("composer");
    if (document.querySelector("dialog[open]")) return;
    box.blur();
    box.focus();
  });
}

// ------------------------------------------------------------------ sidebar on small screens

export function closeSidebar() {
  document.body.classList.remove("sidebar-open");
  $("threads-toggle").setAttribute("aria-expanded", "false");
}

export function toggleSidebar() {
  const open = !document.body.classList.contains("sidebar-open");
  document.body.classList.toggle("sidebar-open", open);
  $("threads-toggle").setAttribute("aria-expanded", String(open));
  if (open) $("new-thread").focus();
}
