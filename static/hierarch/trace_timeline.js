/* The trace page's timeline view (templates/runs/_trace_timeline.html).
 *
 * The server draws the bars (percentages of the trace's span). This script does two things:
 * a click on a row (or Enter on its link) opens that node's details in #timeline-detail, as
 * the tree's Details button does, and keeps the address on that node so it can be shared;
 * while the run can still change, #timeline-body is fetched again every few seconds, so
 * running bars grow and new nodes appear, and the header (#trace-head) follows the run's end.
 * Without this script each row's link opens the same page on that node, its details shown. */
(function () {
  "use strict";

  const timeline = document.getElementById("timeline");
  if (!timeline) return;
  const REFRESH_MS = 3000;
  let selected = null;

  function byId(id) {
    return document.getElementById(id);
  }

  function mark() {
    for (const row of timeline.querySelectorAll(".tl-row.is-selected")) row.classList.remove("is-selected");
    const row = selected && byId(`tl-${selected}`);
    if (row) row.classList.add("is-selected");
  }

  function open(row, link) {
    const panel = byId("timeline-detail");
    if (!panel) return;
    selected = row.id.slice("tl-".length);
    mark();
    panel.hidden = false;
    panel.dataset.loaded = "loading";
    // The node's details address: the trace's own (data-node) with the node's id for the last.
    const url = timeline.dataset.node.replace(/[0-9a-f-]{36}\/$/, `${selected}/`);
    htmx.ajax("GET", url, { source: panel, target: panel, swap: "innerHTML" }).then(() => {
      panel.dataset.loaded = "true";
      panel.dataset.run = selected;
    });
    if (link) history.replaceState(null, "", link.getAttribute("href"));
  }

  timeline.addEventListener("click", (click) => {
    const row = click.target.closest(".tl-row");
    if (!row || !timeline.contains(row)) return;
    if (click.metaKey || click.ctrlKey || click.shiftKey || click.button !== 0) return; // a new tab
    click.preventDefault();
    open(row, row.querySelector("a.tl-name"));
  });

  function live(on) {
    const state = byId("trace-live");
    const head = byId("trace-head");
    if (!state || (head && head.dataset.ended === "true")) return;
    state.dataset.state = on ? "live" : "reconnecting";
    state.textContent = on ? "Live" : "Reconnecting…";
    state.title = on ? `The timeline refreshes every ${REFRESH_MS / 1000} s while the run goes on` : "";
  }

  async function refresh() {
    const body = byId("timeline-body");
    if (!body || body.dataset.active !== "true") return;
    try {
      const response = await fetch(timeline.dataset.refresh, {
        credentials: "same-origin",
        headers: { "HX-Request": "true" },
      });
      if (!response.ok) throw new Error(String(response.status));
      const template = document.createElement("template");
      template.innerHTML = await response.text();
      const fresh = template.content.querySelector("#timeline-body");
      const head = template.content.querySelector("#trace-head");
      const scroll = body.querySelector(".tl-scroll");
      const at = scroll ? [scroll.scrollLeft, scroll.scrollTop] : [0, 0];
      if (fresh) body.replaceWith(fresh);
      const again = byId("timeline-body").querySelector(".tl-scroll");
      if (again) [again.scrollLeft, again.scrollTop] = at;
      const current = byId("trace-head");
      if (head && current) current.replaceWith(head);
      mark();
      live(true);
    } catch (error) {
      live(false);
    }
    schedule();
  }

  function schedule() {
    const body = byId("timeline-body");
    if (body && body.dataset.active === "true") setTimeout(refresh, REFRESH_MS);
  }

  const focused = new URLSearchParams(location.search).has("view") && location.pathname.match(/\/runs\/([0-9a-f-]{36})\//);
  if (focused && focused[1] !== timeline.dataset.trace) {
    selected = focused[1];
    mark();
    const row = byId(`tl-${selected}`);
    if (row) row.scrollIntoView({ block: "center" });
  }
  if (byId("timeline-body") && byId("timeline-body").dataset.active === "true") live(true);
  schedule();
})();
