"""A workspace's hierarchy as a tree: processes at the top, each entity's children below it,
and the workspace's templates above it (designer/views/cloning.py).

A workspace may hold thousands of entities, so the page renders only the roots; each node
loads its children when it is opened (one partial, `_tree_children.html`, also the answer of
every write), a page of them at a time. Every write goes through `entities.services`, which
validates the parent's whole definition as any other save does; a refusal comes back in the
children list of the node it concerns, and nothing is saved.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.middleware import HtmxDetails

from entities.definition import DefinitionInvalid, Problem
from entities.selectors import (
    child_candidates,
    entity_in_workspace,
    link_upgrades,
    template_list,
    tree_children,
    tree_roots,
    tree_search,
    workspace_get,
)
from entities.services import (
    entity_create_child,
    entity_link_child,
    entity_reorder_children,
    entity_unlink_child,
)
from entities.validation import allowed_child_types
from governance.permissions import DESIGN, has_perm

# What "New" offers on the tree page: an entity of any type, on its own (a child is added
# from its parent's row).
NEW_KINDS = (("PROCESS", "Process"), ("AGENT", "Agent"), ("SKILL", "Skill"), ("ACTION", "Action"))

# Rows per page: a node with more children (or a workspace with more roots) shows a
# "Show more" row. Small enough that a page stays light at any size.
PAGE = 50
SEARCH_LIMIT = 20
CANDIDATE_LIMIT = 10
# The tree page's list of templates ("Use as template"); more are found by the search.
TEMPLATE_LIMIT = 50


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _offset(request: HttpRequest) -> int:
    raw = request.GET.get("offset", "")
    return int(raw) if raw.isascii() and raw.isdecimal() and len(raw) < 9 else 0


def _context(request: HttpRequest, workspace: str) -> dict[str, Any]:
    ws = workspace_get(user=request.user, slug=workspace)
    return {
        "workspace": ws,
        "can_design": has_perm(request.user, DESIGN, ws),
        "new_kinds": NEW_KINDS,
    }


def _node(entity: Any, *, child_count: int, parent_count: int) -> dict[str, Any]:
    """What a row shows of an entity, and what may be added under it."""
    return {
        "entity": entity,
        "child_count": child_count,
        "parent_count": parent_count,
        "child_types": allowed_child_types(entity.type),
    }


def _children_context(
    context: dict[str, Any], parent: Any, *, offset: int = 0, limit: int = PAGE
) -> dict[str, Any]:
    links = tree_children(parent=parent)
    total = links.count()
    rows = list(links[offset : offset + limit])
    # A link whose version misses a newer one of its child says so (no query without one).
    upgrades = link_upgrades(links=[(link.child_id, link.version or None) for link in rows])
    context.update(
        parent=parent,
        total=total,
        offset=offset,
        next_offset=offset + len(rows) if offset + len(rows) < total else None,
        remaining=total - offset - len(rows),
        nodes=[
            {
                **_node(
                    link.child,
                    child_count=link.child_child_count,
                    parent_count=link.child_parent_count,
                ),
                "position": offset + index + 1,
                "upgrade": upgrades[index],
            }
            for index, link in enumerate(rows)
        ],
    )
    return context


@login_required
@require_GET
def tree(request: HtmxHttpRequest, workspace: str) -> HttpResponse:
    """The page: the workspace's roots (a page of them), the search and the tree's script."""
    context = _context(request, workspace)
    offset = _offset(request)
    roots = tree_roots(workspace=context["workspace"])
    total = roots.count()
    rows = list(roots[offset : offset + PAGE])
    context.update(
        total=total,
        next_offset=offset + len(rows) if offset + len(rows) < total else None,
        remaining=total - offset - len(rows),
        nodes=[
            _node(entity, child_count=entity.child_count, parent_count=entity.parent_count)
            for entity in rows
        ],
    )
    if request.htmx and offset:
        return render(request, "designer/tree.html#tree-roots", context)
    templates = template_list(workspace=context["workspace"])
    context.update(templates=list(templates[:TEMPLATE_LIMIT]), template_count=templates.count())
    # Without script the search form reloads the page with `q`: the hits are shown in it.
    text = request.GET.get("q", "").strip()[:100]
    if text:
        context.update(text=text, limit=SEARCH_LIMIT)
        context["hits"] = tree_search(workspace=context["workspace"], text=text, limit=SEARCH_LIMIT)
    return render(request, "designer/tree.html", context)


@login_required
@require_GET
def children(request: HtmxHttpRequest, workspace: str, pk: Any) -> HttpResponse:
    """One node's children: the whole list, or with `offset` the rows of "Show more"."""
    context = _context(request, workspace)
    parent = entity_in_workspace(user=request.user, workspace=context["workspace"], pk=pk)
    offset = _offset(request)
    _children_context(context, parent, offset=offset)
    template = "designer/_tree_children.html"
    return render(request, f"{template}#tree-rows" if offset else template, context)


@login_required
@require_GET
def search(request: HtmxHttpRequest, workspace: str) -> HttpResponse:
    """Entities whose name, display name or tag holds the text, each with its path."""
    context = _context(request, workspace)
    text = request.GET.get("q", "").strip()[:100]
    hits = (
        tree_search(workspace=context["workspace"], text=text, limit=SEARCH_LIMIT) if text else []
    )
    context.update(text=text, hits=hits, limit=SEARCH_LIMIT)
    return render(request, "designer/_tree_search.html", context)


def _designable(request: HttpRequest, workspace: str, pk: Any) -> tuple[dict[str, Any], Any]:
    """The context and the parent for a write: a viewer of the workspace is refused (403);
    an entity of another workspace is not found (404)."""
    context = _context(request, workspace)
    if not context["can_design"]:
        raise PermissionDenied("you may view this workspace's hierarchy but not change it")
    parent = entity_in_workspace(user=request.user, workspace=context["workspace"], pk=pk)
    return context, parent


@login_required
@require_GET
def candidates(request: HtmxHttpRequest, workspace: str, pk: Any) -> HttpResponse:
    """Existing entities that may become the node's child (the autocomplete of "Add")."""
    context, parent = _designable(request, workspace, pk)
    text = request.GET.get("q", "").strip()[:100]
    found = child_candidates(parent=parent, text=text, limit=CANDIDATE_LIMIT)
    context.update(parent=parent, candidates=found, text=text)
    return render(request, "designer/_tree_candidates.html", context)


def _after_write(
    request: HttpRequest,
    context: dict[str, Any],
    parent: Any,
    write: Any,
    *,
    shown: int = PAGE,
) -> HttpResponse:
    """Run the write; answer the parent's children as they are now, with the problems
    of a refusal on top (422), so the message sits at the node and nothing else moves."""
    problems: list[Problem] = []
    saved = None
    try:
        saved = write()
    except DefinitionInvalid as invalid:
        problems = invalid.problems
    parent.refresh_from_db(fields=["version"])
    _children_context(context, parent, limit=max(shown, PAGE))
    context.update(problems=problems, saved=saved)
    return render(
        request,
        "designer/_tree_children.html",
        context,
        status=422 if problems else 200,
    )


def _child(context: dict[str, Any], request: HttpRequest) -> Any:
    return entity_in_workspace(
        user=request.user, workspace=context["workspace"], pk=request.POST.get("child", "")
    )


@login_required
@require_POST
def link(request: HtmxHttpRequest, workspace: str, pk: Any) -> HttpResponse:
    """Add an existing entity as the node's last child."""
    context, parent = _designable(request, workspace, pk)
    child = _child(context, request)
    return _after_write(
        request,
        context,
        parent,
        lambda: entity_link_child(parent=parent, child=child, user=request.user),
    )


@login_required
@require_POST
def create(request: HtmxHttpRequest, workspace: str, pk: Any) -> HttpResponse:
    """Create a DRAFT entity of an allowed type and add it as the node's last child."""
    context, parent = _designable(request, workspace, pk)
    entity_type = request.POST.get("type", "")
    name = request.POST.get("name", "").strip()
    description = request.POST.get("description", "").strip()

    def write() -> Any:
        # The type rule and names are checked again by validation; these answers are only
        # plainer than the schema's for what a form can get wrong.
        if entity_type not in allowed_child_types(parent.type):
            allowed = ", ".join(allowed_child_types(parent.type)) or "nothing"
            raise DefinitionInvalid(
                [Problem("type", f"a {parent.type} may hold {allowed}; pick one of those")]
            )
        if not name:
            raise DefinitionInvalid([Problem("name", "give the new entity a name")])
        return entity_create_child(
            parent=parent,
            type=entity_type,
            name=name,
            description=description,
            user=request.user,
        )

    return _after_write(request, context, parent, write)


@login_required
@require_POST
def unlink(request: HtmxHttpRequest, workspace: str, pk: Any) -> HttpResponse:
    """Remove a child from the node (the child entity itself stays)."""
    context, parent = _designable(request, workspace, pk)
    child = _child(context, request)
    return _after_write(
        request,
        context,
        parent,
        lambda: entity_unlink_child(parent=parent, child=child, user=request.user),
    )


@login_required
@require_POST
def reorder(request: HtmxHttpRequest, workspace: str, pk: Any) -> HttpResponse:
    """A new order of the node's children: `order` (comma-separated ids of the first
    children, from a drag), or `child` moved `by` one place up (-1) or down (1)."""
    context, parent = _designable(request, workspace, pk)
    order = [part for part in request.POST.get("order", "").split(",") if part]
    shown, missing = len(order), ""
    if not order:
        child = _child(context, request)
        order = [str(link.child_id) for link in tree_children(parent=parent)]
        at = next((i for i, pk in enumerate(order) if pk == str(child.pk)), None)
        to = None if at is None else at + (-1 if request.POST.get("by") == "-1" else 1)
        if at is not None and to is not None and 0 <= to < len(order):
            order[at], order[to] = order[to], order[at]
            shown = to + 2
        elif at is None:
            missing = child.name
        else:
            order = []  # already first (or last): nothing moves

    def write() -> Any:
        if missing:
            raise DefinitionInvalid(
                [
                    Problem(
                        "hierarchy.children",
                        f"\u201c{missing}\u201d is not a child of \u201c{parent.name}\u201d "
                        "any more: the list below is as it is now",
                    )
                ]
            )
        if not order:
            return None
        return entity_reorder_children(parent=parent, order=order, user=request.user)

    return _after_write(request, context, parent, write, shown=shown)
