"""Pickers: small GET endpoints that feed the editor's suggestion lists as one types. Each
searches one workspace the user may see, and answers a bounded list."""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from entities.selectors import child_pick_list, entity_in_workspace, workspace_get

MOST_PICKS = 20
ENTITY_TYPES = ("PROCESS", "AGENT", "SKILL", "ACTION")


@login_required
@require_GET
def children(request: HttpRequest, workspace: str) -> HttpResponse:
    """`<option>`s of the workspace's entities that may be a child of the entity edited:
    matching what is typed in a child's box (sent under the box's name, or `q`), of a type
    the type rule allows under `type`; for a saved entity (`entity`), neither it, its
    ancestors nor its children already. At most 20."""
    ws = workspace_get(user=request.user, slug=workspace)
    text = request.GET.get("q", "")
    for key, value in request.GET.items():
        if key.endswith("-child"):
            text = value
    text = text.strip()[:100]
    kind = request.GET.get("type", "")
    parent = None
    shown = request.GET.get("entity", "")
    if shown:
        try:
            parent = entity_in_workspace(user=request.user, workspace=ws, pk=uuid.UUID(shown))
        except ValueError:
            parent = None
        else:
            kind = parent.type
    if kind not in ENTITY_TYPES:
        kind = "AGENT"
    found = child_pick_list(
        workspace=ws, parent_type=kind, text=text, parent=parent, limit=MOST_PICKS
    )
    return render(request, "designer/editor/_child_options.html", {"entities": found})
