/* The live trace page (templates/runs/trace.html).
 *
 * The server renders the tree first and embeds the trace's last event number. This script
 * opens /ws/runs/<trace>/?after=<that number> (runs/consumers.py), applies each event once and
 * in order, and reconnects after a drop asking for what came after the last number it
 * applied, so nothing is missed.
 *
 * An event changes the page in two ways: at once, a node's status and activity line (as
 * text, never as HTML); then, a few times a second at most, the rows the events named (and
 * their ancestors, whose counters include them) are fetched from the server, which renders
 * them from the database (the truth, escaped). A node created under an open parent is added
 * there. Opening a node loads its children or its details with htmx. */
(function () {
  "use strict";

  const tree = document.getElementById("trace");
  if (!tree) return;
  const live = document.getElementById("trace-live");
  const socketPath = tree.dataset.socket;
  const rowsUrl = tree.dataset.rows;
  const FLUSH_MS = 50; // how long events gather before their rows are fetched
  const GAP_MS = 200; // between two fetches
  const MAX_IDS = 150; // run ids in one fetch (the server takes 200)
  const CLOSED_FOR_GOOD = [4401, 4403, 4404, 4400];

  let lastSeq = Number(tree.dataset.after) || 0;
  let socket = null;
  let retries = 0;
  const pending = new Set(); // run ids whose rows to fetch
  const created = new Set(); // run ids created since the page was read
  const details = new Set(); // run ids whose open details to reload
  const afterLoad = new Map(); // parent id -> child ids created while its children loaded
  let timer = null;
  let fetching = false;

  function byId(id) {
    return document.getElementById(id);
  }

  function setState(state, text) {
    if (!live) return;
    live.dataset.state = state;
    live.textContent = text;
  }

  // -- the socket ----------------------------------------------------------------------------

  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(`${scheme}//${location.host}${socketPath}?after=${lastSeq}`);
    socket.addEventListener("message", (message) => {
      let data;
      try {
        data = JSON.parse(message.data);
      } catch (error) {
        return;
      }
      receive(data);
    });
    socket.addEventListener("close", (closed) => {
      socket = null;
      window.hierarchTraceLive = false;
      if (CLOSED_FOR_GOOD.includes(closed.code)) {
        setState("closed", "Not live: " + (closed.reason || "this trace is no longer shown to you"));
        return;
      }
      // A refused handshake (1006) or a dropped connection: try again, slower each time.
      const wait = Math.min(10000, 250 * 2 ** retries) + Math.random() * 250;
      retries += 1;
      setState("reconnecting", "Reconnecting…");
      setTimeout(connect, wait);
    });
  }

  function receive(data) {
    if (data.type === "run.events") {
      for (const event of data.events || []) {
        if (typeof event.seq !== "number" || event.seq <= lastSeq) continue;
        apply(event);
        lastSeq = event.seq;
      }
      tree.dataset.seq = String(lastSeq);
    } else if (data.type === "live") {
      retries = 0;
      window.hierarchTraceLive = true;
      setState("live", "Live");
      document.dispatchEvent(new CustomEvent("hierarch:trace-live", { detail: data }));
    } else if (data.type === "error") {
      setState("error", data.message || "The server refused a message.");
    }
  }

  // -- events ----------------------------------------------------------------------------------

  const ACTIVITY = {
    "step.started": (p) => `Step “${p.step}” started`,
    "step.finished": (p) => `Step “${p.step}” ${String(p.status || "finished").toLowerCase()}`,
    "step.retry": (p) => `Step “${p.step}” retries`,
    "step.skipped": (p) => `Step “${p.step}” skipped`,
    "step.exit": (p) => `Step “${p.step}” exits to ${p.to}`,
    "step.rate_limited": (p) => `Step “${p.step}” waits for a rate limit`,
    "llm.call": (p) => `Model call: ${p.model}, ${p.tokens} tokens, ${p.latency_ms} ms`,
    "tool.call": (p) => `Tool call: ${p.tool_id} ${p.success ? "succeeded" : "failed"}, ${p.latency_ms} ms`,
    "cost.alert": () => "Cost alert",
  };

  function apply(event) {
    const payload = event.payload || {};
    let id = event.run_id;
    if (event.type === "run.created" && payload.run_id) {
      id = payload.run_id; // announced by its parent's step
      if (!byId(`node-${id}`)) created.add(id);
    }
    if (event.type === "run.status" && payload.status) {
      const row = byId(`row-${id}`);
      const pill = row && row.querySelector("[data-status]");
      if (pill) {
        const status = String(payload.status).toLowerCase();
        pill.textContent = status.charAt(0).toUpperCase() + status.slice(1);
        pill.className = `status status-${status}`;
        row.className = row.className.replace(/\bstatus-\S+/, `status-${status}`);
      }
    }
    const describe = ACTIVITY[event.type];
    const activity = describe && byId(`activity-${event.run_id}`);
    if (activity) activity.textContent = describe(payload);
    const panel = byId(`detail-${event.run_id}`);
    if (panel && !panel.hidden) details.add(event.run_id);
    pending.add(id);
    schedule(FLUSH_MS);
  }

  function schedule(delay) {
    if (timer || fetching) return;
    timer = setTimeout(flush, delay);
  }

  async function flush() {
    timer = null;
    if (!pending.size) return;
    fetching = true;
    const ids = Array.from(pending).slice(0, MAX_IDS);
    ids.forEach((id) => pending.delete(id));
    try {
      const response = await fetch(`${rowsUrl}?ids=${ids.join(",")}`, {
        credentials: "same-origin",
        headers: { "HX-Request": "true" },
      });
      if (response.ok) {
        merge(await response.text());
      } else if (response.status >= 500) {
        ids.forEach((id) => pending.add(id)); // try again at the next flush
      }
    } catch (error) {
      ids.forEach((id) => pending.add(id));
    }
    reloadDetails();
    fetching = false;
    if (pending.size) schedule(GAP_MS);
  }

  function merge(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    // Ancestors come first, so a new node's parent is in place before it.
    const nodes = Array.from(template.content.children).filter((el) => el.matches("li.node"));
    for (const node of nodes) {
      const id = node.dataset.run;
      const present = byId(`node-${id}`);
      if (present) {
        const row = byId(`row-${id}`);
        const fresh = node.querySelector(".node-row"); // its own: the list below is empty
        if (row && fresh && fresh.classList.contains("node-row")) {
          const wasFocus = row.classList.contains("is-focus");
          const children = byId(`children-${id}`);
          const toggle = fresh.querySelector('[data-toggle="children"]');
          if (toggle && children) toggle.setAttribute("aria-expanded", String(!children.hidden));
          const detailButton = fresh.querySelector('[data-toggle="detail"]');
          const panel = byId(`detail-${id}`);
          if (detailButton && panel) detailButton.setAttribute("aria-expanded", String(!panel.hidden));
          if (wasFocus) fresh.classList.add("is-focus");
          row.replaceWith(fresh);
          htmx.process(fresh);
        }
        continue;
      }
      const parentList = byId(`children-${node.dataset.parent}`);
      if (!parentList) continue;
      if (parentList.dataset.loaded === "loading") {
        const waiting = afterLoad.get(node.dataset.parent) || [];
        waiting.push(id);
        afterLoad.set(node.dataset.parent, waiting);
        continue;
      }
      if (parentList.dataset.loaded !== "true") continue; // collapsed: its count says it
      if (created.has(id)) {
        // Every child it will have is announced after it: follow it open.
        const list = node.querySelector(".children");
        if (list) {
          list.replaceChildren();
          list.dataset.loaded = "true";
          list.hidden = false;
        }
        created.delete(id);
      }
      const empty = parentList.querySelector(":scope > .node-empty");
      if (empty) empty.remove();
      node.classList.add("is-new");
      parentList.appendChild(node);
      htmx.process(node);
    }
  }

  function reloadDetails() {
    for (const id of Array.from(details)) {
      details.delete(id);
      const panel = byId(`detail-${id}`);
      const button = document.querySelector(`[aria-controls="detail-${id}"]`);
      if (panel && !panel.hidden && button) loadInto(panel, button.dataset.url);
    }
  }

  // -- opening and closing ------------------------------------------------------------------

  function loadInto(target, url, done) {
    // Keep the <details> a person opened open across the reload.
    const open = Array.from(target.querySelectorAll("details[open][data-key]")).map((d) => d.dataset.key);
    return htmx.ajax("GET", url, { target: target, swap: "innerHTML" }).then(() => {
      for (const key of open) {
        const again = target.querySelector(`details[data-key="${CSS.escape(key)}"]`);
        if (again) again.open = true;
      }
      if (done) done();
    }).catch(() => {
      if (target.dataset.loaded === "loading") target.dataset.loaded = "false";
    });
  }

  tree.addEventListener("click", (click) => {
    const button = click.target.closest("button[data-toggle]");
    if (!button || !tree.contains(button)) return;
    const target = byId(button.getAttribute("aria-controls"));
    if (!target) return;
    const open = button.getAttribute("aria-expanded") !== "true";
    button.setAttribute("aria-expanded", String(open));
    target.hidden = !open;
    if (!open) return;
    if (button.dataset.toggle === "detail") {
      loadInto(target, button.dataset.url, () => (target.dataset.loaded = "true"));
    } else if (target.dataset.loaded !== "true" && target.dataset.loaded !== "loading") {
      const parent = button.getAttribute("aria-controls").slice("children-".length);
      target.dataset.loaded = "loading";
      loadInto(target, button.dataset.url, () => {
        target.dataset.loaded = "true";
        // Children created while the list loaded: add the ones it missed.
        for (const id of afterLoad.get(parent) || []) {
          created.add(id);
          pending.add(id);
        }
        afterLoad.delete(parent);
        schedule(FLUSH_MS);
      });
    }
  });

  const focus = tree.dataset.focus && byId(`row-${tree.dataset.focus}`);
  if (focus && tree.dataset.focus !== tree.dataset.trace) focus.scrollIntoView({ block: "center" });
  connect();
})();
