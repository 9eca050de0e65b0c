"""A workspace's hierarchy as a tree: processes at the top, each entity's children below it."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from entities.selectors import entity_list, workspace_get


@login_required
@require_GET
def tree(request: HttpRequest, workspace: str) -> HttpResponse:
    ws = workspace_get(user=request.user, slug=workspace)
    roots = entity_list(user=request.user).filter(workspace=ws, parent_links__isnull=True)
    return render(
        request,
        "designer/tree.html",
        {"workspace": ws, "roots": roots.order_by("type", "name")[:200]},
    )
