"""The tool picker's search: the editor's Tools section asks it for the tools matching what is
typed, sending the ticked ones so that they stay on top (a search never drops a pick)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from designer.editor.tools import MOST_PICKED, picker
from entities.selectors import workspace_get

FIELD = "tools-use"


@login_required
@require_GET
def tool_picker(request: HttpRequest, workspace: str) -> HttpResponse:
    ws = workspace_get(user=request.user, slug=workspace)
    search = request.GET.get("tool_search", "").strip()[:100]
    if "\x00" in search:
        return HttpResponse("A search cannot hold a NUL character.", status=400)
    picked = [
        tool_id
        for tool_id in request.GET.getlist(FIELD)[:MOST_PICKED]
        if "\x00" not in tool_id and len(tool_id) <= 100
    ]
    return render(
        request,
        "designer/editor/_tool_picker.html",
        {"picker": picker(workspace=ws, picked=picked, search=search), "field_name": FIELD},
    )
