"""Reads of the live trace page (`runs/views/trace.py`): the tree as far as it is open, one
node's children, one node's details, and fresh rows for the nodes a live event named.

Every read goes through `runs.selectors.run_list`, so a run of another workspace is simply not
found. Each function costs a fixed number of queries whatever the size of the trace: the page
reads the root and the children of the nodes on the path to the requested run, each fragment
one level or one node; deeper subtrees stay collapsed, with their child count.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.http import Http404
from django.utils import timezone

from config.json_input import json_input_problems
from entities.selectors import entity_list
from governance.safety import ENCRYPTED_PREFIX
from governance.safety import pii_shown as shown
from runs.approval_desk import HumanWait, RequestShown, approval_desk
from runs.models import (
    ACTIVE,
    TERMINAL,
    LLMCall,
    Run,
    RunEvent,
    RunStatus,
    StepRun,
    ToolCall,
    TraceSequence,
)
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
    "budget_usd",
    "total_tokens",
    "llm_calls",
    "tool_calls",
    "error_code",
    "error_message",
    "group_index",
    "entity_id",
    "entity__name",
    "entity__display_name",
    "entity__type",
    "entity_version__version",
    "parent_step_key",
    # A subordinate hired at run time (runs/engine/hiring.py), and its firing.
    "role",
    "task",
    "hired_reason",
    "hired_by_id",
    "fired_reason",
    "fired_by",
)
CHILD_ORDER = ("created_at", "group_index", "id")
MAX_ROWS = 200  # ids in one refresh of live rows
MAX_EVENTS = 500  # a node's own events shown in its details (the newest)
MAX_FOUND = 200  # nodes one search or status filter returns (the first, in tree order)
# The page's status filter: each choice and the statuses it takes in.
STATUS_FILTERS: dict[str, tuple[str, ...]] = {
    "failed": (RunStatus.FAILED,),
    "running": (RunStatus.RUNNING, RunStatus.PENDING),
    "waiting": (RunStatus.WAITING, RunStatus.PAUSED, RunStatus.BLOCKED),
    "completed": (RunStatus.COMPLETED,),
    "cancelled": (RunStatus.CANCELLED,),
}


class BadRequest(ValueError):
    """A request the page's script would never send; the message names the problem."""


def _nodes(user: Any) -> QuerySet[Run]:
    return (
        run_list(user=user)
        .select_related(None)
        .select_related("entity", "entity_version")
        .only(*NODE_FIELDS)
    )


def _run_in_trace(user: Any, trace_id: Any, node_id: Any) -> Run:
    try:
        return _nodes(user).get(pk=node_id, trace_id=trace_id)
    except Run.DoesNotExist:
        raise Http404("no such run in this trace") from None


@dataclass(frozen=True)
class Below:
    """What a node's children add up to: how many, and their counters (which include their
    own descendants'), so that a node's own share is its counter less theirs."""

    children: int = 0
    tokens: int = 0
    cost: Decimal = Decimal(0)
    llm_calls: int = 0
    tool_calls: int = 0


def _below(user: Any, parent_ids: Iterable[Any]) -> dict[Any, Below]:
    """Per parent, its children's count and summed counters. One query."""
    ids = list(parent_ids)
    if not ids:
        return {}
    rows = (
        run_list(user=user)
        .select_related(None)
        .filter(parent_id__in=ids)
        .order_by()
        .values("parent_id")
        .annotate(
            n=Count("id"),
            tokens=Sum("total_tokens"),
            cost=Sum("total_cost_usd"),
            llm=Sum("llm_calls"),
            tool=Sum("tool_calls"),
        )
    )
    return {
        row["parent_id"]: Below(
            children=row["n"],
            tokens=row["tokens"] or 0,
            cost=Decimal(str(row["cost"] or 0)),
            llm_calls=row["llm"] or 0,
            tool_calls=row["tool"] or 0,
        )
        for row in rows
    }


def _step_names(rows: Iterable[Run]) -> dict[tuple[str, str], str]:
    """The name of the parent's step that started each row, by (parent id, step key). One
    query over the steps of the rows' parents (which the caller has already read, scoped)."""
    wanted = {
        (str(run.parent_id), run.parent_step_key.rsplit("#", 1)[0])
        for run in rows
        if run.parent_id and run.parent_step_key
    }
    if not wanted:
        return {}
    found = StepRun.objects.filter(
        run_id__in={parent for parent, _ in wanted}, step_key__in={key for _, key in wanted}
    ).values_list("run_id", "step_key", "name")
    return {(str(run_id), key): name for run_id, key, name in found}


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


def entity_label(entity: Any) -> str:
    """How the page names an entity: its display name, else its name."""
    return (getattr(entity, "display_name", "") or entity.name) if entity is not None else ""


def _decorate(
    run: Run,
    below: dict[Any, Below],
    now: datetime,
    steps: dict[tuple[str, str], str] | None = None,
) -> Run:
    under = below.get(run.pk, Below())
    run.child_count = under.children
    run.duration = duration_label(run, now)
    run.cost = usd(run.total_cost_usd)
    run.budget = usd(run.budget_usd) if run.budget_usd is not None else ""
    # The counters include the runs below; a node's own share is what its children leave.
    run.own_tokens = max(0, (run.total_tokens or 0) - under.tokens)
    run.own_cost = usd(max(Decimal(0), Decimal(str(run.total_cost_usd or 0)) - under.cost))
    run.own_llm_calls = max(0, (run.llm_calls or 0) - under.llm_calls)
    run.own_tool_calls = max(0, (run.tool_calls or 0) - under.tool_calls)
    run.is_active = run.status in ACTIVE
    run.children_loaded = None  # a list when the page renders the children too
    key = run.parent_step_key.rsplit("#", 1)[0] if run.parent_step_key else ""
    run.step_name = (steps or {}).get((str(run.parent_id), key), "") if key else ""
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
    below = _below(user, by_id)
    steps = _step_names(rows)
    now = timezone.now()
    for row in rows:
        _decorate(row, below, now, steps)
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
    below = _below(user, [child.pk for child in children])
    steps = _step_names(children)
    now = timezone.now()
    return parent, [_decorate(child, below, now, steps) for child in children]


def node_rows(*, user: Any, trace_id: Any, ids: list[str]) -> list[Run]:
    """Fresh rows for the runs a live event named, and for their ancestors (whose counters
    include them), ancestors first. Three queries; unknown ids are left out."""
    named = list(_nodes(user).filter(trace_id=trace_id, pk__in=ids))
    wanted = {pk for run in named for pk in _lineage(run)} - {str(run.pk) for run in named}
    ancestors = list(_nodes(user).filter(trace_id=trace_id, pk__in=wanted)) if wanted else []
    rows = sorted([*named, *ancestors], key=lambda run: (run.depth, run.created_at))
    below = _below(user, [run.pk for run in rows])
    steps = _step_names(rows)
    now = timezone.now()
    return [_decorate(run, below, now, steps) for run in rows]


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
class Found:
    """The nodes of a trace a status filter or a search picks, and the ancestors to open to
    show them all."""

    matches: list[str]
    ancestors: list[str]
    more: bool  # more than MAX_FOUND matched: the first are shown

    def as_json(self) -> dict[str, Any]:
        return {"matches": self.matches, "open": self.ancestors, "more": self.more}


def parse_filter(status: str, query: str) -> tuple[str, str]:
    """`?status=` (all or one of STATUS_FILTERS) and `?q=` (a name, at most 100 characters)
    of a find; BadRequest names what is wrong."""
    status = (status or "all").strip().lower()
    if status != "all" and status not in STATUS_FILTERS:
        raise BadRequest(f"status: {status[:40]!r} is not one of all, " + ", ".join(STATUS_FILTERS))
    query = (query or "").strip()
    if len(query) > 100:
        raise BadRequest("q: at most 100 characters")
    problem = json_input_problems(query).get("")
    if problem:  # a NUL the database cannot compare, a lone surrogate
        raise BadRequest(f"q: {problem}")
    return status, query


def trace_find(*, user: Any, trace_id: Any, status: str = "all", query: str = "") -> Found:
    """The trace's nodes of a status (see STATUS_FILTERS) whose entity or starting step is
    named like `query` (the first 50 steps so named count), the first MAX_FOUND, shallowest
    first, with every ancestor of each (to open). Three queries whatever the trace's size;
    another workspace's trace finds nothing."""
    root = _nodes(user).filter(pk=trace_id, trace_id=trace_id).values_list("pk", flat=True)
    if not root.exists():
        raise Http404("no such trace")
    nodes = run_list(user=user).select_related(None).filter(trace_id=trace_id)
    if status != "all":
        nodes = nodes.filter(status__in=STATUS_FILTERS[status])
    if query:
        named = Q(entity__name__icontains=query) | Q(entity__display_name__icontains=query)
        steps = StepRun.objects.filter(run__trace_id=trace_id, name__icontains=query)
        started_by = {
            f"{run_id}|{key}" for run_id, key in steps.values_list("run_id", "step_key")[:50]
        }
        by_step = Q()
        for pair in started_by:
            parent, key = pair.split("|", 1)
            by_step |= Q(parent_id=parent, parent_step_key__startswith=f"{key}#")
        nodes = nodes.filter(named | by_step) if started_by else nodes.filter(named)
    rows = list(nodes.order_by("depth", *CHILD_ORDER).values_list("pk", "lineage")[: MAX_FOUND + 1])
    matches = [str(pk) for pk, _ in rows[:MAX_FOUND]]
    ancestors = list(dict.fromkeys(str(a) for _, lineage in rows[:MAX_FOUND] for a in lineage))
    return Found(matches=matches, ancestors=ancestors, more=len(rows) > MAX_FOUND)


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


# What a node's row knows that its details show too (the page passes its decorated row).
ROW_FACTS = (
    "child_count",
    "own_tokens",
    "own_cost",
    "own_llm_calls",
    "own_tool_calls",
    "step_name",
)


def node_detail(*, user: Any, trace_id: Any, node_id: Any, row: Run | None = None) -> NodeDetail:
    """Everything one node recorded: its steps, plan, state changes, model and tool calls and
    requests to people. Six to nine queries (two fewer when the page gives the node's `row`,
    which already knows its children's share and the step that started it)."""
    try:
        run = (
            run_list(user=user)
            .select_related(None)
            .select_related("entity", "entity_version")
            .get(pk=node_id, trace_id=trace_id)
        )
    except Run.DoesNotExist:
        raise Http404("no such run in this trace") from None
    if row is not None and row.pk == run.pk:
        _decorate(run, {}, timezone.now())
        for name in ROW_FACTS:
            setattr(run, name, getattr(row, name))
    else:
        _decorate(run, _below(user, [run.pk]), timezone.now(), _step_names([run]))
    plan, source = plan_of(run)
    plan = _named_targets(user, run, plan)
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


# How the engine's log marks what an entity's audit settings leave out (runs/engine/thoughts.py).
NOT_LOGGED_MARK = "[not logged:"
# Personal data as the log keeps it under pii_handling: REDACT's pieces as shown, and
# ENCRYPT's tokens (governance/safety.py).
_SEALED_PIECES = re.compile(
    r"\[REDACTED:[A-Z_]+\]|" + re.escape(ENCRYPTED_PREFIX) + r"[A-Za-z0-9_\-]+=*"
)


def oversight_of(definition: Any) -> dict[str, Any]:
    governance = definition.get("governance") if isinstance(definition, dict) else None
    oversight = (governance or {}).get("human_oversight") if isinstance(governance, dict) else None
    return oversight if isinstance(oversight, dict) else {}


def model_call_shown(call: LLMCall, definition: dict) -> dict[str, Any]:
    """A model call as the details show it: prompt and response as a person may see them,
    what the model answered through a tool or a schema when it wrote no text, and when the
    response is empty, why (`note`), in the words of the entity's settings."""
    metadata = call.metadata if isinstance(call.metadata, dict) else {}
    structured = metadata.get("tool_arguments") or metadata.get("parsed")
    response = shown(call.output_response or "")
    note = ""
    if not response.strip():
        oversight = oversight_of(definition)
        observability = definition.get("observability") if isinstance(definition, dict) else None
        logging = (observability or {}).get("logging") or {}
        audit = oversight.get("audit_level") or ""
        if structured is not None:
            note = "The model wrote no text: it answered with structured data, shown below."
        elif (
            NOT_LOGGED_MARK in (call.input_prompt or "")
            or audit == "MINIMAL"
            or logging.get("log_thoughts") is False
        ):
            why = "audit level MINIMAL" if audit == "MINIMAL" else "log_thoughts is off"
            note = f"Not logged: this entity's audit settings leave the model's text out ({why})."
        else:
            note = "The model answered with no text (an empty response)."
    elif not _SEALED_PIECES.sub("", response).strip():
        pii = oversight_of(definition).get("pii_handling") or "REDACT"
        note = (
            f"Not logged in clear: personal data handling ({pii}) kept the whole answer out "
            "of the log; only its sealed form is stored."
        )
    return {
        "call": call,
        "prompt": shown(call.input_prompt or ""),
        "response": response,
        # Shown when the text is empty: otherwise it repeats what the text says.
        "structured_json": pretty_json(structured) if structured is not None and note else "",
        "note": note,
    }


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
    tool = step.get("tool_id") or target.get("tool_id") or ""
    entity = "" if tool else step.get("target_entity") or target.get("entity_id") or ""
    return {
        "name": str(step.get("name", "")),
        "type": str(step.get("type", "")),
        "target": str(tool or entity),
        "target_ref": str(entity),  # an entity's ref, named by `_named_targets`
        "relationship": step.get("relationship") or "",
        "required": step.get("required", True),
        "condition": pretty_json(step["condition"]) if step.get("condition") else "",
    }


def _named_targets(user: Any, run: Run, plan: list[dict]) -> list[dict]:
    """The plan with each entity target named as people know it (display name, else name)
    instead of its ref (`agent-001`, or an id). One query, in the run's workspace."""
    refs = {step["target_ref"] for step in plan if step["target_ref"]}
    if not refs:
        return plan
    ids = []
    for ref in refs:
        try:
            ids.append(uuid.UUID(ref))
        except ValueError:
            continue
    found = (
        entity_list(user=user)
        .filter(workspace_id=run.workspace_id)
        .filter(Q(external_id__in=refs) | Q(pk__in=ids))
        .values_list("id", "external_id", "name", "display_name")
    )
    names: dict[str, str] = {}
    for pk, external_id, name, display_name in found:
        label = display_name or name
        names[str(pk)] = label
        if external_id:
            names[external_id] = label
    for step in plan:
        if step["target_ref"] in names:
            step["target"] = names[step["target_ref"]]
    return plan


# -- the timeline view -------------------------------------------------------------------------
#
# `/runs/<id>/?view=timeline`: one row per node in the tree's order, each with a bar placed by
# when the node started (from the root's start) and sized by how long it ran, the time it
# waited on a person drawn apart, and a time axis. Bounded whatever the trace's size: one
# query reads the trace's skeleton (ids and parents in the tree's sibling order, at most
# MAX_SKELETON nodes), the tree order is worked out here, and the first MAX_TIMELINE nodes of
# it are read whole. Positions are percentages of the span: the page draws them with inline
# styles and no script.

MAX_TIMELINE = 500  # rows one timeline shows (the first, in tree order)
# Nodes whose place in the tree order is worked out: beyond it (a trace of tens of thousands)
# the shallowest are kept, so the first rows are still the top of the tree.
MAX_SKELETON = 20_000
MIN_BAR_PCT = 0.4  # a node of a millisecond still shows as a sliver


@dataclass(frozen=True)
class Tick:
    left: float  # percent of the span
    label: str


@dataclass(frozen=True)
class Segment:
    """A part of a bar: where it starts and how wide it is, in percent of the bar."""

    left: float
    width: float
    title: str

    @property
    def style(self) -> str:
        return f"left:{self.left:.2f}%;width:{self.width:.2f}%"


@dataclass
class TimelineRow:
    run: Run
    depth: int  # below the first row shown (the root, or the shallowest of a filter)
    left: float | None  # percent of the span; None: not started yet
    width: float
    started: str  # "+1.2 s": from the root's start
    duration: str
    waits: list[Segment] = field(default_factory=list)
    waited: str = ""  # the time on people, in words, when any

    # What the row's markup says, made once here: a 500-row page spends its time in template
    # lookups otherwise. Plain text: the template escapes every one.
    @property
    def label(self) -> str:
        step = getattr(self.run, "step_name", "")
        return f"{step} · {self.run.entity.name}" if step else self.run.entity.name

    @property
    def title(self) -> str:
        shown = self.run.entity.display_name
        return f"{self.label} ({shown})" if shown else self.label

    @property
    def tip(self) -> str:
        waited = f" · waited on a person {self.waited}" if self.waited else ""
        return (
            f"{self.run.entity.name} · {self.run.status.title()} · start {self.started or '—'}"
            f" · duration {self.duration} · cost {self.run.cost}{waited}"
        )

    @property
    def bar(self) -> str:
        """The bar's inline style; empty for a node not started."""
        return "" if self.left is None else f"left:{self.left:.2f}%;width:{self.width:.2f}%"


@dataclass
class Timeline:
    root: Run
    rows: list[TimelineRow]
    ticks: list[Tick]
    span: str  # the whole span in words
    total: int  # nodes in the trace (or matching the filter)
    more: int  # of them not shown
    active: bool  # the root can still change (a BLOCKED run may resume): the page refreshes
    capped: bool  # the trace is over MAX_SKELETON: the order is of the shallowest


# -- time in words ---------------------------------------------------------------------------

# Steps an axis may use, in milliseconds: each a round number of its unit.
_STEPS_MS = [
    *(m * 10**e for e in range(0, 3) for m in (1, 2, 5)),
    *(s * 1000 for s in (1, 2, 5, 10, 15, 30)),
    *(m * 60_000 for m in (1, 2, 5, 10, 15, 30)),
    *(h * 3_600_000 for h in (1, 2, 3, 6, 12, 24, 48)),
]


def ms_label(ms: float) -> str:
    """A time for the axis and the tooltips: "0", "250 ms", "1.5 s", "2 min 30 s", "1 h 5 min"."""
    if ms <= 0:
        return "0"
    if ms < 1000:
        return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms".replace(".0 ", " ")
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s".replace(".0 ", " ")
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def axis_ticks(span_ms: float, most: int = 6) -> list[Tick]:
    """Ticks at round times from 0 to the span, at most `most` of them (the axis of a phone
    has room for about six labels)."""
    if span_ms <= 0:
        return [Tick(0.0, "0")]
    step = next((s for s in _STEPS_MS if span_ms / s <= most - 1), None)
    if step is None:
        step = 10 ** math.ceil(math.log10(span_ms / (most - 1)))
    return [
        Tick(left=round(100 * i * step / span_ms, 3), label=ms_label(i * step))
        for i in range(int(span_ms // step) + 1)
    ]


# -- the rows --------------------------------------------------------------------------------


def tree_order(skeleton: list[tuple[Any, Any]], first: Any) -> list[Any]:
    """The ids of `skeleton` (id, parent id), already in sibling order, depth first from
    `first` as the tree shows them: each node, then its children's subtrees in order.
    Nodes whose parent is missing (left out by a filter) follow their nearest listed
    ancestor's place by being roots of their own, in the skeleton's order."""
    children: dict[Any, list[Any]] = defaultdict(list)
    known = {pk for pk, _ in skeleton}
    tops = []
    for pk, parent in skeleton:
        if parent in known:
            children[parent].append(pk)
        else:
            tops.append(pk)
    if first in known and first in tops:
        tops.remove(first)
        tops.insert(0, first)
    order: list[Any] = []
    stack = list(reversed(tops))
    while stack:
        pk = stack.pop()
        order.append(pk)
        stack.extend(reversed(children.get(pk, ())))
    return order


def _end(run: Run, now: datetime) -> datetime | None:
    """Where the node's bar ends: its completion, or now while it can still change."""
    if run.started_at is None:
        return None
    if run.completed_at is not None:
        return run.completed_at
    if run.status not in TERMINAL:
        return now
    # Ended without a completion time (cancelled before it recorded one): its counted time.
    return run.started_at + timedelta(milliseconds=run.execution_time_ms or 0)


def _pct(part: float, whole: float) -> float:
    return round(100 * part / whole, 3) if whole > 0 else 0.0


def _waits(
    run: Run, start: datetime, end: datetime, waits: list[HumanWait], now: datetime
) -> tuple[list[Segment], float]:
    """The run's waits on people as parts of its bar (clipped to it), and their total ms."""
    bar = (end - start).total_seconds() * 1000
    segments, total = [], 0.0
    for wait in waits:
        begin = max(wait.requested_at, start)
        until = min(wait.ended_at or end, end)
        ms = (until - begin).total_seconds() * 1000
        if ms <= 0:
            continue
        total += ms
        open_now = wait.ended_at is None and run.status not in TERMINAL
        segments.append(
            Segment(
                left=_pct((begin - start).total_seconds() * 1000, bar),
                width=max(_pct(ms, bar), MIN_BAR_PCT),
                title=f"Waiting on a person{' (still)' if open_now else ''}: {ms_label(ms)}",
            )
        )
    return segments, total


def trace_timeline(
    *, user: Any, run_id: Any, status: str = "all", query: str = "", now: datetime | None = None
) -> Timeline:
    """The timeline of the trace of `run_id` (any run of it), its first MAX_TIMELINE nodes
    in tree order, or with a status or name filter (as `trace_find` takes them) the nodes it
    picks and their ancestors. Five queries (eight with a filter) whatever the trace's size;
    a run of another workspace is a 404."""
    now = now or timezone.now()
    trace_id = (
        run_list(user=user)
        .select_related(None)
        .filter(pk=run_id)
        .values_list("trace_id", flat=True)
    ).first()
    if trace_id is None:
        raise Http404("no such run")
    wanted: set[str] | None = None
    if status != "all" or query:
        found = trace_find(user=user, trace_id=trace_id, status=status, query=query)
        wanted = {*found.matches, *found.ancestors}
    skeleton_q = (
        run_list(user=user)
        .select_related(None)
        .filter(trace_id=trace_id)
        .order_by("depth", *CHILD_ORDER)
        .values_list("pk", "parent_id")
    )
    if wanted is not None:
        skeleton_q = skeleton_q.filter(Q(pk__in=wanted) | Q(pk=trace_id))
    skeleton = list(skeleton_q[: MAX_SKELETON + 1])
    capped = len(skeleton) > MAX_SKELETON
    skeleton = skeleton[:MAX_SKELETON]
    order = tree_order(skeleton, trace_id)
    shown_ids = order[:MAX_TIMELINE]
    by_id = {run.pk: run for run in _nodes(user).filter(pk__in=shown_ids, trace_id=trace_id)}
    root = by_id.get(trace_id)
    if root is None:
        raise Http404("this run's trace has no root")
    runs = [by_id[pk] for pk in shown_ids if pk in by_id]
    steps = _step_names(runs)
    for run in runs:
        key = run.parent_step_key.rsplit("#", 1)[0] if run.parent_step_key else ""
        run.step_name = steps.get((str(run.parent_id), key), "") if key else ""
        run.cost = usd(run.total_cost_usd)
    waits_by_run: dict[str, list[HumanWait]] = defaultdict(list)
    for wait in approval_desk().waits_of_runs(trace_id=trace_id, run_ids=[r.pk for r in runs]):
        waits_by_run[wait.run_id].append(wait)

    origin = root.started_at or root.created_at
    ends = [end for run in runs if (end := _end(run, now)) is not None]
    span_ms = max(1.0, max(((e - origin).total_seconds() * 1000 for e in ends), default=1.0))
    base_depth = min((run.depth for run in runs), default=0)
    rows = []
    for run in runs:
        end = _end(run, now)
        if run.started_at is None or end is None:
            rows.append(TimelineRow(run, run.depth - base_depth, None, 0.0, "", "not started yet"))
            continue
        offset = (run.started_at - origin).total_seconds() * 1000
        ms = max(0.0, (end - run.started_at).total_seconds() * 1000)
        left = min(max(_pct(offset, span_ms), 0.0), 100.0)
        width = min(max(_pct(ms, span_ms), MIN_BAR_PCT), 100.0 - left) or MIN_BAR_PCT
        segments, waited = _waits(run, run.started_at, end, waits_by_run[str(run.pk)], now)
        rows.append(
            TimelineRow(
                run=run,
                depth=run.depth - base_depth,
                left=left,
                width=width,
                started=f"+{ms_label(offset)}" if offset > 0 else "0",
                duration=ms_label(ms) + (" so far" if run.status not in TERMINAL else ""),
                waits=segments,
                waited=ms_label(waited) if waited else "",
            )
        )
    return Timeline(
        root=root,
        rows=rows,
        ticks=axis_ticks(span_ms),
        span=ms_label(span_ms),
        total=len(order),
        more=max(0, len(order) - len(shown_ids)),
        active=root.status not in TERMINAL,
        capped=capped,
    )
