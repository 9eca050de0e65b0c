"""One run's live trace: `/runs/<id>/` shows the whole trace of the run (its root's tree) with
the path to the run open and the run highlighted, then follows `/ws/runs/<trace_id>/`
(runs/consumers.py) through static/hierarch/trace.js.

The fragments have URLs of their own under the trace's id: a node's children (a collapsed
subtree opened), a node's details (steps, plan, state changes, model and tool calls,
requests to people) and fresh rows for the nodes a live event named. Each reads through
runs/trace_page.py in a fixed number of queries; a run of another workspace is a 404.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET
from django_htmx.middleware import HtmxDetails

from governance.permissions import OPERATE, has_perm_in
from runs.attention import run_attention
from runs.models import TERMINAL
from runs.trace_page import (
    STATUS_FILTERS,
    BadRequest,
    model_call_shown,
    node_children,
    node_detail,
    node_rows,
    parse_filter,
    parse_ids,
    pretty_json,
    trace_find,
    trace_page,
    trace_timeline,
)


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


@login_required
@require_GET
def run_trace(request: HtmxHttpRequest, pk: Any) -> HttpResponse:
    if request.GET.get("view") == "timeline":
        return _timeline_page(request, pk)
    page = trace_page(user=request.user, run_id=pk)
    context: dict[str, Any] = {
        "page": page,
        "root": page.root,
        "focus_id": page.focus.pk,
        "trace_id": page.root.pk,
        "socket_path": f"/ws/runs/{page.root.pk}/",
        **_head_context(request, page.root),
        "status_filters": ["all", *STATUS_FILTERS],
        "detail": None,
        "view": "tree",
    }
    if page.focus.pk != page.root.pk:
        # A link to one run of the trace (from an approval, an alert) opens its details.
        context.update(_detail_context(request, page.root.pk, page.focus.pk, row=page.focus))
    return render(request, "runs/trace.html", context)


def _timeline_page(request: HtmxHttpRequest, pk: Any) -> HttpResponse:
    """The trace as a timeline (`?view=timeline`, a shareable address; with `status` and
    `q` it shows what the tree's filter would pick). A link to one run of the trace opens
    its details beside the bars, as the tree does."""
    try:
        context = _timeline_context(request, pk)
    except BadRequest as problem:
        return HttpResponse(str(problem), status=400, content_type="text/plain; charset=utf-8")
    root = context["root"]
    context.update(
        page=None,
        focus_id=pk,
        socket_path=f"/ws/runs/{root.pk}/",
        status_filters=["all", *STATUS_FILTERS],
        detail=None,
        view="timeline",
    )
    if str(pk) != str(root.pk):
        context.update(_detail_context(request, root.pk, pk))
    return render(request, "runs/trace.html", context)


@login_required
@require_GET
def trace_timeline_body(request: HtmxHttpRequest, pk: Any) -> HttpResponse:
    """The timeline's rows and axis again (the page refreshes them while the run can still
    change, so running bars grow), with the header, which follows the root's state."""
    try:
        context = _timeline_context(request, pk)
    except BadRequest as problem:
        return HttpResponse(str(problem), status=400, content_type="text/plain; charset=utf-8")
    return render(request, "runs/_trace_timeline.html#timeline-body", {**context, "head": True})


def _timeline_context(request: HtmxHttpRequest, pk: Any) -> dict[str, Any]:
    status, query = parse_filter(request.GET.get("status", ""), request.GET.get("q", ""))
    timeline = trace_timeline(user=request.user, run_id=pk, status=status, query=query)
    root = timeline.root
    filtering = status != "all" or bool(query)
    return {
        "timeline": timeline,
        "root": root,
        "trace_id": root.pk,
        "filter_status": status,
        "filter_q": query,
        "filtering": filtering,
        "filter_query": urlencode({"status": status, "q": query}) if filtering else "",
        **_head_context(request, root),
    }


@login_required
@require_GET
def trace_node_children(request: HtmxHttpRequest, pk: Any, node: Any) -> HttpResponse:
    parent, children = node_children(user=request.user, trace_id=pk, node_id=node)
    context = {"nodes": children, "trace_id": pk, "focus_id": None, "parent": parent}
    return render(request, "runs/_trace_nodes.html", context)


@login_required
@require_GET
def trace_node_detail(request: HtmxHttpRequest, pk: Any, node: Any) -> HttpResponse:
    return render(request, "runs/_trace_detail.html", _detail_context(request, pk, node))


@login_required
@require_GET
def trace_rows(request: HtmxHttpRequest, pk: Any) -> HttpResponse:
    """Rows for the nodes a live event named, and their ancestors, rendered from the
    database (the truth); the page's script swaps each row in or adds a new node under its
    parent."""
    try:
        ids = parse_ids(request.GET.get("ids", ""))
    except BadRequest as problem:
        return HttpResponse(str(problem), status=400, content_type="text/plain; charset=utf-8")
    rows = node_rows(user=request.user, trace_id=pk, ids=ids)
    context: dict[str, Any] = {"nodes": rows, "trace_id": pk, "rows": True}
    # Every refresh brings the root (an ancestor of every node): the header follows its state.
    root = next((row for row in rows if row.pk == row.trace_id), None)
    if root is not None:
        context.update(_head_context(request, root), root=root, head=True)
    return render(request, "runs/_trace_nodes.html", context)


@login_required
@require_GET
def trace_search(request: HtmxHttpRequest, pk: Any) -> HttpResponse:
    """The nodes a status filter or a name search picks, and the ancestors to open to show
    them (JSON for the page's script); `?status=failed` alone is "expand the failed path"."""
    try:
        status, query = parse_filter(request.GET.get("status", ""), request.GET.get("q", ""))
    except BadRequest as problem:
        return HttpResponse(str(problem), status=400, content_type="text/plain; charset=utf-8")
    found = trace_find(user=request.user, trace_id=pk, status=status, query=query)
    return JsonResponse(found.as_json())


def _head_context(request: HttpRequest, root: Any) -> dict[str, Any]:
    """What the header shows of the trace's root: live only while the run can still change
    (a BLOCKED run may be resumed), Cancel only then (as `run_cancel` takes it), and what it
    waits on a person for."""
    ended = root.status in TERMINAL
    return {
        "may_operate": has_perm_in(request.user, OPERATE, workspace_id=root.workspace_id),
        "cancellable": not ended,
        "run_ended": ended,
        # What the run waits on a person for: which run, why, where to act.
        "attention": [] if ended else run_attention(root),
    }


def _detail_context(request: HttpRequest, trace_id: Any, node_id: Any, row: Any = None) -> dict:
    detail = node_detail(user=request.user, trace_id=trace_id, node_id=node_id, row=row)
    run = detail.run
    definition = run.entity_version.definition if run.entity_version_id else {}
    return {
        "detail": detail,
        "input_json": pretty_json(run.input_data),
        "output_json": pretty_json(run.output_data) if run.output_data is not None else "",
        "state_json": pretty_json(run.state) if run.state else "",
        "steps": [
            {
                "step": step,
                "input_json": pretty_json(step.input) if step.input is not None else "",
                "output_json": pretty_json(step.output) if step.output is not None else "",
            }
            for step in detail.steps
        ],
        "llm_calls": [model_call_shown(call, definition) for call in detail.llm_calls],
        "tool_calls": [
            {
                "call": call,
                "arguments_json": pretty_json(call.input_parameters),
                "result_json": pretty_json(call.output_result)
                if call.output_result is not None
                else "",
            }
            for call in detail.tool_calls
        ],
        "events": [
            {"event": event, "payload_json": pretty_json(event.payload) if event.payload else ""}
            for event in detail.events
        ],
    }


urlpatterns = [
    path("<uuid:pk>/", run_trace, name="detail"),
    path("<uuid:pk>/rows/", trace_rows, name="trace_rows"),
    path("<uuid:pk>/find/", trace_search, name="trace_find"),
    path("<uuid:pk>/timeline/", trace_timeline_body, name="trace_timeline"),
    path("<uuid:pk>/nodes/<uuid:node>/", trace_node_detail, name="trace_node"),
    path("<uuid:pk>/nodes/<uuid:node>/children/", trace_node_children, name="trace_children"),
]
