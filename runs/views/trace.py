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

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET
from django_htmx.middleware import HtmxDetails

from governance.permissions import OPERATE, has_perm_in
from runs.models import ACTIVE
from runs.trace_page import (
    BadRequest,
    node_children,
    node_detail,
    node_rows,
    parse_ids,
    pretty_json,
    trace_page,
)


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


@login_required
@require_GET
def run_trace(request: HtmxHttpRequest, pk: Any) -> HttpResponse:
    page = trace_page(user=request.user, run_id=pk)
    context: dict[str, Any] = {
        "page": page,
        "root": page.root,
        "focus_id": page.focus.pk,
        "trace_id": page.root.pk,
        "socket_path": f"/ws/runs/{page.root.pk}/",
        "may_operate": has_perm_in(request.user, OPERATE, workspace_id=page.root.workspace_id),
        "cancellable": page.root.status in ACTIVE,
        "detail": None,
    }
    if page.focus.pk != page.root.pk:
        # A link to one run of the trace (from an approval, an alert) opens its details.
        context.update(_detail_context(request, page.root.pk, page.focus.pk))
    return render(request, "runs/trace.html", context)


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
    return render(request, "runs/_trace_nodes.html", {"nodes": rows, "trace_id": pk, "rows": True})


def _detail_context(request: HttpRequest, trace_id: Any, node_id: Any) -> dict:
    detail = node_detail(user=request.user, trace_id=trace_id, node_id=node_id)
    run = detail.run
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
    path("<uuid:pk>/nodes/<uuid:node>/", trace_node_detail, name="trace_node"),
    path("<uuid:pk>/nodes/<uuid:node>/children/", trace_node_children, name="trace_children"),
]
