"""Every way a run changes: start, advance, cancel. (`grep -n "def run_" runs/services.py`)"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from entities.models import Entity
from governance.audit import audit_record
from governance.models import AuditAction
from governance.permissions import OPERATE, has_perm
from runs.executors import enqueue
from runs.models import ACTIVE, Run, RunStatus, TraceSequence
from runs.store import append_events, latest_version, pinned_definition


class RunRefused(Exception):
    """A run that cannot start; nothing was written."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def run_start(
    *, entity: Entity, input_data: Any, user: Any = None, context: dict | None = None
) -> Run:
    """Create a root run of the entity's current version and hand it to the executor.

    Input problems, an entity that is not ACTIVE and the like end the run FAILED with an error
    code at its first step, so they are recorded like any other failure."""
    if user is not None and not has_perm(user, OPERATE, entity.workspace):
        raise RunRefused(
            "PERMISSION_DENIED",
            f"{getattr(user, 'username', 'this user')} may not start runs in "
            f"{entity.workspace.name}; the operator role is needed",
        )
    version = latest_version(entity)
    if version is None:
        raise RunRefused("NOT_FOUND", f"{entity.name} has no saved version")
    definition = pinned_definition(version.pk, entity.pk)
    limit = definition["governance"]["execution_limits"]["max_recursion_depth"]
    with transaction.atomic():
        run = Run(
            workspace_id=entity.workspace_id,
            entity=entity,
            entity_version=version,
            input_data=input_data if isinstance(input_data, dict) else {"_": input_data},
            context=context or {},
            depth_limit=limit,
            created_by=user if getattr(user, "is_authenticated", False) else None,
        )
        run.trace_id = run.id
        run.save()
        TraceSequence.objects.create(trace_id=run.trace_id)
        if not isinstance(input_data, dict):
            Run.objects.filter(pk=run.pk).update(input_data=input_data)
            run.input_data = input_data
        append_events(
            str(run.trace_id),
            str(run.pk),
            [("run.created", {"run_id": str(run.pk), "entity": entity.name, "type": entity.type})],
        )
        audit_record(
            workspace=entity.workspace_id,
            action=AuditAction.RUN_STARTED,
            actor=user,
            target=run,
            object_label=entity.name,
            after={"entity": entity.name, "version": version.version},
        )
        enqueue(str(run.pk))
    return run


def run_advance(run_id: str) -> None:
    """Do the run's next pieces of work (the executors' one entry point)."""
    from runs.engine_factory import engine

    engine().advance(run_id)


def run_cancel(*, run: Run, user: Any = None) -> int:
    """Cancel the run and its descendants: the step in flight finishes and is recorded, no
    new step starts, a paused or blocked run ends too. Answers how many runs were asked."""
    cancellable = [*ACTIVE, RunStatus.BLOCKED]
    asked: set = set()
    with transaction.atomic():
        # The run's row first: a spawn under way finishes before the subtree is read, and a
        # spawn after this sees the flag (runs/store.py spawn).
        Run.objects.select_for_update().filter(pk=run.pk).update(cancel_requested=True)
        audit_record(
            workspace=run.workspace_id,
            action=AuditAction.RUN_CANCELLED,
            actor=user,
            target=run,
            object_label=run.entity.name,
        )
    for _ in range(5):  # children started meanwhile are found on the next pass
        ids = set(_subtree(run)) - asked
        if not ids:
            break
        Run.objects.filter(pk__in=ids, status__in=cancellable).update(cancel_requested=True)
        asked |= ids
    now = timezone.now()
    # Runs no worker holds are ended at once; a leased one ends when its step returns.
    idle = Run.objects.filter(pk__in=asked, status__in=cancellable).exclude(
        lease_expires_at__gt=now
    )
    for row in idle.only("pk"):
        enqueue(str(row.pk))
    return Run.objects.filter(pk__in=asked, cancel_requested=True).count()


def _subtree(run: Run) -> list:
    found = [run.pk]
    frontier = [run.pk]
    while frontier:
        children = list(Run.objects.filter(parent_id__in=frontier).values_list("pk", flat=True))
        found.extend(children)
        frontier = children
    return found
