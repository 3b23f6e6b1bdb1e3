// The header's workspace line and model picker, and the settings dialog (docs/web.md).
//
// `workspace/status` says what is in use; `model/list` fills the picker; the dialog is
// built from `workspace/config/schema` (which carries no values) and saves with
// `workspace/config/update`. A secret (`sensitive`, the API key) is never shown: its box
// starts empty and only a typed value is sent. Remembered approvals are listed with
// `grant/list` and taken back with `grant/revoke`.

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** `ApiKey` -> `apiKey`: the schema's config.json key as `workspace/config/update` names it. */
function paramName(key) {
  return key.charAt(0).toLowerCase() + key.slice(1);
}

/** The value `workspace/status` reports for a schema key (never the API key). */
function currentValue(status, key) {
  const wanted = key.toLowerCase();
  for (const [name, value] of Object.entries(status ?? {})) {
    if (name.toLowerCase() === wanted && typeof value === "string") return value;
  }
  return "";
}

function lastPart(path) {
  const parts = String(path).split(/[\\/]/).filter(Boolean);
  return parts.length ? parts[parts.length - 1] : String(path);
}

/** Header: the workspace, provider and model in use. */
export function showStatus(status) {
  const box = $("workspace-info");
  box.hidden = !status;
  if (!status) return;
  $("ws-name").textContent = lastPart(status.workspacePath);
  $("ws-name").title = status.workspacePath;
  $("ws-provider").textContent = status.provider;
  box.title = `Workspace ${status.workspacePath} · provider ${status.provider}` +
    (status.endpoint ? ` at ${status.endpoint}` : "") + ` · default model ${status.model}`;
}

/** Fill the model picker: the provider's models, and `current` even when it lists none. */
export function showModels(listing, current) {
  const select = $("model-select");
  const ids = listing?.success ? (listing.models ?? []).map((model) => model.id) : [];
  if (current && !ids.includes(current)) ids.unshift(current);
  select.textContent = "";
  for (const id of ids) select.append(new Option(id, id, false, id === current));
  select.disabled = ids.length < 2;
  select.title = listing?.success === false
    ? `The provider did not list its models: ${listing.errorMessage ?? listing.errorCode ?? "unknown error"}`
    : "The model of this thread (a new thread starts with the workspace's default)";
}

/** The settings dialog: what is in use, the editable settings, remembered approvals. */
export async function openSettings(client, onSaved) {
  const dialog = $("settings");
  const [status, schema] = await Promise.all([client.workspaceStatus(), client.workspaceConfigSchema()]);
  const facts = $("settings-status");
  facts.textContent = "";
  const rows = [
    ["Workspace", status.workspacePath],
    ["Provider", status.endpoint ? `${status.provider} at ${status.endpoint}` : status.provider],
    ["Model", status.model],
    ["Approval policy", status.defaultApprovalPolicy],
    ["Trusted", status.trusted ? "yes: its own files may run code" : "no"],
    ["Server", `appserver ${status.version}`],
  ];
  for (const [name, value] of rows) facts.append(el("dt", null, name), el("dd", "exact-prose", value));
  const form = $("settings-fields");
  form.textContent = "";
  const inputs = [];
  const sections = [...schema.sections].sort((a, b) => a.order - b.order);
  for (const section of sections) {
    const group = el("fieldset", "settings-section");
    group.append(el("legend", null, section.section));
    for (const field of section.fields) {
      const id = `setting-${field.key}`;
      const label = el("label", "setting");
      label.htmlFor = id;
      label.append(el("span", "setting-name", field.displayName ?? field.key));
      let input;
      const initial = field.sensitive ? "" : currentValue(status, field.key);
      if (field.type === "select") {
        input = el("select");
        const options = [...(field.options ?? [])];
        if (initial && !options.includes(initial)) options.unshift(initial);
        for (const option of options) input.append(new Option(option, option, false, option === initial));
      } else {
        input = el("input");
        input.type = field.sensitive || field.type === "password" ? "password" : "text";
        input.autocomplete = "off";
        input.value = initial;
        // A secret is never shown, not even masked: leave it empty to keep it.
        if (field.sensitive) input.placeholder = "hidden; type a new one to replace it";
      }
      input.id = id;
      input.dataset.key = field.key;
      input.dataset.initial = initial;
      input.dataset.sensitive = String(Boolean(field.sensitive));
      label.append(input);
      if (field.hint) label.append(el("small", "muted", field.hint));
      group.append(label);
      inputs.push(input);
    }
    form.append(group);
  }
  $("settings-save").onclick = async () => {
    const update = {};
    for (const input of inputs) {
      const value = input.value.trim();
      if (input.dataset.sensitive === "true" ? value === "" : value === input.dataset.initial) continue;
      update[paramName(input.dataset.key)] = value;
    }
    const note = $("settings-note");
    if (Object.keys(update).length === 0) {
      note.textContent = "Nothing changed.";
      return;
    }
    try {
      await client.workspaceConfigUpdate(update);
      for (const input of inputs) if (input.dataset.sensitive === "true") input.value = "";
      note.textContent = `Saved: ${Object.keys(update).join(", ")}.`;
      await onSaved();
    } catch (error) {
      note.textContent = `Not saved: ${error?.message ?? error}`;
    }
  };
  $("settings-note").textContent = "";
  await showGrants(client);
  if (!dialog.open) dialog.showModal();
}

/** Remembered approvals ("Always allow"), each with a Revoke button. */
async function showGrants(client) {
  const list = $("grant-list");
  const { grants, honoured } = await client.grantList();
  list.textContent = "";
  $("grants-note").textContent = grants.length === 0
    ? "No approval is remembered: every \"Always allow\" you give is listed here."
    : honoured
      ? "These run without asking, in every thread of this workspace."
      : "The workspace is not trusted: these ask again until it is.";
  for (const grant of grants) {
    const item = el("li", "grant");
    item.dataset.kind = grant.kind;
    const what = el("div", "grant-what");
    what.append(el("code", "exact", grant.operation), el("span", "muted", ` ${grant.kind} in `), el("code", "exact", grant.target));
    const since = new Date(grant.createdAt);
    what.append(el("small", "muted", ` since ${Number.isNaN(since.getTime()) ? grant.createdAt : since.toLocaleString()}`));
    const revoke = el("button", "small danger", "Revoke");
    revoke.type = "button";
    revoke.setAttribute("aria-label", `Revoke: ${grant.operation}`);
    revoke.addEventListener("click", async () => {
      await client.grantRevoke({ kind: grant.kind, operation: grant.operation, target: grant.target });
      await showGrants(client);
    });
    item.append(what, revoke);
    list.append(item);
  }
}
