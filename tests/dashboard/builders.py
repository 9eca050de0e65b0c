"""Runs and requests as the engine leaves them, written directly with the fields the
dashboard reads (no executor involved)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from entities.models import Entity
from runs.models import Run, RunStatus
from runs.store import latest_version


def execution(
    entity: Entity,
    *,
    status: str = RunStatus.COMPLETED,
    ended: datetime | None = None,
    started: datetime | None = None,
    cost: str | Decimal = "0",
    tokens: int = 0,
    ms: int | None = None,
    parent: Run | None = None,
) -> Run:
    """A run of the entity: finished at `ended` (when given) after `ms` milliseconds, created
    at `started` (default: `ms` before `ended`); a child of `parent` when given."""
    run_id = uuid.uuid4()
    if started is None and ended is not None:
        started = ended - timedelta(milliseconds=ms or 0)
    run = Run.objects.create(
        id=run_id,
        trace_id=parent.trace_id if parent else run_id,
        parent=parent,
        root=(parent.root or parent) if parent else None,
        depth=parent.depth + 1 if parent else 0,
        workspace_id=entity.workspace_id,
        entity=entity,
        entity_version=latest_version(entity),
        status=status,
        started_at=started,
        completed_at=ended,
        execution_time_ms=ms,
        total_cost_usd=Decimal(cost),
        total_tokens=tokens,
    )
    if started is not None:  # created_at is set on insert; the dashboard buckets by it
        Run.objects.filter(pk=run.pk).update(created_at=started)
        run.created_at = started
    return run


def decided(run: Run, status: str, decision: str = "", *, at: datetime, **fields: Any) -> Any:
    """A request of the run, closed at `at` with the status (and decision) given."""
    from tests.factories import approval_request

    return approval_request(run, status=status, decision=decision, responded_at=at, **fields)
