"""Reads of the live trace page (`runs/views/trace.py`): the tree as far as it is open, one
node's children, one node's details, and fresh rows for the nodes a live event named.

Every read goes through `runs.selectors.run_list`, so a run of another workspace is simply not
found. Each function costs a fixed number of queries whatever the size of the trace: the page
reads the root and the children of the nodes on the path to the requested run, each fragment
one level or one node; deeper subtrees stay collapsed, with their child count.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from governance.safety import pii_shown as shown
from runs.approval_desk import RequestShown, approval_desk
from runs.models import ACTIVE, LLMCall, Run, RunEvent, StepRun, ToolCall, TraceSequence
from runs.selectors import run_list

# What a node's row shows; the wide columns (input, output, state, plan) wait for its details.
NODE_FIELDS = (
    "id",
    "parent_id",
    "trace_id",
    "workspace_id",
    "lineage",
    "depth",
    "status",
    "created_at",
    "started_at",
    "completed_at",
    "execution_time_ms",
    "total_cost_usd",
    "total_tokens",
    "llm_calls",
    "tool_calls",
    "error_code",
    "error_message",
    "group_index",
    "entity_id",
    "entity__name",
    "entity__type",
)
CHILD_ORDER = ("created_at", "group_index", "id")
MAX_ROWS = 200  # ids in one refresh of live rows
MAX_EVENTS = 500  # a node's own events shown in its details (the newest)


class BadRequest(ValueError):
    """A request the page's script would never send; the message names the problem."""


def _nodes(user: Any) -> QuerySet[Run]:
    return run_list(user=user).select_related(None).select_related("entity").only(*NODE_FIELDS)


def _run_in_trace(user: Any, trace_id: Any, node_id: Any) -> Run:
    try:
        return _nodes(user).get(pk=node_id, trace_id=trace_id)
    except Run.DoesNotExist:
        raise Http404("no such run in this trace") from None


def _child_counts(user: Any, parent_ids: Iterable[Any]) -> dict[Any, int]:
    ids = list(parent_ids)
    if not ids:
        return {}
    rows = (
        run_list(user=user)
        .select_related(None)
        .filter(parent_id__in=ids)
        .order_by()
        .values("parent_id")
        .annotate(n=Count("id"))
    )
    return {row["parent_id"]: row["n"] for row in rows}


def _lineage(run: Run) -> list[str]:
    """Ancestor ids, root first, as strings (the column keeps them as JSON)."""
    return [str(pk) for pk in (run.lineage or [])]


# -- what a row shows --------------------------------------------------------------------------


def duration_label(run: Run, now: datetime | None = None) -> str:
    """The run's execution time, or for a run under way how long it has been going."""
    ms: float | None = run.execution_time_ms if run.status not in ACTIVE else None
    if ms is None and run.started_at is not None:
        end = run.completed_at or (now or timezone.now())
        ms = max(0.0, (end - run.started_at).total_seconds() * 1000)
    if ms is None:
        return ""
    if ms < 1000:
        return f"{round(ms)} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def usd(amount: Any) -> str:
    value = Decimal(str(amount or 0))
    if not value:
        return "$0"
    return f"${value:,.6f}".rstrip("0").rstrip(".")


def pretty_json(value: Any) -> str:
    """JSON for a <pre>; the template escapes it (a model or a tool wrote it). Personal data
    sealed under pii_handling REDACT shows as its redaction."""
    return json.dumps(shown(value), indent=2, ensure_ascii=False, sort_keys=False, default=str)


def _decorate(run: Run, counts: dict[Any, int], now: datetime) -> Run:
    run.child_count = counts.get(run.pk, 0)
    run.duration = duration_label(run, now)
    run.cost = usd(run.total_cost_usd)
    run.is_active = run.status in ACTIVE
    run.children_loaded = None  # a list when the page renders the children too
    return run


# -- the page ----------------------------------------------------------------------------------


@dataclass
class TracePage:
    focus: Run  # the run of the address
    root: Run  # its trace's root, with `children_loaded` down the path to the focus
    last_seq: int  # the trace's last event number when the page was read
    path: list[str] = field(default_factory=list)  # ancestor ids of the focus, root first


def trace_page(*, user: Any, run_id: Any) -> TracePage:
    """The trace of `run_id` as the page first shows it: the root and its children, and the
    children of every node on the path to the requested run. Four queries."""
    try:
        focus = _nodes(user).get(pk=run_id)
    except Run.DoesNotExist:
        raise Http404("no such run") from None
    # The event number first, the rows after: an event the rows already reflect is replayed
    # to the page again (harmless: a replayed event re-reads its row), none is missed.
    last_seq = (
        TraceSequence.objects.filter(trace_id=focus.trace_id)
        .values_list("last_seq", flat=True)
        .first()
        or 0
    )
    path = _lineage(focus)
    opened = {*path, str(focus.pk)}
    rows = list(
        _nodes(user)
        .filter(trace_id=focus.trace_id)
        .filter(Q(pk=focus.trace_id) | Q(parent_id__in=opened))
        .order_by(*CHILD_ORDER)
    )
    by_id = {str(row.pk): row for row in rows}
    if str(focus.trace_id) not in by_id:
        raise Http404("this run's trace has no root")
    counts = _child_counts(user, by_id)
    now = timezone.now()
    for row in rows:
        _decorate(row, counts, now)
    for row in rows:
        if str(row.pk) in opened:
            row.children_loaded = []
    for row in rows:
        parent = by_id.get(str(row.parent_id)) if row.parent_id else None
        if parent is not None and parent.children_loaded is not None:
            parent.children_loaded.append(row)
    return TracePage(
        focus=by_id.get(str(focus.pk), focus),
        root=by_id[str(focus.trace_id)],
        last_seq=last_seq,
        path=path,
    )


# -- fragments ---------------------------------------------------------------------------------


def node_children(*, user: Any, trace_id: Any, node_id: Any) -> tuple[Run, list[Run]]:
    """A node and its children rows, each with its own child count. Three queries."""
    parent = _run_in_trace(user, trace_id, node_id)
    children = list(_nodes(user).filter(parent_id=parent.pk).order_by(*CHILD_ORDER))
    counts = _child_counts(user, [child.pk for child in children])
    now = timezone.now()
    return parent, [_decorate(child, counts, now) for child in children]


def node_rows(*, user: Any, trace_id: Any, ids: list[str]) -> list[Run]:
    """Fresh rows for the runs a live event named, and for their ancestors (whose counters
    include them), ancestors first. Three queries; unknown ids are left out."""
    named = list(_nodes(user).filter(trace_id=trace_id, pk__in=ids))
    wanted = {pk for run in named for pk in _lineage(run)} - {str(run.pk) for run in named}
    ancestors = list(_nodes(user).filter(trace_id=trace_id, pk__in=wanted)) if wanted else []
    rows = sorted([*named, *ancestors], key=lambda run: (run.depth, run.created_at))
    counts = _child_counts(user, [run.pk for run in rows])
    now = timezone.now()
    return [_decorate(run, counts, now) for run in rows]


def parse_ids(raw: str) -> list[str]:
    """`?ids=` of the rows refresh: comma-separated run ids, at most MAX_ROWS."""
    ids: list[str] = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            ids.append(str(uuid.UUID(part)))
        except ValueError:
            raise BadRequest(f"ids: {part[:40]!r} is not a run id") from None
    if not ids:
        raise BadRequest("ids: give at least one run id")
    if len(ids) > MAX_ROWS:
        raise BadRequest(f"ids: at most {MAX_ROWS} run ids at once, not {len(ids)}")
    return list(dict.fromkeys(ids))


@dataclass
class NodeDetail:
    run: Run
    plan: list[dict]
    plan_source: str
    steps: list[StepRun]
    llm_calls: list[LLMCall]
    tool_calls: list[ToolCall]
    events: list[RunEvent]
    more_events: bool
    approvals: list[RequestShown]


def node_detail(*, user: Any, trace_id: Any, node_id: Any) -> NodeDetail:
    """Everything one node recorded: its steps, plan, state changes, model and tool calls and
    requests to people. Six queries."""
    try:
        run = (
            run_list(user=user)
            .select_related(None)
            .select_related("entity", "entity_version")
            .get(pk=node_id, trace_id=trace_id)
        )
    except Run.DoesNotExist:
        raise Http404("no such run in this trace") from None
    _decorate(run, {}, timezone.now())
    plan, source = plan_of(run)
    events = list(RunEvent.objects.filter(run_id=run.pk).order_by("-seq")[: MAX_EVENTS + 1])
    return NodeDetail(
        run=run,
        plan=plan,
        plan_source=source,
        steps=list(StepRun.objects.filter(run_id=run.pk).order_by("started_at", "id")),
        llm_calls=list(LLMCall.objects.filter(run_id=run.pk).order_by("timestamp")),
        tool_calls=list(ToolCall.objects.filter(run_id=run.pk).order_by("timestamp")),
        events=events[:MAX_EVENTS][::-1],
        more_events=len(events) > MAX_EVENTS,
        approvals=approval_desk().requests_of_run(run_id=run.pk),
    )


def plan_of(run: Run) -> tuple[list[dict], str]:
    """The plan as run (reconciled) once the run planned, else the pinned version's static
    plan; each step as name, type, target, relationship, required, condition."""
    if run.dynamic_plan:
        return [_plan_step(step) for step in run.dynamic_plan if isinstance(step, dict)], "run"
    definition = run.entity_version.definition if run.entity_version_id else {}
    static = (definition.get("planning") or {}).get("static_plan") or {}
    steps = static.get("steps") if isinstance(static, dict) else None
    if not steps:
        return [], ""
    ordered = sorted((s for s in steps if isinstance(s, dict)), key=lambda s: s.get("order") or 0)
    return [_plan_step(step) for step in ordered], "version"


def _plan_step(step: dict) -> dict:
    target = step.get("target") if isinstance(step.get("target"), dict) else {}
    return {
        "name": str(step.get("name", "")),
        "type": str(step.get("type", "")),
        "target": step.get("tool_id")
        or step.get("target_entity")
        or target.get("tool_id")
        or target.get("entity_id")
        or "",
        "relationship": step.get("relationship") or "",
        "required": step.get("required", True),
        "condition": pretty_json(step["condition"]) if step.get("condition") else "",
    }
