/* The designer's tree (templates/designer/tree.html).
 *
 * A node's children are loaded the first time it opens (htmx, from its data-children-url)
 * and every write answers the parent's whole children list, which replaces the old one.
 * Which nodes are open is kept in sessionStorage per workspace, keyed by the path of
 * entity ids from a root (a reused entity is opened where it was opened, not everywhere):
 * a reload opens them again. Children are reordered by drag (SortableJS, on the handle) or
 * with Alt+ArrowUp / Alt+ArrowDown on a row, which press its move buttons; the focus stays
 * on the moved row. "Show in tree" on a search hit opens the path down to it. */
(function () {
  "use strict";

  const page = document.querySelector(".tree-page");
  if (!page) return;
  const tree = document.getElementById("tree");
  const STORE_KEY = "hierarch.designer.tree." + page.dataset.workspace;
  let pendingFocus = null;

  function load() {
    try {
      return new Set(JSON.parse(sessionStorage.getItem(STORE_KEY) || "[]"));
    } catch (error) {
      return new Set();
    }
  }
  const open = load();

  function save() {
    try {
      sessionStorage.setItem(STORE_KEY, JSON.stringify(Array.from(open)));
    } catch (error) {
      // Storage full or refused (private mode): the page works, a reload forgets.
    }
  }

  function keyOf(node) {
    const ids = [];
    for (let at = node; at && at !== tree; at = at.parentElement) {
      if (at.matches("li.node")) ids.unshift(at.dataset.entity);
    }
    return ids.join("/");
  }

  function childList(node) {
    return node.querySelector(":scope > ul.children");
  }

  function isLoaded(list) {
    return list && list.hasAttribute("data-parent");
  }

  /* Open or close a node; opening loads its children once. Resolves when they show. */
  function setOpen(node, wanted) {
    const list = childList(node);
    node.setAttribute("aria-expanded", wanted ? "true" : "false");
    if (wanted) open.add(keyOf(node));
    else open.delete(keyOf(node));
    save();
    if (!wanted) {
      list.hidden = true;
      return Promise.resolve();
    }
    if (isLoaded(list)) {
      list.hidden = false;
      return Promise.resolve();
    }
    node.classList.add("is-loading");
    return htmx
      .ajax("GET", node.dataset.childrenUrl, { source: node, target: list, swap: "outerHTML" })
      .finally(() => node.classList.remove("is-loading"));
  }

  tree.addEventListener("click", (event) => {
    const twisty = event.target.closest("button.twisty");
    if (!twisty) return;
    const node = twisty.closest("li.node");
    setOpen(node, node.getAttribute("aria-expanded") !== "true");
  });

  /* A fresh children list: its node shows open, sortable, and what was open below opens. */
  function settle(list) {
    const node = list.closest("li.node");
    if (node) {
      node.setAttribute("aria-expanded", "true");
      open.add(keyOf(node));
      save();
      const twisty = node.querySelector(":scope > .node-row > .twisty");
      if (twisty) twisty.classList.toggle("is-leaf", list.dataset.total === "0");
    }
    sortable(list);
    list.querySelectorAll(":scope > li.node").forEach((child) => {
      if (open.has(keyOf(child))) setOpen(child, true);
    });
    if (pendingFocus && pendingFocus.parent === list.dataset.parent) {
      const moved = list.querySelector(
        `:scope > li.node[data-entity="${pendingFocus.entity}"] > .node-row`
      );
      if (moved) {
        const button = moved.querySelector(pendingFocus.button);
        (button && !button.disabled ? button : moved.querySelector(".node-name")).focus();
      }
      pendingFocus = null;
    }
  }

  htmx.onLoad((element) => {
    if (element.matches && element.matches("ul.children[data-parent]")) settle(element);
  });

  /* After a write from a row's "Add child" panel, the panel closes and empties. */
  document.body.addEventListener("htmx:afterRequest", (event) => {
    const form = event.detail.elt.closest && event.detail.elt.closest("details.add-child");
    if (!form || !event.detail.successful || event.detail.requestConfig.verb !== "post") return;
    form.open = false;
    form.querySelectorAll("form").forEach((f) => f.reset());
    form.querySelectorAll("input[type=search]").forEach((input) => (input.value = ""));
    form.querySelectorAll(".candidates").forEach((list) => (list.innerHTML = ""));
  });

  /* Alt+ArrowUp / Alt+ArrowDown on a row presses its move button. */
  tree.addEventListener("keydown", (event) => {
    if (!event.altKey || (event.key !== "ArrowUp" && event.key !== "ArrowDown")) return;
    const row = event.target.closest(".node-row");
    if (!row) return;
    const selector = event.key === "ArrowUp" ? ".move-up" : ".move-down";
    const button = row.querySelector(`:scope > .node-actions > ${selector}`);
    if (!button || button.disabled) return;
    event.preventDefault();
    button.click();
  });

  /* Remember which row moved, so the focus follows it into the fresh list. */
  tree.addEventListener("htmx:beforeRequest", (event) => {
    const button = event.detail.elt;
    if (!button.matches || !button.matches(".move-up, .move-down")) return;
    pendingFocus = {
      parent: button.closest("ul.children").dataset.parent,
      entity: button.closest("li.node").dataset.entity,
      button: button.matches(".move-up") ? ".move-up" : ".move-down",
    };
  });

  function sortable(list) {
    if (!window.Sortable || !list.dataset.reorderUrl || list.dataset.sortable) return;
    list.dataset.sortable = "on";
    window.Sortable.create(list, {
      handle: ".drag-handle",
      draggable: "li.node",
      animation: 120,
      onEnd(event) {
        if (event.oldIndex === event.newIndex) return;
        // The ids of the children this page shows, in their new order: the rest keep
        // their places (a long list loads by pages).
        const order = Array.from(list.querySelectorAll(":scope > li.node")).map(
          (node) => node.dataset.entity
        );
        htmx.ajax("POST", list.dataset.reorderUrl, {
          source: list,
          target: list,
          swap: "outerHTML",
          values: { order: order.join(",") },
        });
      },
    });
  }

  /* "Show in tree": open each node on the hit's path and show the hit. */
  async function reveal(path) {
    let container = tree;
    let node = null;
    for (let index = 0; index < path.length; index += 1) {
      node = container.querySelector(`:scope > li.node[data-entity="${path[index]}"]`);
      if (!node) return;
      if (index < path.length - 1) {
        if (node.getAttribute("aria-expanded") !== "true" || !isLoaded(childList(node))) {
          await setOpen(node, true);
        }
        container = childList(node);
      }
    }
    tree.querySelectorAll(".is-found").forEach((found) => found.classList.remove("is-found"));
    node.classList.add("is-found");
    node.scrollIntoView({ block: "center" });
    node.querySelector(":scope > .node-row > .node-name").focus();
  }

  document.getElementById("tree-search-results").addEventListener("click", (event) => {
    const button = event.target.closest("button.reveal");
    if (!button) return;
    reveal(button.closest("li.hit").dataset.path.split(","));
  });

  /* On load: reopen what was open (each level opens the next as it arrives). */
  tree.querySelectorAll(":scope > li.node").forEach((node) => {
    if (open.has(keyOf(node))) setOpen(node, true);
  });
})();
