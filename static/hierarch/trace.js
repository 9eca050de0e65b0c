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
 * there. Opening a node loads its children or its details with htmx.
 *
 * The header (#trace-head) says whether the run can still change: the server renders it from
 * the root's status, and every rows refresh brings it again (the root is an ancestor of every
 * node), so a run that ends while the page is open stops showing "Live" and "Cancel run".
 *
 * Which nodes are open is kept in sessionStorage under the trace's id: a reload opens them
 * again (loading their children), and closes the ones a person closed.
 *
 * The filter bar asks the server (/find/) which nodes a status or a name picks and which
 * ancestors show them; it opens those and hides the rest. "Expand the failed path" opens
 * every ancestor of every failed node. */
(function () {
  "use strict";

  const tree = document.getElementById("trace");
  if (!tree) return;
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

  function ended() {
    const head = byId("trace-head");
    return Boolean(head && head.dataset.ended === "true");
  }

  function setState(state, text) {
    const live = byId("trace-live");
    if (!live || ended()) return; // an ended run says so, whatever the socket does
    live.dataset.state = state;
    live.textContent = text;
  }

  const TERMINAL = ["completed", "failed", "cancelled"];

  function showEnded(status) {
    // At once, before the rows refresh brings the server's header: no Cancel, not live.
    const head = byId("trace-head");
    if (!head) return;
    head.dataset.ended = "true";
    head.dataset.status = status;
    const live = byId("trace-live");
    if (live) {
      live.dataset.state = "ended";
      live.textContent = "Ended · " + status.charAt(0).toUpperCase() + status.slice(1);
    }
    const cancel = head.querySelector('form[action$="/cancel/"]');
    if (cancel) cancel.remove();
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
      const node = byId(`node-${id}`);
      if (node) node.dataset.status = String(payload.status).toLowerCase();
      if (id === tree.dataset.trace && TERMINAL.includes(String(payload.status).toLowerCase())) {
        showEnded(String(payload.status).toLowerCase());
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
    const head = template.content.querySelector("#trace-head");
    const currentHead = byId("trace-head");
    if (head && currentHead) {
      currentHead.replaceWith(head);
      // Still live: the socket's state, not the server's "Connecting…".
      if (head.dataset.ended !== "true" && socket && window.hierarchTraceLive) {
        setState("live", "Live");
      }
    }
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
          present.dataset.status = node.dataset.status;
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
          const toggle = node.querySelector(`[aria-controls="children-${id}"]`);
          if (toggle) toggle.setAttribute("aria-expanded", "true"); // the arrow says open
          remember(id, true);
        }
        created.delete(id);
      }
      const empty = parentList.querySelector(":scope > .node-empty");
      if (empty) empty.remove();
      node.classList.add("is-new");
      parentList.appendChild(node);
      htmx.process(node);
      applyFilter();
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
    // Its own source: htmx drops a request while the same source has one in flight, and two
    // lists opened at once (a reload restoring them) would share the body otherwise.
    return htmx.ajax("GET", url, { source: target, target: target, swap: "innerHTML" }).then(() => {
      for (const key of open) {
        const again = target.querySelector(`details[data-key="${CSS.escape(key)}"]`);
        if (again) again.open = true;
      }
      if (done) done();
    }).catch(() => {
      if (target.dataset.loaded === "loading") target.dataset.loaded = "false";
    });
  }

  // -- which nodes are open, kept across reloads ---------------------------------------------

  const STORE_KEY = `hierarch:trace-open:${tree.dataset.trace}`;

  function stored() {
    try {
      const value = JSON.parse(sessionStorage.getItem(STORE_KEY) || "{}");
      return { open: new Set(value.open || []), closed: new Set(value.closed || []) };
    } catch (error) {
      return { open: new Set(), closed: new Set() };
    }
  }

  function remember(id, open) {
    const state = stored();
    (open ? state.open : state.closed).add(id);
    (open ? state.closed : state.open).delete(id);
    try {
      sessionStorage.setItem(
        STORE_KEY,
        JSON.stringify({ open: Array.from(state.open), closed: Array.from(state.closed) })
      );
    } catch (error) {
      // Storage full or refused (private mode): the page works, a reload forgets.
    }
  }

  function childrenButton(id) {
    return document.querySelector(`#row-${CSS.escape(id)} [data-toggle="children"]`);
  }

  function isOpen(id) {
    const list = byId(`children-${id}`);
    return Boolean(list && !list.hidden && list.dataset.loaded !== "false");
  }

  // Open or close a node's children; resolves once they are in the page.
  function setChildren(id, open, keep = true) {
    const button = childrenButton(id);
    const target = byId(`children-${id}`);
    if (!button || !target) return Promise.resolve(false);
    button.setAttribute("aria-expanded", String(open));
    target.hidden = !open;
    if (keep) remember(id, open);
    if (!open || target.dataset.loaded === "true") return Promise.resolve(true);
    if (target.dataset.loaded === "loading") return target.loading || Promise.resolve(true);
    target.dataset.loaded = "loading";
    target.loading = new Promise((resolve) => {
      loadInto(target, button.dataset.url, () => {
        target.dataset.loaded = "true";
        // Children created while the list loaded: add the ones it missed.
        for (const child of afterLoad.get(id) || []) {
          created.add(child);
          pending.add(child);
        }
        afterLoad.delete(id);
        schedule(FLUSH_MS);
        applyFilter();
        resolve(true);
      }).then(() => resolve(false));
    });
    return target.loading;
  }

  // Open every id in `ids` that is in the page, level by level as their parents load.
  async function openAll(ids, keep) {
    const wanted = new Set(ids);
    for (let round = 0; round < 64 && wanted.size; round += 1) {
      const now = Array.from(wanted).filter((id) => childrenButton(id));
      if (!now.length) break;
      now.forEach((id) => wanted.delete(id));
      await Promise.all(now.filter((id) => !isOpen(id)).map((id) => setChildren(id, true, keep)));
    }
  }

  function restore() {
    const state = stored();
    const focus = tree.dataset.focus && byId(`row-${tree.dataset.focus}`);
    for (const id of state.closed) {
      const node = byId(`node-${id}`);
      // The path to the run of the address stays open: that is what the link asked for.
      if (node && !(focus && node.contains(focus) && id !== tree.dataset.focus)) {
        setChildren(id, false, false);
      }
    }
    return openAll(state.open, false);
  }

  tree.addEventListener("click", (click) => {
    const button = click.target.closest("button[data-toggle]");
    if (!button || !tree.contains(button)) return;
    const target = byId(button.getAttribute("aria-controls"));
    if (!target) return;
    const open = button.getAttribute("aria-expanded") !== "true";
    if (button.dataset.toggle === "children") {
      setChildren(button.getAttribute("aria-controls").slice("children-".length), open);
      return;
    }
    button.setAttribute("aria-expanded", String(open));
    target.hidden = !open;
    if (open) loadInto(target, button.dataset.url, () => (target.dataset.loaded = "true"));
  });

  // -- filter, search, the failed path ---------------------------------------------------------

  const tools = byId("trace-tools");
  const statusBox = byId("trace-status");
  const searchBox = byId("trace-search");
  const foundLine = byId("trace-found");
  const findUrl = tree.dataset.find;
  let filter = null; // {shown: Set of ids} while a filter or search is on
  let asked = 0;

  function say(text) {
    if (foundLine) foundLine.textContent = text;
  }

  async function find(status, q) {
    const params = new URLSearchParams({ status: status, q: q });
    const response = await fetch(`${findUrl}?${params}`, {
      credentials: "same-origin",
      headers: { "HX-Request": "true" },
    });
    if (!response.ok) throw new Error(await response.text());
    return response.json();
  }

  function applyFilter() {
    for (const node of tree.querySelectorAll("li.node")) {
      const hide = Boolean(filter) && !filter.shown.has(node.dataset.run);
      node.classList.toggle("filtered-out", hide);
      node.classList.toggle("is-match", Boolean(filter) && filter.matches.has(node.dataset.run));
    }
  }

  async function refilter() {
    const status = statusBox ? statusBox.value : "all";
    const q = searchBox ? searchBox.value.trim() : "";
    const mine = (asked += 1);
    if (status === "all" && !q) {
      filter = null;
      applyFilter();
      say("");
      return;
    }
    say("Searching…");
    let found;
    try {
      found = await find(status, q);
    } catch (error) {
      if (mine === asked) say(String(error.message || error));
      return;
    }
    if (mine !== asked) return; // a newer question is on its way
    filter = {
      matches: new Set(found.matches),
      shown: new Set([...found.matches, ...found.open, tree.dataset.trace]),
    };
    applyFilter();
    await openAll(found.open, false);
    applyFilter();
    const n = found.matches.length;
    say(
      n === 0
        ? "No node matches."
        : n === 1
          ? "1 node matches."
          : `${n}${found.more ? "+ (the first shown)" : ""} nodes match.`
    );
  }

  async function expandFailedPath() {
    say("Opening the failed path…");
    let found;
    try {
      found = await find("failed", "");
    } catch (error) {
      say(String(error.message || error));
      return;
    }
    await openAll(found.open, true);
    const n = found.matches.length;
    say(n === 0 ? "No node failed." : `${n}${found.more ? "+" : ""} failed node${n === 1 ? "" : "s"}, their ancestors open.`);
    const first = found.matches[0] && byId(`row-${found.matches[0]}`);
    if (first) first.scrollIntoView({ block: "center" });
  }

  if (tools) {
    tools.hidden = false;
    tools.addEventListener("submit", (submit) => submit.preventDefault());
    if (statusBox) statusBox.addEventListener("change", refilter);
    let typing = null;
    if (searchBox) {
      searchBox.addEventListener("input", () => {
        clearTimeout(typing);
        typing = setTimeout(refilter, 250);
      });
    }
    const failedButton = byId("trace-failed-path");
    if (failedButton) failedButton.addEventListener("click", expandFailedPath);
    const collapse = byId("trace-collapse");
    if (collapse) {
      collapse.addEventListener("click", () => {
        for (const button of tree.querySelectorAll('[data-toggle="children"][aria-expanded="true"]')) {
          setChildren(button.getAttribute("aria-controls").slice("children-".length), false);
        }
      });
    }
  }

  const focus = tree.dataset.focus && byId(`row-${tree.dataset.focus}`);
  if (focus && tree.dataset.focus !== tree.dataset.trace) focus.scrollIntoView({ block: "center" });
  restore().then(() => {
    tree.dataset.restored = "true";
  });
  if (ended()) {
    // Nothing more will change: no socket to hold open.
    tree.dataset.seq = String(lastSeq);
  } else {
    connect();
  }
})();
