// One thread's view (docs/web.md): its turns and items as the server's events build them
// (streamed text, commands, tool calls and results, diffs, the plan), and the queue of
// messages waiting behind the shown thread's turn.

import { revealedText, showDiff } from "./exact-text.js";
import { codeBlock, renderMarkdown } from "./markdown.js";
import { $, attempt, details, el, state, stickToBottom, updateComposer } from "./page.js";
import { say, turnStatus } from "./words.js";

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

// ------------------------------------------------------------------ one thread's view

export class ThreadView {
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
    // Subscribed (threads.js openThread); a SubAgent child's view is made before, from the
    // events its parent's tab gets unasked.
    this.subscribed = false;
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

// ------------------------------------------------------------------ the queue

// The queued inputs still waiting to run (not those handed to the running turn).
export function waiting(view) {
  return (view?.queue ?? []).filter((queued) => (queued.status ?? "queued") === "queued");
}

export function renderQueue() {
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
