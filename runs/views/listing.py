"""The runs page: every run of the user's workspaces with its live status and filters, and the
three things an operator does from it: start a run (from a form generated from the entity's
input schema), cancel one, run one again.

Each view reads through a scoped selector (another workspace's run or entity is a 404),
checks the operator role itself, calls one service and renders. The list is one partial
(`runs-results`) serving the page, the filters' htmx fetch and its own refresh: while a
shown run is still going, it fetches itself again every few seconds; a page of ended runs
costs nothing.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, push_url
from django_htmx.middleware import HtmxDetails

from entities.forms import SUGGESTIONS, entity_label
from entities.selectors import entity_get, entity_list, entity_startable_list
from governance.permissions import OPERATE, allowed_workspace_ids, has_perm, workspaces_for
from runs.attention import with_attention
from runs.forms import RunFilterForm, RunInputForm
from runs.input_wizard import InputWizard, form_layout
from runs.models import ACTIVE, Run, RunStatus
from runs.selectors import run_list
from runs.services import (
    RunRefused,
    run_cancel,
    run_fire,
    run_grant_passes,
    run_rerun,
    run_start,
)
from runs.store import latest_version, pinned_definition
from runs.trace_page import duration_label

if TYPE_CHECKING:
    from entities.models import Entity

PAGE_SIZE = 25
MAX_PAGE = 10_000  # past this, narrow the list with the filters
POLL_BUSY_S = 2  # a shown run is pending, running or waiting on its children
POLL_PAUSED_S = 10  # only runs paused on a person: they move when someone decides
# The list never reads a run's large JSON columns.
_WIDE = ("input_data", "context", "output_data", "state", "dynamic_plan", "lineage")
_CANCELLABLE = {*ACTIVE, RunStatus.BLOCKED}


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def run_url(run: Run) -> str:
    """The run's live trace page, or its row in the list while that page is not routed."""
    try:
        return reverse("runs:detail", args=[run.pk])
    except NoReverseMatch:
        return f"{reverse('runs:list')}#run-{run.pk}"


# -- the list ----------------------------------------------------------------------------------


def _operate_ids(user: Any) -> frozenset[int] | None:
    """The workspaces where the user may start, cancel and re-run; None: all (superuser)."""
    return None if user.is_superuser else allowed_workspace_ids(user, OPERATE)


def _may_operate(operate_ids: frozenset[int] | None, workspace_id: int) -> bool:
    return operate_ids is None or workspace_id in operate_ids


def _usd(amount: Decimal) -> str:
    if not amount:
        return "$0"
    return f"${amount:,.6f}".rstrip("0").rstrip(".")


def _decorate(run: Run, operate_ids: frozenset[int] | None, now: datetime) -> Run:
    """What a row shows beyond the columns: the operator's buttons, figures for reading."""
    run.may_operate = _may_operate(operate_ids, run.workspace_id)
    run.cancellable = run.status in _CANCELLABLE and not run.cancel_requested
    run.cancelling = run.cancel_requested and run.status in _CANCELLABLE
    run.duration_text = duration_label(run, now)
    run.cost_text = _usd(run.total_cost_usd)
    run.tokens_text = f"{run.total_tokens:,}"
    run.url = run_url(run)
    return run


def _rows(user: Any) -> Any:
    return with_attention(run_list(user=user).select_related("created_by").defer(*_WIDE))


def runs_context(request: HttpRequest, params: QueryDict) -> dict:
    """What the list templates need for the user and the GET parameters."""
    user = request.user
    form = RunFilterForm(params, workspaces=workspaces_for(user), entities=entity_list(user=user))
    operate_ids = _operate_ids(user)
    context: dict[str, Any] = {
        "form": form,
        "runs": [],
        "page": None,
        "query": "",
        "poll_seconds": 0,
        "may_start": operate_ids is None or bool(operate_ids),
    }
    if not form.is_valid():
        return context
    # No COUNT: on a busy workspace it costs more than the page itself, on every refresh.
    # One row past the page says whether an older page exists.
    number = _page_number(params.get("page"))
    offset = (number - 1) * PAGE_SIZE
    rows = list(form.apply(_rows(user))[offset : offset + PAGE_SIZE + 1])
    page = {
        "number": number,
        "has_next": len(rows) > PAGE_SIZE,
        "has_previous": number > 1,
    }
    page["has_other_pages"] = page["has_next"] or page["has_previous"]
    now = timezone.now()
    runs = [_decorate(run, operate_ids, now) for run in rows[:PAGE_SIZE]]
    statuses = {run.status for run in runs}
    if statuses & {RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING}:
        poll = POLL_BUSY_S
    elif RunStatus.PAUSED in statuses:
        poll = POLL_PAUSED_S
    else:
        poll = 0
    context.update(
        runs=runs,
        page=page,
        filtered=form.filtered(),
        query=form.query(),
        page_query=form.query(page=number if number > 1 else None),
        newer_query=form.query(page=number - 1 if number > 2 else None),
        older_query=form.query(page=number + 1),
        poll_seconds=poll,
    )
    return context


def _page_number(raw: Any) -> int:
    """The page asked for; anything that is not a page number is the first page."""
    try:
        number = int(raw)
    except (TypeError, ValueError):
        return 1
    return min(max(number, 1), MAX_PAGE)


def _list_status(context: dict) -> int:
    return 422 if context["form"].errors else 200


@login_required
@require_GET
def runs_list(request: HtmxHttpRequest) -> HttpResponse:
    context = runs_context(request, request.GET)
    return render(request, "runs/list.html", context, status=_list_status(context))


@login_required
@require_GET
def runs_results(request: HtmxHttpRequest) -> HttpResponse:
    """The results alone: for the filters and the pages (the address bar follows) and for
    the list's own refresh (it does not)."""
    context = runs_context(request, request.GET)
    context["oob"] = True  # the filter errors go to their fields, outside the results
    response = render(request, "runs/list.html#runs-results", context, status=_list_status(context))
    if request.htmx and request.htmx.trigger != "runs-results":
        query = context["page_query"] if "page_query" in context else request.GET.urlencode()
        push_url(response, f"{reverse('runs:list')}{'?' if query else ''}{query}")
    return response


_LIST_ID = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,60}")


@login_required
@require_GET
def entity_suggest(request: HtmxHttpRequest) -> HttpResponse:
    """The entity pickers' suggestions (entities/forms.py `EntityPicker`): the user's visible
    entities whose name holds what was typed, in the workspace chosen beside the picker (its
    id or slug), the first SUGGESTIONS by name, as the <datalist> the picker swaps in."""
    typed = request.GET.get("entity", "").strip()[:100]
    listed = request.GET.get("list", "")
    if not _LIST_ID.fullmatch(listed):
        return HttpResponse("list: the id of the picker's datalist", status=400)
    entities = entity_list(user=request.user)
    workspace = request.GET.get("workspace", "").strip()
    if workspace.isascii() and workspace.isdigit():
        entities = entities.filter(workspace_id=int(workspace))
    elif workspace:
        entities = entities.filter(workspace__slug=workspace[:100])
    if "\x00" in typed:
        entities = entities.none()
    elif typed:
        entities = entities.filter(name__icontains=typed)
    context = {
        "list_id": listed,
        "labels": [
            entity_label(e) for e in entities.order_by("name", "workspace__name")[:SUGGESTIONS]
        ],
    }
    return render(request, "runs/_entity_suggestions.html", context)


# -- cancel and re-run -------------------------------------------------------------------------


def _run_for(request: HttpRequest, pk: Any) -> Run:
    """The run, or a 404 when it does not exist or belongs to another workspace; a 403 when
    the user may see it but not act on it."""
    run = get_object_or_404(run_list(user=request.user), pk=pk)
    if not has_perm(request.user, OPERATE, run.workspace):
        raise PermissionDenied(
            f"{request.user.get_username()} may not change runs in {run.workspace.name}; "
            "the operator role is needed"
        )
    return run


def _row(request: HtmxHttpRequest, pk: Any, *, refused: str = "", status: int = 200):
    run = get_object_or_404(_rows(request.user), pk=pk)
    run = _decorate(run, _operate_ids(request.user), timezone.now())
    return render(
        request, "runs/list.html#run-row", {"run": run, "refused": refused}, status=status
    )


def _back(request: HttpRequest, run: Run) -> HttpResponse:
    """Where a form posted without htmx goes: the page it names in `next` (the list), else
    the run's own page (the trace page posts here too)."""
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = run_url(run)
    return redirect(target)


def _refusal_status(refused: RunRefused) -> int:
    return 403 if refused.code == "PERMISSION_DENIED" else 409


@login_required
@require_POST
def run_cancel_view(request: HtmxHttpRequest, pk: Any) -> HttpResponse:
    """Cancel the run and its descendants; htmx gets the row back (its status moves on at
    the next refresh), a run that has ended already says so in its row (409)."""
    run = _run_for(request, pk)
    try:
        run_cancel(run=run, user=request.user)
    except RunRefused as refused:
        if not request.htmx:
            messages.error(request, f"{run.entity.name}: {refused}")
            return _back(request, run)
        return _row(request, pk, refused=str(refused), status=_refusal_status(refused))
    if not request.htmx:
        # The list says so; the run's own page (no `next`) shows the cancel by itself.
        if request.POST.get("next"):
            messages.success(request, f"Cancelling the {run.entity.name} run.")
        return _back(request, run)
    return _row(request, pk)


@login_required
@require_POST
def run_fire_view(request: HttpRequest, pk: Any) -> HttpResponse:
    """Fire a hired subordinate (runs/engine/hiring.py) with the reason the form gives; back
    to the page it was posted from (its trace page), which says what happened."""
    run = _run_for(request, pk)
    try:
        run_fire(run=run, reason=request.POST.get("reason", ""), user=request.user)
    except RunRefused as refused:
        messages.error(request, f"{run.entity.name}: {refused}")
    else:
        messages.success(request, f"Firing the {run.role or run.entity.name} subordinate.")
    return _back(request, run)


@login_required
@require_POST
def run_rerun_view(request: HtmxHttpRequest, pk: Any) -> HttpResponse:
    """Start the run's entity again with the same input and go to the new run; a refusal
    (a quota, an entity with no version) is said in the row."""
    run = _run_for(request, pk)
    try:
        new = run_rerun(run=run, user=request.user)
    except RunRefused as refused:
        if not request.htmx:
            messages.error(request, f"{run.entity.name}: {refused}")
            return _back(request, run)
        return _row(request, pk, refused=str(refused), status=_refusal_status(refused))
    if request.htmx:
        return HttpResponseClientRedirect(run_url(new))
    return redirect(run_url(new))


@login_required
@require_POST
def run_passes_view(request: HttpRequest, pk: Any) -> HttpResponse:
    """Give a run that ran out of passes more (the trace page's form), and go back to its
    trace page, saying what came of it."""
    run = _run_for(request, pk)
    try:
        run_grant_passes(run=run, passes=request.POST.get("passes", ""), user=request.user)
    except RunRefused as refused:
        messages.error(request, f"{run.entity.name}: {refused}")
    else:
        messages.success(request, f"The {run.entity.name} run goes on with more passes.")
    return redirect(run_url(run))


# -- start -------------------------------------------------------------------------------------


@login_required
@require_GET
def run_start_choose(request: HtmxHttpRequest) -> HttpResponse:
    """Choose what to run: the active entities of the workspaces where the user operates."""
    search = request.GET.get("q", "").strip()[:100]
    operate_ids = _operate_ids(request.user)
    context = {
        "search": search,
        "entities": list(entity_startable_list(user=request.user, search=search)[:200]),
        "may_start": operate_ids is None or bool(operate_ids),
    }
    template = "runs/start.html"
    if request.htmx and request.htmx.target == "start-entities":
        template += "#start-entities"
    return render(request, template, context)


def _refusal_for_viewer(user: Any, entity: Entity) -> str:
    return (
        f"{user.get_username()} may not start runs in {entity.workspace.name}; "
        "the operator role is needed"
    )


@login_required
@require_http_methods(["GET", "POST"])
def run_start_entity(request: HtmxHttpRequest, entity_id: Any) -> HttpResponse:
    """The input form of one entity, laid out as its version's ui_hints say (one form, or a
    wizard: runs/input_wizard.py). A valid input starts a run and goes to its page; an input
    the schema refuses comes back at its fields with what was typed (422)."""
    entity = entity_get(user=request.user, pk=entity_id)
    version = latest_version(entity)
    definition = pinned_definition(version.pk, entity.pk) if version is not None else {}
    contract = definition.get("io_contract", {}).get("input", {})
    schema = contract.get("schema", {})
    rules = contract.get("validation_rules", [])
    data = request.POST if request.method == "POST" else None
    form = RunInputForm(data, schema=schema, rules=rules)
    context: dict[str, Any] = {
        "entity": entity,
        "version": version,
        "form": form,
        "schema_json": json.dumps(schema, indent=2, ensure_ascii=False),
        "refused": "",
    }
    may_operate = has_perm(request.user, OPERATE, entity.workspace)
    if not may_operate:
        context["refused"] = _refusal_for_viewer(request.user, entity)
    elif version is None:
        context["refused"] = f"{entity.name} has no saved version yet; save it in the designer."
    elif not entity.is_active:
        context["refused"] = (
            f"{entity.name} is {entity.status.lower()}: only active entities run. "
            "Activate it in the designer first."
        )
    context["may_start"] = not context["refused"]
    # The layout of the version that runs: a wizard page at a time, or the one form.
    wizard = context["wizard"] = InputWizard.of(form_layout(definition), form, data)
    if request.method == "GET":
        return render(
            request, "runs/start_entity.html", context, status=403 if not may_operate else 200
        )
    if not may_operate:
        return _start_form(request, context, status=403)
    if not context["may_start"]:
        return _start_form(request, context, status=409)
    if wizard is not None and not wizard.finished:
        # Another page of the wizard (or the one with the problems), all typed kept.
        return _start_form(request, context, status=wizard.status)
    if wizard is None and not form.is_valid():
        return _start_form(request, context, status=422)
    try:
        run = run_start(entity=entity, input_data=form.input_data, user=request.user)
    except RunRefused as refused:
        context["refused"] = str(refused)
        return _start_form(request, context, status=_refusal_status(refused))
    if request.htmx:
        return HttpResponseClientRedirect(run_url(run))
    return redirect(run_url(run))


def _start_form(request: HtmxHttpRequest, context: dict, *, status: int) -> HttpResponse:
    """The form for htmx, the whole page otherwise (a form posted without JavaScript lands
    back on the page with its errors)."""
    template = "runs/start_entity.html"
    if request.htmx:
        template += "#start-form"
    return render(request, template, context, status=status)


urlpatterns = [
    path("", runs_list, name="list"),
    path("results/", runs_results, name="results"),
    path("entities/", entity_suggest, name="entity_suggest"),
    path("start/", run_start_choose, name="start"),
    path("start/<uuid:entity_id>/", run_start_entity, name="start_entity"),
    path("<uuid:pk>/cancel/", run_cancel_view, name="cancel"),
    path("<uuid:pk>/fire/", run_fire_view, name="fire"),
    path("<uuid:pk>/rerun/", run_rerun_view, name="rerun"),
    path("<uuid:pk>/passes/", run_passes_view, name="passes"),
]
