// The workspace's automation tasks (docs/web.md, docs/automations.md): the header's
// **Tasks** button opens a dialog listing them (`automation/task/list`), each with its
// status, schedule and thread, kept up to date by `automation/task/updated`; **Run**
// (`automation/task/run`) and **Delete** (`automation/task/delete`, asked first).
//
// The button is shown only when the server advertises the `automations` capability (a
// workspace can switch them off). Titles and ids come from files anyone may have
// written: they are set as text, with hidden characters revealed.

import { revealedText } from "./exact-text.js";
import { $, el, state } from "./page.js";
import { openThread } from "./threads.js";
import { say } from "./words.js";

/** Whether the server serves the automation methods. */
export function tasksOffered() {
  return Boolean(state.client?.serverCapabilities?.automations);
}

/** The header's button: shown when offered, with a ● while a task runs. */
export function showTasksButton() {
  const button = $("tasks-open");
  button.hidden = !tasksOffered();
  const running = [...state.tasks.values()].filter((task) => task.status === "running").length;
  button.classList.toggle("running", running > 0);
  button.title = running
    ? `The workspace's automation tasks (${running} running)`
    : "The workspace's automation tasks";
}

/** Keep `task` by its id, unless the page holds a newer state of it (`updatedAt`: a
 * notification can overtake a listing's answer). One without an id is dropped. */
function keep(task, known = state.tasks) {
  if (typeof task?.id !== "string" || !task.id) return;
  const held = state.tasks.get(task.id);
  if (held?.updatedAt && task.updatedAt && String(held.updatedAt) > String(task.updatedAt)) {
    known.set(task.id, held);
    return;
  }
  known.set(task.id, task); // whole: the wire leaves out what is unset (an unbound task)
}

/** List the tasks again (`automation/task/list`); false when the server did not answer. */
export async function refreshTasks() {
  if (!tasksOffered()) {
    state.tasks.clear();
    showTasksButton();
    return false;
  }
  let result;
  try {
    result = await state.client.automationTaskList({});
  } catch (error) {
    note(`Listing the tasks failed: ${error?.message ?? error}`);
    return false;
  }
  // Only the listed ones: a task deleted elsewhere sends no notification.
  const listed = new Map();
  for (const task of Array.isArray(result?.tasks) ? result.tasks : []) keep(task, listed);
  state.tasks = listed;
  showTasksButton();
  render();
  return true;
}

/** `automation/task/updated`: the task as it is now (a new one is added). */
export function taskUpdated(params) {
  keep(params?.task);
  showTasksButton();
  render();
}

/** The **Tasks** dialog, listed afresh (a task deleted elsewhere sends no notification). */
export async function openTasks() {
  note("");
  const dialog = $("tasks-dialog");
  if (!dialog.open) dialog.showModal();
  await refreshTasks();
}

// ------------------------------------------------------------------ words

const UNITS = [
  [86_400_000, "day"],
  [3_600_000, "hour"],
  [60_000, "minute"],
  [1_000, "second"],
];

/** `3600000` -> "Every hour", `300000` -> "Every 5 minutes", `1500` -> "Every 1500 ms". */
function every(milliseconds) {
  const value = Number(milliseconds);
  if (!Number.isSafeInteger(value) || value <= 0) return "Every (no interval)";
  for (const [size, unit] of UNITS) {
    if (value % size) continue;
    const count = value / size;
    return count === 1 ? `Every ${unit}` : `Every ${count} ${unit}s`;
  }
  return `Every ${value} ms`;
}

function localTime(value) {
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleString();
}

function twoDigits(value) {
  return String(Number(value) || 0).padStart(2, "0");
}

/** A schedule in words: "Once", "Every 7 days", "Daily at 09:00 (UTC)", "Once at …". */
export function scheduleText(schedule) {
  const kind = schedule?.kind ?? "once";
  if (kind === "once") return "Once";
  if (kind === "every") return every(schedule.everyMs);
  if (kind === "at") return `Once at ${localTime(schedule.atMs) || "an unknown time"}`;
  if (kind === "daily") {
    const zone = schedule.tz ? revealedText(schedule.tz) : "UTC";
    return `Daily at ${twoDigits(schedule.dailyHour)}:${twoDigits(schedule.dailyMinute)} (${zone})`;
  }
  // A kind written by hand or by a newer DotCraft: shown, never run here.
  return `${revealedText(kind)} (not run here)`;
}

/** The thread a task ran in, else the one it is bound to (undefined: none yet). */
function taskThread(task) {
  if (typeof task.threadId === "string" && task.threadId) return task.threadId;
  const bound = task.threadBinding?.threadId;
  return typeof bound === "string" && bound ? bound : undefined;
}

// ------------------------------------------------------------------ the dialog

function note(text) {
  $("tasks-note").textContent = text;
}

function byId(left, right) {
  return left.id < right.id ? -1 : left.id > right.id ? 1 : 0;
}

/** Draw the list (while the dialog is open); what had the focus keeps it. */
function render() {
  const dialog = $("tasks-dialog");
  if (!dialog.open) return;
  const list = $("task-list");
  const focused = list.contains(document.activeElement) ? document.activeElement.dataset.focus : undefined;
  list.textContent = "";
  const tasks = [...state.tasks.values()].sort(byId);
  for (const task of tasks) list.append(taskRow(task));
  $("tasks-empty").hidden = tasks.length > 0;
  if (focused) list.querySelector(`[data-focus="${CSS.escape(focused)}"]`)?.focus();
}

function taskRow(task) {
  const row = el("li", "task");
  row.dataset.taskId = task.id;
  row.dataset.status = String(task.status ?? "");
  const head = el("div", "task-head");
  head.append(
    el("strong", "task-title", revealedText(task.title || task.id)),
    el("span", "task-status", revealedText(say("task", task.status))),
  );
  const facts = [scheduleText(task.schedule)];
  if (task.status === "pending" && task.nextRunAt) facts.push(`next run ${localTime(task.nextRunAt)}`);
  if (task.status !== "pending" && task.updatedAt) facts.push(`since ${localTime(task.updatedAt)}`);
  facts.push(revealedText(task.id));
  row.append(head, el("div", "task-facts", facts.filter(Boolean).join(" · ")));
  row.append(taskActions(task));
  return row;
}

function button(text, className, focusKey, onClick) {
  const made = el("button", className, text);
  made.type = "button";
  made.dataset.focus = focusKey;
  made.addEventListener("click", onClick);
  return made;
}

function taskActions(task) {
  const actions = el("div", "task-actions");
  const threadId = taskThread(task);
  if (threadId) {
    const bound = !task.threadId;
    const open = button(bound ? "Open the bound thread" : "Open its thread", "small task-thread", `${task.id}:thread`, () => {
      $("tasks-dialog").close();
      void openThread(threadId);
    });
    open.dataset.threadId = threadId;
    open.title = threadId;
    actions.append(open);
  }
  const running = task.status === "running";
  const run = button("Run", "small task-run", `${task.id}:run`, () => void runTask(task.id));
  const remove = button("Delete", "small danger task-delete", `${task.id}:delete`, () => askDelete(task));
  // The server refuses both while it runs (-32052): say so before asking.
  run.disabled = running;
  remove.disabled = running;
  run.title = running ? "It is running" : "Run it now (also a finished or failed task)";
  actions.append(run, remove);
  return actions;
}

async function runTask(taskId) {
  note("");
  try {
    const result = await state.client.automationTaskRun({ taskId });
    keep(result?.task);
    showTasksButton();
    render();
  } catch (error) {
    note(`Not run: ${error?.message ?? error}`);
  }
}

function askDelete(task) {
  const dialog = $("task-delete-dialog");
  $("task-delete-name").textContent = revealedText(task.title || task.id);
  dialog.returnValue = "";
  dialog.onclose = async () => {
    if (dialog.returnValue !== "delete") return;
    note("");
    try {
      await state.client.automationTaskDelete({ taskId: task.id });
    } catch (error) {
      note(`Not deleted: ${error?.message ?? error}`);
      return;
    }
    state.tasks.delete(task.id);
    showTasksButton();
    render();
  };
  dialog.showModal();
  $("task-delete-confirm").focus();
}
