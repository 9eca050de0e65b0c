"""Every way a run changes: start, advance, resume, cancel, raise its budget, note an event.
(`grep -n "def run_" runs/services.py`)"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone

from entities.models import Entity, Workspace
from governance.alerts import alert_raise
from governance.audit import audit_record
from governance.models import AlertKind, AuditAction
from governance.permissions import DESIGN, OPERATE, has_perm
from runs import sql
from runs.approval_desk import approval_desk
from runs.engine import schemas
from runs.engine.core import BUDGET_EXHAUSTED, lifetime_limit, run_limits
from runs.engine.ports import MAX_PASSES_EXHAUSTED
from runs.engine.state import EVENT_KINDS
from runs.engine.tree import descendants
from runs.engine.validators import rule_problems
from runs.engine_factory import engine
from runs.events import append_events
from runs.executors import enqueue
from runs.models import (
    ACTIVE,
    TERMINAL,
    IdempotencyKey,
    Run,
    RunStatus,
    TraceSequence,
)
from runs.store import (
    latest_version,
    lifetime_left,
    pinned_definition,
    run_data_sealed,
)

# The largest budget a run may be given: the definition's cost controls have this maximum
# (entities/schemas/governance.json), and Run.budget_usd (14 digits, 6 after the point) holds
# less than 10^8.
BUDGET_MAX_USD = Decimal("10000000")


class RunRefused(Exception):
    """A run that cannot start; nothing was written."""

    def __init__(self, code: str, message: str, details: dict[str, str] | None = None):
        super().__init__(message)
        self.code = code
        if details is not None:
            self.details = details  # by field, as the API's error object shows them


def run_start(
    *,
    entity: Entity,
    input_data: Any,
    user: Any = None,
    context: dict | None = None,
    rerun_of: Run | None = None,
    trial: bool = False,
    sandbox: bool = False,
    version: str = "",
) -> Run:
    """Create a root run of the entity's current version (or of `version`, a SemVer it has
    had) and hand it to the executor.

    Input problems, an entity that is not ACTIVE and the like end the run FAILED with an error
    code at its first step, so they are recorded like any other failure. A `trial` (see
    `run_try`) runs drafts too and is kept apart from production runs; under `sandbox` every
    tool call of the run and below has no external effect."""
    if trial:
        _refuse_unless_trying(user, entity.workspace)
    else:
        _refuse_unless_operator(user, entity.workspace, "start runs")
    chosen = version
    version = _version_to_run(entity, chosen)
    definition = pinned_definition(version.pk, entity.pk)
    with transaction.atomic():
        left = _lifetime_left(entity, definition)
        limits = run_limits(definition, "", None, left)
        _within_quotas(entity.workspace_id, user, limits["budget_usd"])
        run = _root_run_created(
            entity=entity,
            version=version,
            definition=definition,
            input_data=input_data,
            context=context,
            user=user,
            left=left,
            trial=trial,
            sandbox=sandbox,
        )
        audit_record(
            workspace=entity.workspace_id,
            action=AuditAction.RUN_STARTED,
            actor=user,
            target=run,
            object_label=entity.name,
            after={
                "entity": entity.name,
                "version": version.version,
                **({"trial": True, "sandbox": sandbox} if trial else {}),
                **({"rerun_of": str(rerun_of.pk)} if rerun_of is not None else {}),
            },
        )
        enqueue(str(run.pk))
    return run


def run_try(*, entity: Entity, input_data: Any, user: Any, live_tools: bool = False) -> Run:
    """A designer's trial of the entity's current version, a draft too ("Try it" in the
    designer): its tools are sandboxed unless `live_tools`, and the run and every run under it
    are marked as a trial, which the runs list and the dashboard keep apart."""
    return run_start(
        entity=entity, input_data=input_data, user=user, trial=True, sandbox=not live_tools
    )


def _refuse_unless_trying(user: Any, workspace: Workspace) -> None:
    """A trial is the designer's as much as the operator's: either role may start one."""
    if user is None or has_perm(user, DESIGN, workspace) or has_perm(user, OPERATE, workspace):
        return
    raise RunRefused(
        "PERMISSION_DENIED",
        f"{getattr(user, 'username', 'this user')} may not try entities in {workspace.name}; "
        "the designer or operator role is needed",
    )


def _refuse_unless_operator(user: Any, workspace: Workspace, doing: str) -> None:
    if user is not None and not has_perm(user, OPERATE, workspace):
        raise RunRefused(
            "PERMISSION_DENIED",
            f"{getattr(user, 'username', 'this user')} may not {doing} in "
            f"{workspace.name}; the operator role is needed",
        )


def _lifetime_left(entity: Entity, definition: dict) -> Decimal | None:
    """What the entity's cumulative_cost_usd leaves, under the entity's row lock until
    commit; None when it has no such limit. Refuses the run when nothing is left."""
    lifetime = lifetime_limit(definition)
    if lifetime is None:
        return None
    left = lifetime_left(entity.pk, lifetime)
    if left <= 0:
        raise RunRefused(
            "LIMIT_EXCEEDED",
            f"{entity.name} has used its cumulative_cost_usd of ${lifetime.normalize()} "
            "(what its runs cost, and hold while they run)",
        )
    return left


def _version_to_run(entity: Entity, version: str = "") -> Any:
    """The entity's version a run of it runs: the newest, or the SemVer asked for."""
    if not version:
        newest = latest_version(entity)
        if newest is None:
            raise RunRefused("NOT_FOUND", f"{entity.name} has no saved version")
        return newest
    found = entity.versions.filter(version=version).first()
    if found is None:
        known = list(
            entity.versions.order_by("-created_at", "-id").values_list("version", flat=True)[:5]
        )
        message = f"{entity.name} has no version {version[:40]!r} (its newest: {', '.join(known)})"
        raise RunRefused("NOT_FOUND", message, {"execution_options.version": message})
    return found


def _root_run_created(
    *,
    entity: Entity,
    version: Any,
    definition: dict,
    input_data: Any,
    context: dict | None,
    user: Any,
    left: Decimal | None,
    trial: bool = False,
    sandbox: bool = False,
) -> Run:
    """The root run's row, its trace's sequence and its run.created event."""
    # Personal data in the input and context is stored as pii_handling says.
    input_data = run_data_sealed(definition, input_data)
    run = Run(
        workspace_id=entity.workspace_id,
        entity=entity,
        entity_version=version,
        input_data=input_data if isinstance(input_data, dict) else {"_": input_data},
        context=run_data_sealed(definition, context or {}),
        depth_limit=definition["governance"]["execution_limits"]["max_recursion_depth"],
        created_by=user if getattr(user, "is_authenticated", False) else None,
        trial=trial,
        sandbox=sandbox,
    )
    for name, value in run_limits(definition, str(run.id), None, left).items():
        setattr(run, name, value)
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
    return run


def run_rerun(*, run: Run, user: Any = None) -> Run:
    """Start the run's entity again, as a new root run, with the same input and context.

    The entity's current version runs (a re-run is how a designer tries a fix on the input
    that failed), and the starter is whoever asks, with their permissions and quotas."""
    return run_start(
        entity=run.entity,
        input_data=run.input_data,
        user=user,
        context=run.context,
        rerun_of=run,
    )


def _within_quotas(workspace_id: int, user: Any, budget: Decimal | None) -> None:
    """Seed 000 §8.3's quotas, checked under the workspace's row lock (starts in the same
    workspace take turns, so two cannot both take the last unit): refuse a run that would
    pass one; raise an alert at 90 %."""

    workspace = Workspace.objects.select_for_update().get(pk=workspace_id)
    now = timezone.now()
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    month = now.strftime("%Y-%m")
    roots = Run.objects.filter(workspace_id=workspace_id, parent__isnull=True)
    quota = workspace.monthly_cost_quota_usd
    if quota is not None:
        spent = roots.filter(created_at__gte=month_start).aggregate(total=Sum("total_cost_usd"))[
            "total"
        ] or Decimal(0)
        if spent >= quota:
            raise RunRefused(
                "LIMIT_EXCEEDED",
                f"{workspace.name} has spent ${spent.normalize()} of its ${quota} monthly cost "
                "quota; no run starts until next month or a higher quota",
            )
        # Budgets of subordinates hired under way hold their share too (runs/engine/limits.py).
        held = workspace.quota_held_usd
        if budget is not None and spent + held + budget > quota:
            holding = f", ${held.normalize()} held by hired subordinates" if held else ""
            raise RunRefused(
                "LIMIT_EXCEEDED",
                f"this run's budget of ${budget.normalize()} would take {workspace.name} past "
                f"its ${quota} monthly cost quota (${spent.normalize()} spent{holding})",
            )
        if spent >= quota * Decimal("0.9"):
            alert_raise(
                workspace_id=workspace_id,
                kind=AlertKind.QUOTA,
                key=f"quota_cost:{month}",
                message=f"{workspace.name} has spent ${spent.normalize()} of its ${quota} "
                "monthly cost quota (90 % or more)",
            )
    per_user = workspace.user_monthly_run_quota
    if per_user is not None and getattr(user, "is_authenticated", False):
        started = roots.filter(created_by=user, created_at__gte=month_start).count()
        if started >= per_user:
            raise RunRefused(
                "LIMIT_EXCEEDED",
                f"{user.get_username()} has started {started} runs in {workspace.name} this "
                f"month, its quota of {per_user} runs per person",
            )
        if started + 1 >= per_user * 0.9:
            alert_raise(
                workspace_id=workspace_id,
                kind=AlertKind.QUOTA,
                key=f"quota_runs:{user.pk}:{month}",
                message=f"{user.get_username()} has started {started + 1} of {per_user} runs "
                f"allowed this month in {workspace.name} (90 % or more)",
            )


def run_advance(run_id: str) -> None:
    """Do the run's next pieces of work (the executors' one entry point)."""
    engine().advance(run_id)


def run_resume(
    *,
    run_id: Any,
    trace_id: Any,
    status: str,
    waited: timedelta,
    event: str,
    payload: dict[str, Any],
) -> bool:
    """Inside the caller's transaction: a PAUSED run goes on as `status` (a person decided,
    or their time ran out). The time the trace waited on the person does not count against
    its deadlines, so every unfinished run of the trace gets it back; the event is recorded
    on the run, and the run is handed to the executor after commit. Answers whether the run
    was woken (a run that is not PAUSED any more is left as it is)."""
    _known_event(event)
    Run.objects.filter(trace_id=trace_id, deadline_at__isnull=False).exclude(
        status__in=TERMINAL
    ).update(deadline_at=F("deadline_at") + waited)
    woken = Run.objects.filter(pk=run_id, status=RunStatus.PAUSED).update(
        status=status, wake_at=None
    )
    append_events(str(trace_id), str(run_id), [(event, payload)])
    if woken:
        # The wait is the run's and each of its ancestors' (they waited on it): run times
        # without it say how long the work took (dashboard/selectors.py).
        lineage = Run.objects.filter(pk=run_id).values_list("lineage", flat=True).first()
        Run.objects.filter(pk__in=[run_id, *(lineage or [])]).update(
            human_wait_ms=F("human_wait_ms") + max(0, int(waited.total_seconds() * 1000))
        )
        enqueue(str(run_id))
    return bool(woken)


def run_note(*, run_id: Any, trace_id: Any, event: str, payload: dict[str, Any]) -> None:
    """Record an event on the run's trace that changes nothing else of it (an approval that
    escalated, say), in the caller's transaction; sent to the trace's viewers after commit."""
    _known_event(event)
    append_events(str(trace_id), str(run_id), [(event, payload)])


def _known_event(event: str) -> None:
    """A trace's events are of the kinds `runs.engine.state.EventKind` lists: what its pages
    and readers expect. Another is a bug of the caller's."""
    if event not in EVENT_KINDS:
        raise ValueError(f"{event!r} is not a kind of trace event (runs.engine.state.EventKind)")


def run_cancel(*, run: Run, user: Any = None) -> int:
    """Cancel the run and its descendants: the step in flight finishes and is recorded, no
    new step starts, a paused or blocked run ends too. Answers how many runs were asked."""
    if user is not None and not has_perm(user, OPERATE, run.workspace):
        raise RunRefused(
            "PERMISSION_DENIED",
            f"{getattr(user, 'username', 'this user')} may not cancel runs in "
            f"{run.workspace.name}; the operator role is needed",
        )
    cancellable = [*ACTIVE, RunStatus.BLOCKED]
    asked: set = set()
    with transaction.atomic():
        # The run's row first: a spawn under way finishes before the subtree is read, and a
        # spawn after this sees the flag (runs/store.py spawn).
        row = Run.objects.select_for_update().filter(pk=run.pk).values("status").first()
        if row is None or row["status"] not in cancellable:
            status = (row or {}).get("status", "gone")
            raise RunRefused(
                "CONFLICT",
                f"the run is {str(status).lower()} already; only a run that has not ended can "
                "be cancelled",
            )
        Run.objects.filter(pk=run.pk).update(cancel_requested=True)
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
    approval_desk().close_for_runs(list(asked))  # nobody decides for a cancelled run
    now = timezone.now()
    # Runs no worker holds are ended at once; a leased one ends when its step returns.
    idle = Run.objects.filter(pk__in=asked, status__in=cancellable).exclude(
        lease_expires_at__gt=now
    )
    for row in idle.only("pk"):
        enqueue(str(row.pk))
    return Run.objects.filter(pk__in=asked, cancel_requested=True).count()


FIRE_REASON_MAX = 1000


def run_fire(*, run: Run, reason: str, user: Any = None, by: str = "") -> int:
    """Fire a subordinate hired at run time (runs/engine/hiring.py): record why and who
    (`by`: "hirer", "limit"; an operator's name when `user` fires it), audit it, and cancel
    it with its descendants (`run_cancel`). Its hirer's step then fails with FIRED and the
    reason. RunRefused CONFLICT for a run that was not hired or has ended."""
    _refuse_unless_operator(user, run.workspace, "fire subordinates")
    reason = " ".join(str(reason or "").split())[:FIRE_REASON_MAX]
    if not reason:
        raise RunRefused("VALIDATION_ERROR", "say why the subordinate is fired (a reason)")
    who = by or (f"operator {user.get_username()}" if user is not None else "system")
    with transaction.atomic():
        row = (
            Run.objects.select_for_update()
            .filter(pk=run.pk)
            .values("status", "hired_by_id", "fired_reason")
            .first()
        )
        if row is None or row["hired_by_id"] is None:
            raise RunRefused("CONFLICT", "the run was not hired at run time; cancel it instead")
        if row["status"] not in [*ACTIVE, RunStatus.BLOCKED] or row["fired_reason"]:
            raise RunRefused(
                "CONFLICT",
                f"the run is {str(row['status']).lower()} already; only a subordinate that "
                "has not ended can be fired",
            )
        Run.objects.filter(pk=run.pk).update(fired_reason=reason, fired_by=who)
        audit_record(
            workspace=run.workspace_id,
            action=AuditAction.RUN_FIRED,
            actor=user,
            target=run,
            object_label=run.role or run.entity.name,
            after={"reason": reason, "by": who, "hired_by": str(row["hired_by_id"])},
        )
        run_note(
            run_id=run.pk,
            trace_id=run.trace_id,
            event="run.fired",
            payload={"reason": reason, "by": who},
        )
    return run_cancel(run=run, user=user)


def run_raise_budget(*, run: Run, budget_usd: Any, user: Any = None) -> list[str]:
    """Raise the budget (max_cost_usd) of a run that has one of its own, and resume the runs
    that wait BLOCKED on it (budget_exhausted): each re-runs the step it stopped at. Answers
    their ids. The raise is set aside at the run's own anchor first, when it has one: a
    child's budget never outgrows its parent's."""
    _refuse_unless_operator(user, run.workspace, "change runs")
    new = _budget_amount(budget_usd)
    with transaction.atomic():
        row = Run.objects.select_for_update().select_related("entity").get(pk=run.pk)
        _check_budget_change(row, new)
        _budget_change_drawn(row, new - row.budget_usd)
        before = row.budget_usd
        Run.objects.filter(pk=row.pk).update(budget_usd=new)
        blocked = _budget_blocked_resumed(row)
        audit_record(
            workspace=row.workspace_id,
            action=AuditAction.RUN_BUDGET_RAISED,
            actor=user,
            target=row,
            object_label=row.entity.name,
            before={"budget_usd": str(before)},
            after={"budget_usd": str(new), "resumed": [str(pk) for pk in blocked]},
        )
        for blocked_id in blocked:
            enqueue(str(blocked_id))
    return [str(pk) for pk in blocked]


MOST_PASSES_GRANTED = 1000


def run_grant_passes(*, run: Run, passes: Any, user: Any = None) -> None:
    """Give a run that ran out of passes (BLOCKED, MAX_PASSES_EXHAUSTED: its loop's
    max_iterations were used up before the loop was done) `passes` more, and resume it: its
    next pass starts where the loop would have gone on."""
    _refuse_unless_operator(user, run.workspace, "change runs")
    count = _passes_count(passes)
    with transaction.atomic():
        row = Run.objects.select_for_update().select_related("entity").get(pk=run.pk)
        if row.status != RunStatus.BLOCKED or row.error_code != MAX_PASSES_EXHAUSTED:
            raise RunRefused(
                "CONFLICT",
                f"this {row.entity.name} run has not run out of passes (it is "
                f"{row.status.lower()}); only a run blocked on max_passes_exhausted takes more",
            )
        if row.passes_granted + count > MOST_PASSES_GRANTED:
            raise RunRefused(
                "VALIDATION_ERROR",
                f"a run may be given at most {MOST_PASSES_GRANTED} passes in all; this one "
                f"has {row.passes_granted} already",
            )
        Run.objects.filter(pk=row.pk).update(
            status=RunStatus.RUNNING,
            error_code="",
            error_message="",
            passes_granted=F("passes_granted") + count,
        )
        append_events(
            str(row.trace_id),
            str(row.pk),
            [("run.status", {"status": "RUNNING", "reason": f"{count} more passes given"})],
        )
        audit_record(
            workspace=row.workspace_id,
            action=AuditAction.RUN_PASSES_GRANTED,
            actor=user,
            target=row,
            object_label=row.entity.name,
            before={"passes_granted": row.passes_granted},
            after={"passes_granted": row.passes_granted + count},
        )
        enqueue(str(row.pk))


def _passes_count(passes: Any) -> int:
    if isinstance(passes, bool):
        raise RunRefused("INVALID_INPUT", f"passes must be a whole number, not {passes!r}")
    try:
        count = int(str(passes).strip())
    except ValueError:
        raise RunRefused(
            "INVALID_INPUT", f"passes must be a whole number, not {str(passes)[:40]!r}"
        ) from None
    if not 1 <= count <= MOST_PASSES_GRANTED:
        raise RunRefused(
            "INVALID_INPUT", f"passes must be from 1 to {MOST_PASSES_GRANTED}, not {count}"
        )
    return count


def _budget_amount(budget_usd: Any) -> Decimal:
    try:
        new = Decimal(str(budget_usd))
    except (InvalidOperation, ValueError):
        raise RunRefused("INVALID_INPUT", f"budget_usd {budget_usd!r} is not a number") from None
    if not new.is_finite() or new <= 0:
        raise RunRefused("INVALID_INPUT", f"budget_usd must be a positive amount, not {new}")
    if new > BUDGET_MAX_USD:
        raise RunRefused(
            "INVALID_INPUT", f"budget_usd may be at most ${BUDGET_MAX_USD:,}, not {new:.6g}"
        )
    return new


def _check_budget_change(row: Run, new: Decimal) -> None:
    """Refuse a new budget for a run (locked) that has none of its own, has ended, or has
    already spent or set aside more."""
    if row.budget_usd is None or str(row.budget_anchor) != str(row.pk):
        raise RunRefused(
            "CONFLICT",
            f"this {row.entity.name} run has no budget of its own (max_cost_usd); raise the "
            "budget of the run it is drawn from",
        )
    if row.status in TERMINAL:
        raise RunRefused("CONFLICT", f"the run is {row.status.lower()} already")
    held = row.total_cost_usd + row.reserved_usd
    if new < held:
        raise RunRefused(
            "CONFLICT",
            f"budget_usd {new} is less than the ${held.normalize()} this run has spent or "
            "set aside",
        )


def _budget_change_drawn(row: Run, increase: Decimal) -> None:
    """A child's budget is drawn from its parent's anchor: a raise is set aside there first
    (refused when the anchor has not that much left), a cut is given back."""
    if increase == 0 or row.parent_id is None:
        return
    parent_anchor = Run.objects.values_list("budget_anchor", flat=True).get(pk=row.parent_id)
    if parent_anchor is None:
        return
    if increase < 0:
        sql.unreserve(str(parent_anchor), -increase)
    elif not sql.reserve_budget(str(parent_anchor), increase).value():
        raise RunRefused(
            "BUDGET_EXHAUSTED",
            f"the budget this run is drawn from has no ${increase.normalize()} left: "
            "raise that one first",
        )


def _budget_blocked_resumed(row: Run) -> list:
    """The runs BLOCKED on the budget anchored at `row`, set RUNNING again (each re-runs the
    step it stopped at); answers their ids."""
    blocked = list(
        Run.objects.filter(
            budget_anchor=row.pk,
            status=RunStatus.BLOCKED,
            error_code=BUDGET_EXHAUSTED,
        ).values_list("pk", flat=True)
    )
    Run.objects.filter(pk__in=blocked).update(
        status=RunStatus.RUNNING, error_code="", error_message=""
    )
    for blocked_id in blocked:
        append_events(
            str(row.trace_id),
            str(blocked_id),
            [("run.status", {"status": "RUNNING", "reason": "budget raised"})],
        )
    return blocked


def _subtree(run: Run) -> list:
    """The run and every run below it (the one walk, runs/engine/tree.py)."""
    return [run.pk, *descendants(run.pk, _children_of)]


def _children_of(parents: list) -> list:
    return list(Run.objects.filter(parent_id__in=parents).values_list("pk", flat=True))


# -- the API's execute (issue 6) ------------------------------------------------------------------


class RunInputInvalid(RunRefused):
    """Input that breaks the entity's io_contract: `details` names each field
    (`input_data.company_name`) and what is wrong with it. Nothing was written."""

    def __init__(self, message: str, details: dict[str, str]):
        super().__init__("VALIDATION_ERROR", message)
        self.details = details


_RULE_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)")
_REQUIRED = re.compile(r"^'(.+)' is a required property$")


def run_input_problems(
    *, entity: Entity, input_data: Any, prefix: str = "input_data", version: str = ""
) -> dict:
    """What the entity's version a run would pin (the newest, or `version`) finds wrong with
    the input, by field path: its io_contract input schema, then its validation rules, as the
    engine checks them when the run starts. Empty when the input is good."""
    found = latest_version(entity) if not version else _version_to_run(entity, version)
    if found is None:
        return {}
    version = found
    contract = pinned_definition(version.pk, entity.pk)["io_contract"]["input"]
    if not isinstance(input_data, dict):
        return {prefix: "must be a JSON object"}
    problems: dict[str, str] = {}
    validator = schemas.validator(contract["schema"])
    for error in sorted(validator.iter_errors(input_data), key=lambda e: list(map(str, e.path))):
        path = [prefix, *(str(part) for part in error.absolute_path)]
        message = error.message
        missing = _REQUIRED.match(message) if error.validator == "required" else None
        if missing:
            path.append(missing.group(1))
            message = "this field is required"
        where = ".".join(path)
        problems[where] = f"{problems[where]}; {message}" if where in problems else message
    if problems:
        return problems
    for rule in contract["validation_rules"]:
        for problem in rule_problems([rule], input_data):
            field = _RULE_FIELD.match(rule.get("rule", ""))
            where = f"{prefix}.{field.group(1)}" if field else prefix
            problems[where] = f"{problems[where]}; {problem}" if where in problems else problem
    return problems


def run_execute(
    *,
    entity: Entity,
    user: Any,
    input_data: Any,
    context: dict | None = None,
    webhook_url: str = "",
    idempotency_key: str = "",
    fingerprint: str = "",
    version: str = "",
) -> tuple[Run, bool]:
    """Start a run for POST /api/v1/entities/{id}/execute; answers the run and whether it is
    an earlier request's (the same `Idempotency-Key` and body: nothing new is started).

    The input is checked against the entity's io_contract first (RunInputInvalid, nothing
    written). With a key, the key and the run commit together: two identical requests at
    the same moment start one run, the second answering the first's; the same key with
    another body (`fingerprint`) is refused with IDEMPOTENCY_CONFLICT."""
    request = {
        "entity": entity,
        "user": user,
        "input_data": input_data,
        "context": context,
        "webhook_url": webhook_url,
        "idempotency_key": idempotency_key,
        "fingerprint": fingerprint,
        "version": version,
    }
    try:
        return _execute(**request)
    except IntegrityError:
        if not idempotency_key:
            raise
        # The same key committed by a request that came at the same moment: this one's run
        # was rolled back, and the other's run is the answer (or the conflict).
        return _execute(**request)


def _execute(
    *,
    entity: Entity,
    user: Any,
    input_data: Any,
    context: dict | None,
    webhook_url: str,
    idempotency_key: str,
    fingerprint: str,
    version: str = "",
) -> tuple[Run, bool]:
    now = timezone.now()
    with transaction.atomic():
        if idempotency_key:
            earlier = (
                IdempotencyKey.objects.select_related("run", "run__entity")
                .filter(
                    workspace_id=entity.workspace_id,
                    user=user,
                    key=idempotency_key,
                    expires_at__gt=now,
                )
                .first()
            )
            if earlier is not None:
                if earlier.request_hash != fingerprint:
                    raise RunRefused(
                        "IDEMPOTENCY_CONFLICT",
                        f"the Idempotency-Key {idempotency_key!r} was used "
                        f"{earlier.created_at.isoformat(timespec='seconds')} with another "
                        f"request (run {earlier.run_id}); use a new key for a new request",
                    )
                return earlier.run, True
        problems = run_input_problems(entity=entity, input_data=input_data, version=version)
        if problems:
            raise RunInputInvalid(
                "the input does not match what "
                f"{entity.name} takes: "
                + "; ".join(f"{where}: {problem}" for where, problem in problems.items()),
                problems,
            )
        run = run_start(
            entity=entity, input_data=input_data, user=user, context=context, version=version
        )
        if webhook_url:
            Run.objects.filter(pk=run.pk).update(webhook_url=webhook_url)
            run.webhook_url = webhook_url
        if idempotency_key:
            hours = settings.HIERARCH_API.get("IDEMPOTENCY_HOURS", 24)
            # Expired keys of this user go now (a key may be used again once it expired).
            IdempotencyKey.objects.filter(user=user, expires_at__lte=now).delete()
            IdempotencyKey.objects.create(
                workspace_id=entity.workspace_id,
                user=user,
                key=idempotency_key,
                request_hash=fingerprint,
                run=run,
                expires_at=now + timedelta(hours=hours),
            )
    return run, False
