"""Reads of runs, scoped to what the user may see, and the run and trace documents of
seed 000 §7.2 and §7.3."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

from django.core.cache import cache
from django.db.models import QuerySet

from governance.permissions import VIEW, scope, visible_or_404
from governance.safety import pii_shown as shown
from runs.attention import attention_json
from runs.models import LLMCall, Run, RunStatus, StepRun, ToolCall


def run_list(*, user: Any, perm: str = VIEW) -> QuerySet[Run]:
    return scope(Run.objects.select_related("entity", "workspace"), user, perm)


def run_get(*, user: Any, pk: Any, perm: str = VIEW) -> Run:
    """The run, or a 404 when it does not exist or belongs to another workspace."""
    return visible_or_404(run_list(user=user, perm=perm), "run", pk)


# How many of an entity's latest completed runs estimate the next one's duration, and how
# long an estimate is kept (it is asked at every execute).
ESTIMATE_SAMPLE = 20
ESTIMATE_SECONDS = 60


def run_duration_estimate(entity_id: Any) -> timedelta | None:
    """How long a run of the entity takes: the median execution time of its latest completed
    root runs, None when it has none yet."""
    key = f"runs:duration-estimate:{entity_id}"
    found = cache.get(key)
    if found is None:
        times = sorted(
            Run.objects.filter(
                entity_id=entity_id,
                parent__isnull=True,
                trial=False,
                status=RunStatus.COMPLETED,
                execution_time_ms__isnull=False,
            )
            .order_by("-completed_at")
            .values_list("execution_time_ms", flat=True)[:ESTIMATE_SAMPLE]
        )
        found = times[len(times) // 2] if times else -1
        cache.set(key, found, ESTIMATE_SECONDS)
    return None if found < 0 else timedelta(milliseconds=found)


def _iso(moment: Any) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def run_document(run: Run) -> dict:
    """GET /runs/{id} (seed 000 §7.2): status, output, metrics and the direct children; and
    `needs_attention`: the runs at or below it that wait on a person (runs/attention.py)."""
    children = run.children.select_related("entity", "entity_version").order_by("created_at")
    return {
        "run_id": str(run.pk),
        "entity_id": run.entity.ref,
        "entity_name": run.entity.name,
        # The version it runs: the root's newest (or the one asked for) when the trace
        # started, and for a run below it the version its trace pinned then.
        "entity_version": run.entity_version.version,
        "status": run.status,
        "started_at": _iso(run.started_at),
        "completed_at": _iso(run.completed_at),
        "output_data": shown(run.output_data),
        "error": {"code": run.error_code, "message": run.error_message} if run.error_code else None,
        "metrics": {
            "total_cost_usd": float(run.total_cost_usd),
            "total_tokens": run.total_tokens,
            "execution_time_ms": run.execution_time_ms,
            "llm_calls": run.llm_calls,
            "tool_calls": run.tool_calls,
        },
        "child_runs": [
            {
                "run_id": str(c.pk),
                "entity_id": c.entity.ref,
                "entity_version": c.entity_version.version,
                "status": c.status,
                # A hired subordinate's hire; a designed child has the seed's keys only.
                **(
                    _hire_of(c.role, c.task, c.hired_reason, c.fired_reason, c.fired_by)
                    if c.hired_by_id
                    else {}
                ),
            }
            for c in children
        ],
        "needs_attention": attention_json(run),
    }


def _hire_of(role: Any, task: Any, reason: Any, fired: Any, fired_by: Any) -> dict[str, Any]:
    """A run's hire (runs/engine/hiring.py): null for a run its entity's design started."""
    return {
        "role": role,
        "task": task,
        "hired_reason": reason,
        "fired_reason": fired,
        "fired_by": fired_by,
    }


def trace_tree(run: Run) -> dict:
    """GET /runs/{id}/trace (seed 000 §7.3): the nested tree below `run`, with each node's
    tool and model calls. Reads the whole trace in three queries, as plain rows (a model
    instance per node would cost more than the queries for a 1,000-node trace)."""
    rows = (
        Run.objects.filter(trace_id=run.trace_id)
        .order_by("created_at")
        .values_list(
            "id",
            "parent_id",
            "status",
            "started_at",
            "completed_at",
            "error_code",
            "total_cost_usd",
            "budget_usd",
            "total_tokens",
            "entity__name",
            "entity__type",
            "entity_version__version",
            "role",
            "task",
            "hired_reason",
            "fired_reason",
            "fired_by",
        )
    )
    tools = _trace_tool_calls(run.trace_id)
    models = _trace_model_calls(run.trace_id)
    nodes: dict[Any, dict] = {}
    children: dict[Any, list[dict]] = defaultdict(list)
    for (
        pk,
        parent_id,
        status,
        started,
        completed,
        code,
        cost,
        budget,
        tokens,
        name,
        kind,
        version,
        *hire,
    ) in rows:
        tree = {
            "node": {
                "run_id": str(pk),
                "entity_name": name,
                "entity_version": version,
                "type": kind,
                "status": status,
                "started_at": _iso(started),
                "completed_at": _iso(completed),
                "error_code": code or None,
                "cost_usd": float(cost),
                "budget_usd": None if budget is None else float(budget),
                "tokens": tokens,
                "tool_calls": tools.get(pk, []),
                "llm_calls": models.get(pk, []),
                **_hire_of(*hire),
            },
            "children": children[pk],
        }
        nodes[pk] = tree
        children[parent_id].append(tree)
    return {"run_id": str(run.pk), "trace_tree": nodes[run.pk]}


# Only the columns the tree shows: a call's prompt, answer and arguments stay unread (a
# 1,000-node trace has megabytes of them).


def _trace_tool_calls(trace_id: Any) -> dict[Any, list]:
    """The trace's tool calls in order, by run id."""
    tools: dict[Any, list] = defaultdict(list)
    tool_rows = (
        ToolCall.objects.filter(run__trace_id=trace_id)
        .order_by("timestamp")
        .values_list("run_id", "tool_id", "latency_ms", "success")
    )
    for run_id, tool_id, latency_ms, success in tool_rows:
        tools[run_id].append({"tool_id": tool_id, "latency_ms": latency_ms, "success": success})
    return tools


def _trace_model_calls(trace_id: Any) -> dict[Any, list]:
    """The trace's model calls in order, by run id."""
    models: dict[Any, list] = defaultdict(list)
    model_rows = (
        LLMCall.objects.filter(run__trace_id=trace_id)
        .order_by("timestamp")
        .values_list("run_id", "model_name", "total_tokens", "latency_ms", "purpose")
    )
    for run_id, model, tokens, latency_ms, purpose in model_rows:
        models[run_id].append(
            {"model": model, "tokens": tokens, "latency_ms": latency_ms, "purpose": purpose}
        )
    return models


def trace_outline(*, user: Any, run_id: Any, most: int = 200) -> tuple[Run, list[Run], int]:
    """A run's trace as an outline to show inline (the designer's "Try it"): the root, then
    every run under it depth first in the order they started, at most `most` of them, each
    with `level` (its depth below the root); and how many more there are. Two queries."""
    root = run_get(user=user, pk=run_id)
    rows = list(
        run_list(user=user)
        .filter(trace_id=root.trace_id)
        .exclude(pk=root.pk)
        .defer("input_data", "context", "state", "dynamic_plan", "lineage")
        .order_by("depth", "created_at", "group_index", "id")[: most + 1]
    )
    more = max(0, len(rows) - most)
    under: dict[Any, list[Run]] = defaultdict(list)
    for row in rows[:most]:
        under[row.parent_id].append(row)
    outline: list[Run] = []
    pending = [(child, 1) for child in reversed(under[root.pk])]
    while pending:
        node, level = pending.pop()
        node.level = level
        outline.append(node)
        pending.extend((child, level + 1) for child in reversed(under[node.pk]))
    return root, outline, more


def trace_export_rows(trace_id: Any) -> dict[str, list[dict]]:
    """What a trace's export to OpenTelemetry (runs/tracing.py) shows: each run, step
    attempt, model call and tool call of the trace, as plain rows, in four queries. Metadata
    only: no prompt, answer, input, output, state or arguments is read."""
    runs = Run.objects.filter(trace_id=trace_id).order_by("created_at", "id")
    steps = StepRun.objects.filter(run__trace_id=trace_id).order_by("started_at", "id")
    model_calls = LLMCall.objects.filter(run__trace_id=trace_id).order_by("timestamp")
    tool_calls = ToolCall.objects.filter(run__trace_id=trace_id).order_by("timestamp")
    return {
        "runs": list(
            runs.values(
                "id",
                "parent_id",
                "parent_step_key",
                "workspace_id",
                "entity_id",
                "status",
                "error_code",
                "created_at",
                "started_at",
                "completed_at",
                "total_cost_usd",
                "total_tokens",
                "llm_calls",
                "tool_calls",
                "entity__name",
                "entity__type",
                "entity_version__version",
                "entity_version__definition__observability__tracing__span_annotations",
                "export_trace_id",
            )
        ),
        "steps": list(
            steps.values(
                "id",
                "run_id",
                "step_key",
                "name",
                "type",
                "status",
                "iteration",
                "attempt",
                "error_code",
                "started_at",
                "finished_at",
            )
        ),
        "model_calls": list(
            model_calls.values(
                "id",
                "run_id",
                "step_id",
                "purpose",
                "timestamp",
                "model_provider",
                "model_name",
                "prompt_tokens",
                "completion_tokens",
                "cost_usd",
                "latency_ms",
                "temperature",
            )
        ),
        "tool_calls": list(
            tool_calls.values(
                "id",
                "run_id",
                "step_id",
                "timestamp",
                "tool_id",
                "tool_name",
                "provider",
                "success",
                "latency_ms",
            )
        ),
    }
