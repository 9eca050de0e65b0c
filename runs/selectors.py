"""Reads of runs, scoped to what the user may see, and the run and trace documents of
seed 000 §7.2 and §7.3."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import QuerySet

from governance.permissions import VIEW, scope
from runs.models import LLMCall, Run, ToolCall


def run_list(*, user: Any, perm: str = VIEW) -> QuerySet[Run]:
    return scope(Run.objects.select_related("entity", "workspace"), user, perm)


def _iso(moment: Any) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def run_document(run: Run) -> dict:
    """GET /runs/{id} (seed 000 §7.2): status, output, metrics and the direct children."""
    children = run.children.select_related("entity").order_by("created_at")
    return {
        "run_id": str(run.pk),
        "entity_id": run.entity.ref,
        "entity_name": run.entity.name,
        "status": run.status,
        "started_at": _iso(run.started_at),
        "completed_at": _iso(run.completed_at),
        "output_data": run.output_data,
        "error": {"code": run.error_code, "message": run.error_message} if run.error_code else None,
        "metrics": {
            "total_cost_usd": float(run.total_cost_usd),
            "total_tokens": run.total_tokens,
            "execution_time_ms": run.execution_time_ms,
            "llm_calls": run.llm_calls,
            "tool_calls": run.tool_calls,
        },
        "child_runs": [
            {"run_id": str(c.pk), "entity_id": c.entity.ref, "status": c.status} for c in children
        ],
    }


def trace_tree(run: Run) -> dict:
    """GET /runs/{id}/trace (seed 000 §7.3): the nested tree below `run`, with each node's
    tool and model calls. Reads the whole trace in four queries."""
    runs = list(
        Run.objects.filter(trace_id=run.trace_id)
        .select_related("entity")
        .only(
            "id",
            "parent_id",
            "status",
            "started_at",
            "completed_at",
            "error_code",
            "error_message",
            "total_cost_usd",
            "total_tokens",
            "execution_time_ms",
            "entity__name",
            "entity__type",
            "created_at",
        )
        .order_by("created_at")
    )
    ids = [r.pk for r in runs]
    tools: dict[Any, list] = defaultdict(list)
    for call in ToolCall.objects.filter(run_id__in=ids).order_by("timestamp"):
        tools[call.run_id].append(
            {"tool_id": call.tool_id, "latency_ms": call.latency_ms, "success": call.success}
        )
    models: dict[Any, list] = defaultdict(list)
    for call in LLMCall.objects.filter(run_id__in=ids).order_by("timestamp"):
        models[call.run_id].append(
            {"model": call.model_name, "tokens": call.total_tokens, "purpose": call.purpose}
        )
    children: dict[Any, list[Run]] = defaultdict(list)
    for row in runs:
        children[row.parent_id].append(row)

    def node(row: Run) -> dict:
        return {
            "node": {
                "run_id": str(row.pk),
                "entity_name": row.entity.name,
                "type": row.entity.type,
                "status": row.status,
                "started_at": _iso(row.started_at),
                "completed_at": _iso(row.completed_at),
                "error_code": row.error_code or None,
                "cost_usd": float(row.total_cost_usd),
                "tokens": row.total_tokens,
                "tool_calls": tools[row.pk],
                "llm_calls": models[row.pk],
            },
            "children": [node(child) for child in children[row.pk]],
        }

    top = next(r for r in runs if r.pk == run.pk)
    return {"run_id": str(run.pk), "trace_tree": node(top)}
