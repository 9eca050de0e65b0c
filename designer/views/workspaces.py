"""The designer's home: the workspaces the user may see, each opening its hierarchy."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from entities.selectors import workspace_list


@login_required
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    """One workspace opens straight away; several are listed to pick from."""
    workspaces = list(workspace_list(user=request.user))
    if len(workspaces) == 1:
        return redirect("designer:tree", workspace=workspaces[0].slug)
    return render(request, "designer/index.html", {"workspaces": workspaces})
