// The console's small behaviours that need a script: a confirmation dialog for htmx's
// hx-confirm, and the inbox's keyboard, dialog and edit form. Every one of them has a
// plain-form path without a script; this only makes it quicker. (The bar's phone menu, shared
// with the admin and the API docs, is topbar.js.)

// -- hx-confirm as a dialog of the page (window.confirm cannot be styled or tested) ----------

function askToConfirm(question, yes) {
  return new Promise((resolve) => {
    const dialog = document.createElement("dialog");
    dialog.className = "decide-dialog confirm-dialog";
    const text = document.createElement("p");
    text.textContent = question;
    const actions = document.createElement("div");
    actions.className = "dialog-actions";
    const ok = document.createElement("button");
    ok.type = "button";
    ok.className = "btn btn-danger";
    ok.textContent = yes;
    ok.dataset.confirmButton = "";
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "btn";
    cancel.textContent = "Cancel";
    actions.append(ok, cancel);
    dialog.append(text, actions);
    document.body.append(dialog);
    const done = (answer) => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    ok.addEventListener("click", () => done(true));
    cancel.addEventListener("click", () => done(false));
    dialog.addEventListener("cancel", () => done(false));
    dialog.showModal();
    ok.focus();
  });
}

document.addEventListener("htmx:confirm", (event) => {
  // Only the request page's rejection asks in the page's dialog (with its reason checked
  // first); every other hx-confirm (revoke a token, cancel a run, remove a child) keeps the
  // browser's own confirmation, worded for what it does.
  if (!event.detail.question || !event.detail.elt.closest("#approval-decision")) return;
  event.preventDefault();
  const form = event.detail.elt.closest("form");
  if (form && !form.reportValidity()) return;
  askToConfirm(event.detail.question, "Reject").then((yes) => {
    if (yes) event.detail.issueRequest(true);
  });
});

// -- the inbox ---------------------------------------------------------------------------------

const idOf = (row) => row.id.replace("approval-", "");

const inbox = {
  selected: null, // the selected request's id: kept across the list's live updates
  rows() {
    return Array.from(document.querySelectorAll("#inbox-rows tr[id^=approval-]"));
  },
  row(id) {
    return id && document.getElementById(`approval-${id}`);
  },
  select(row, focus = true) {
    for (const other of this.rows()) other.classList.remove("is-selected");
    if (!row) return;
    row.classList.add("is-selected");
    row.tabIndex = -1;
    this.selected = idOf(row);
    if (focus) {
      row.focus({ preventScroll: true });
      row.scrollIntoView({ block: "nearest" });
    }
  },
  move(step) {
    const rows = this.rows();
    if (!rows.length) return;
    const at = rows.indexOf(this.row(this.selected));
    const next = at < 0 ? (step > 0 ? 0 : rows.length - 1) : at + step;
    this.select(rows[Math.max(0, Math.min(rows.length - 1, next))]);
  },
  checked() {
    return this.rows().filter((row) => row.querySelector("input[name=ids]")?.checked);
  },
};

function openDecision(decision, rows) {
  const dialog = document.getElementById("decide-dialog");
  if (!dialog || !rows.length) return;
  const form = dialog.querySelector("form");
  form.elements.decision.value = decision;
  const ids = dialog.querySelector("[data-ids]");
  const picked = dialog.querySelector("[data-picked]");
  ids.replaceChildren();
  picked.replaceChildren();
  for (const row of rows) {
    const input = document.createElement("input");
    input.type = "hidden";
    input.name = "ids";
    input.value = idOf(row);
    ids.append(input);
    const item = document.createElement("li");
    const name = row.querySelector(".row-link")?.textContent || `Request ${idOf(row)}`;
    const step = row.querySelector("td[data-label=Step]")?.textContent || "";
    item.textContent = step && step !== "—" ? `${name} · ${step}` : name;
    picked.append(item);
  }
  const n = rows.length;
  const what = n === 1 ? "this request" : `these ${n} requests`;
  const reject = decision === "reject";
  dialog.querySelector("[data-question]").textContent = `${reject ? "Reject" : "Approve"} ${what}?`;
  const button = dialog.querySelector("[data-confirm-button]");
  button.textContent = reject ? (n === 1 ? "Reject" : `Reject ${n}`) : n === 1 ? "Approve" : `Approve ${n}`;
  button.className = `btn ${reject ? "btn-danger" : "btn-primary"}`;
  const reason = form.elements.reason;
  dialog.querySelector("[data-reason]").hidden = !reject;
  reason.required = reject;
  reason.disabled = !reject;
  reason.value = "";
  dialog.showModal();
  (reject ? reason : button).focus();
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-decide]");
  if (button && document.getElementById("decide-dialog")) {
    // The plain form would go to the confirmation page; the dialog asks here instead.
    event.preventDefault();
    const rows = button.hasAttribute("data-bulk") ? inbox.checked() : [button.closest("tr")];
    if (!rows.length) {
      const keys = document.getElementById("inbox-report");
      if (keys) keys.innerHTML = '<p class="alert" role="alert">Select the requests first (x, or the boxes).</p>';
      return;
    }
    if (!button.hasAttribute("data-bulk")) inbox.select(rows[0], false);
    openDecision(button.dataset.decide, rows);
    return;
  }
  if (event.target.closest("[data-cancel]")) {
    event.target.closest("dialog")?.close();
    return;
  }
  const row = event.target.closest("#inbox-rows tr[id^=approval-]");
  if (row) inbox.select(row, false);
});

document.addEventListener("change", (event) => {
  if (!event.target.matches("[data-select-all]")) return;
  for (const box of document.querySelectorAll("#inbox-rows input[name=ids]")) {
    box.checked = event.target.checked;
  }
});

document.addEventListener("htmx:afterRequest", (event) => {
  const dialog = event.detail.elt.closest?.("dialog");
  if (dialog && event.detail.successful) dialog.close();
});

// The list is swapped by the filters, the socket and a decision: the selection and the
// ticked boxes of requests still listed stay as they were.
// A decided request leaves the list: the selection moves to the one that took its place.
let ticked = new Set();
let selectedAt = -1;
document.addEventListener("htmx:oobBeforeSwap", remember);
document.addEventListener("htmx:beforeSwap", remember);
function remember() {
  if (!inbox.rows().length) return;
  ticked = new Set(inbox.checked().map((row) => idOf(row)));
  const at = inbox.rows().indexOf(inbox.row(inbox.selected));
  if (at >= 0) selectedAt = at; // a second swap (the socket's) must not forget where it was
}
// After htmx's settle step, which puts back the attributes the new rows came with.
let restoring = 0;
function restore() {
  clearTimeout(restoring);
  restoring = setTimeout(restoreNow, 40);
}
function restoreNow() {
  const rows = inbox.rows();
  for (const row of rows) {
    const box = row.querySelector("input[name=ids]");
    if (box && ticked.has(idOf(row))) box.checked = true;
  }
  if (inbox.selected === null) return;
  let row = inbox.row(inbox.selected);
  if (!row && selectedAt >= 0 && rows.length) row = rows[Math.min(selectedAt, rows.length - 1)];
  const idle = document.activeElement === document.body || !document.activeElement;
  if (row) inbox.select(row, idle && !document.querySelector("dialog[open]"));
}
document.addEventListener("htmx:oobAfterSwap", restore);
document.addEventListener("htmx:afterSettle", restore);

document.addEventListener("keydown", (event) => {
  if (!document.getElementById("inbox-rows")) return;
  if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
  const target = event.target;
  // Not while typing: text fields, selects and the dialogs keep their keys.
  const typing = "textarea, select, [contenteditable], dialog, input:not([type=checkbox]):not([type=radio]):not([type=submit]):not([type=button])";
  if (target.closest(typing)) return;
  if (document.querySelector("dialog[open]")) return;
  const row = inbox.row(inbox.selected);
  switch (event.key) {
    case "j":
      inbox.move(1);
      break;
    case "k":
      inbox.move(-1);
      break;
    case "x": {
      const box = row?.querySelector("input[name=ids]");
      if (!box) return;
      box.checked = !box.checked;
      break;
    }
    case "a":
    case "r":
      if (!row) return;
      openDecision(event.key === "a" ? "approve" : "reject", [row]);
      break;
    case "Enter":
      if (!row || target.closest("a, button")) return;
      row.querySelector("a.row-link")?.click();
      break;
    default:
      return;
  }
  event.preventDefault();
});

// -- the edit form: the fields and the raw JSON in step ----------------------------------------

function fieldValue(input) {
  const kind = input.dataset.kind;
  const text = input.value;
  if (kind === "string") return text === "" && !input.closest(".field")?.querySelector(".required") ? undefined : text;
  if (kind === "boolean") return text === "" ? undefined : text === "true";
  if (kind === "enum") return text === "" ? undefined : JSON.parse(input.dataset.choices)[Number(text)];
  if (kind === "array") {
    const lines = text.split("\n").filter((line) => line.trim());
    const items = input.dataset.items;
    return lines.map((line) => {
      if (items === "number" || items === "integer") return Number(line) || line;
      if (items === "boolean") return ["true", "yes"].includes(line.trim().toLowerCase());
      return line;
    });
  }
  if (text.trim() === "") return undefined;
  const number = Number(text);
  return Number.isFinite(number) ? number : text;
}

function fieldText(input, value) {
  const kind = input.dataset.kind;
  if (value === undefined) return "";
  if (kind === "enum") {
    const index = JSON.parse(input.dataset.choices).findIndex((c) => JSON.stringify(c) === JSON.stringify(value));
    return index < 0 ? "" : String(index);
  }
  if (kind === "array") return Array.isArray(value) ? value.map(String).join("\n") : "";
  if (kind === "boolean") return typeof value === "boolean" ? String(value) : "";
  return typeof value === "object" ? "" : String(value);
}

document.addEventListener("input", (event) => {
  const form = event.target.closest("form");
  if (!form) return;
  const source = form.querySelector("[data-edit-source]");
  const raw = form.querySelector("textarea.json-editor");
  if (!source || !raw) return;
  const inputs = Array.from(form.querySelectorAll("[data-arg]"));
  if (event.target === raw) {
    source.value = "json";
    let payload;
    try {
      payload = JSON.parse(raw.value);
    } catch {
      return; // half-typed: the fields keep what they had
    }
    if (!payload || typeof payload !== "object" || Array.isArray(payload)) return;
    for (const input of inputs) input.value = fieldText(input, payload[input.dataset.arg]);
  } else if (event.target.matches("[data-arg]")) {
    source.value = "fields";
    let payload = {};
    try {
      payload = JSON.parse(raw.value);
    } catch {
      try {
        payload = JSON.parse(raw.defaultValue || "{}");
      } catch {
        payload = {};
      }
    }
    if (!payload || typeof payload !== "object" || Array.isArray(payload)) payload = {};
    for (const input of inputs) {
      const value = fieldValue(input);
      if (value === undefined) delete payload[input.dataset.arg];
      else payload[input.dataset.arg] = value;
    }
    raw.value = JSON.stringify(payload, null, 2);
  }
});
