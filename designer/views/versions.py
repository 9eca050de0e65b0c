"""An entity's versions: the history, a field-by-field comparison of any two, and a restore.

One URL: GET shows the history and compares `?a=` with `?b=` (by default the newest against
the one before); `?restore=1.0.0` asks a designer to confirm; POST restores, through the same
service as the admin (`entity_rollback`), as a new version, so nothing is ever lost. Query
parameters are people's and attackers' text alike: anything but a SemVer is a 400 naming
the parameter, never a database query.
"""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from designer.diff import definition_diff, path_words, short
from entities.definition import DefinitionInvalid
from entities.selectors import entity_get, entity_version_get, entity_version_list, workspace_get
from entities.services import entity_rollback
from governance.permissions import DESIGN, has_perm

# A version as entities.versioning writes it; the column holds at most 20 characters.
SEMVER = re.compile(r"[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}")
PER_PAGE = 50


class BadParameter(ValueError):
    """A query or form parameter that is not a version; its message names it."""


def editor_url(entity: Any) -> str:
    """Where the entity's definition is edited: the designer's editor."""
    return reverse("designer:entity", kwargs={"workspace": entity.workspace.slug, "pk": entity.pk})


def versions_url(entity: Any, **params: str) -> str:
    url = reverse("designer:versions", kwargs={"workspace": entity.workspace.slug, "pk": entity.pk})
    return f"{url}?{urlencode(params)}" if params else url


@login_required
@require_http_methods(["GET", "POST"])
def versions(request: HttpRequest, workspace: str, pk: uuid.UUID) -> HttpResponse:
    """The page (GET) and the restore (POST). The entity must be the user's and this
    workspace's: anything else is a 404, so the URL confirms nothing about other tenants;
    viewers read the history, only designers restore (checked here, not in the template)."""
    ws = workspace_get(user=request.user, slug=workspace)
    entity = entity_get(user=request.user, pk=pk)
    if entity.workspace_id != ws.pk:  # the entity is the user's, but not under this URL
        raise Http404(f"no entity {pk} in {ws.slug}")
    may_restore = has_perm(request.user, DESIGN, ws)
    if request.method == "POST":
        if not may_restore:
            raise PermissionDenied("Only the workspace's designers restore versions.")
        return _restore(request, entity)
    try:
        return _page(request, entity, may_restore=may_restore)
    except BadParameter as problem:
        context = _history(request, entity, may_restore=may_restore)
        context["problem"] = str(problem)
        return render(request, "designer/versions.html", context, status=400)


def _page(request: HttpRequest, entity: Any, *, may_restore: bool) -> HttpResponse:
    context = _history(request, entity, may_restore=may_restore)
    restore = _version_param(request.GET, "restore")
    if restore is not None and not may_restore:
        raise PermissionDenied("Only the workspace's designers restore versions.")
    newest = context["newest"]
    if restore is not None:
        # What restoring would change: from the entity as it is to the version chosen.
        target = entity_version_get(entity=entity, version=restore)
        context["confirm"] = target
        old, new = newest, target
    else:
        old, new = _pair(entity, _version_param(request.GET, "a"), _version_param(request.GET, "b"))
    if old is not None and new is not None:
        context.update(old=old, new=new, diff=definition_diff(old.definition, new.definition))
    return render(request, "designer/versions.html", context)


def _history(request: HttpRequest, entity: Any, *, may_restore: bool) -> dict[str, Any]:
    """The page's frame: the entity, a page of its history (newest first, without the
    definitions, which only the two compared versions need)."""
    history = entity_version_list(entity=entity)
    page = Paginator(history.defer("definition"), PER_PAGE).get_page(request.GET.get("page"))
    newest = history.first()
    return {
        "workspace": entity.workspace,
        "entity": entity,
        "page": page,
        "newest": newest,
        "may_restore": may_restore,
        "editor_url": editor_url(entity),
        "versions_url": versions_url(entity),
    }


def _pair(entity: Any, a: str | None, b: str | None) -> tuple[Any, Any]:
    """The two versions to compare: those asked for; `b` alone against the one before it;
    `a` alone against the newest; neither, the newest against the one before it."""
    history = entity_version_list(entity=entity)
    new = entity_version_get(entity=entity, version=b) if b else history.first()
    if a:
        return entity_version_get(entity=entity, version=a), new
    if new is None:
        return None, None
    # The one before in the history's order (newest first: by time, then id).
    older = history.filter(
        Q(created_at__lt=new.created_at) | Q(created_at=new.created_at, id__lt=new.pk)
    ).first()
    return older, new


def _version_param(params: QueryDict, name: str) -> str | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if not SEMVER.fullmatch(raw):
        raise BadParameter(f"{name}: {short(raw, 40)!r} is not a version such as 1.2.0")
    return raw


def _restore(request: HttpRequest, entity: Any) -> HttpResponse:
    """Restore the version named in the form as a new version, once confirmed; a refusal
    (the definition is no longer valid: a child deleted since) names every problem and
    changes nothing."""
    try:
        wanted = _version_param(request.POST, "version")
    except BadParameter as problem:
        return HttpResponse(str(problem), status=400, content_type="text/plain; charset=utf-8")
    if wanted is None:
        return HttpResponse(
            "version: say which version to restore", status=400, content_type="text/plain"
        )
    version = entity_version_get(entity=entity, version=wanted)
    if request.POST.get("confirmed") != "yes":
        return redirect(versions_url(entity, restore=version.version))
    try:
        result = entity_rollback(version=version, user=request.user)
    except DefinitionInvalid as refused:
        problems = "; ".join(
            f"{path_words(problem.path)}: {problem.message}" if problem.path else problem.message
            for problem in refused.problems
        )
        messages.error(
            request,
            f"Version {version.version} cannot be restored as it is: {problems}. "
            "Nothing was changed.",
        )
        # Back to what the restore would have changed, with the problem above it.
        return redirect(versions_url(entity, a=entity.version, b=version.version))
    if result.version is None:
        messages.info(request, f"The definition already matches version {version.version}.")
    else:
        messages.success(
            request,
            f"Restored version {version.version} as version {result.version.version}.",
        )
    return redirect(versions_url(entity))
