"""The dashboard's numbers (seed 000 §11.1, seed 002 §9.1), scoped to the user's workspaces.

An *execution* is a root run; with an entity chosen, every run of that entity (as a root or as
a child of another entity's run). A finished execution ended COMPLETED, FAILED or CANCELLED
and counts in the hour or day it ended (`completed_at`). From them:

- success rate: COMPLETED / finished;
- average cost per execution: the finished executions' cost (their descendants' included) /
  finished;
- P95 run time: the 95th percentile (continuous, interpolated) of the finished executions'
  `execution_time_ms` less their `human_wait_ms` (the time the run and its descendants were
  paused on a person: an hour before an approver decided says nothing about the agents);
- tokens per successful execution: the COMPLETED ones' tokens / COMPLETED;
- HITL approval rate: of the requests a decision closed (APPROVED, REJECTED or TIMEOUT, by
  `responded_at`), the share APPROVED. An edit and a locked constraint let the run go on, so
  they count as approved; a timeout counts as not approved (no person approved it, whatever
  its timeout action did). Notification-only and cancelled requests are not decisions.

Buckets are UTC hours or days, numbered in SQL from the start of the previous period
(`BucketIndex`: integer arithmetic on the epoch, no per-row date function). Everything is
computed in the database with aggregates, in a fixed number of queries whatever
the number of runs, entities or buckets: no query per bucket or per entity. PostgreSQL takes
the percentile with `percentile_cont`; SQLite (the embedded default) has no such aggregate,
so there the P95s come from one query that reads the times, at most `P95_SAMPLE_MAX` of them
(a uniform sample: run ids are random UUIDs, and the sample is taken in id order).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import NotSupportedError, connection
from django.db.models import (
    Aggregate,
    Avg,
    BooleanField,
    Case,
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    IntegerField,
    Max,
    Min,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Greatest
from django.utils import timezone

from approvals.models import OPEN, Approval, ApprovalStatus, Decision
from entities.models import Entity, Workspace
from governance.models import Alert
from governance.permissions import scope
from runs.metrics import metrics_settings, tracked
from runs.models import TERMINAL, Run, RunMetric, RunStatus

# A run's time at work: its run time less the time it waited on a person (never below 0:
# requests of parallel branches wait at the same time and are each counted).
WORKING_MS = Greatest(
    ExpressionWrapper(F("execution_time_ms") - F("human_wait_ms"), output_field=IntegerField()),
    Value(0),
    output_field=IntegerField(),
)
P95_SAMPLE_MAX = 50_000  # times read on SQLite for the P95s of one dashboard
ENTITY_ROWS = 10  # entities in "cost by entity"
ALERT_ROWS = 20
CUSTOM_METRIC_ROWS = 50  # custom metrics listed, the most recorded first
DECIDED = (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED, ApprovalStatus.TIMEOUT)


# -- the period --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    key: str
    label: str
    unit: str  # "hour" or "day"
    buckets: int

    @property
    def step(self) -> timedelta:
        return timedelta(hours=1) if self.unit == "hour" else timedelta(days=1)


PERIODS: dict[str, Period] = {
    "24h": Period("24h", "Last 24 hours, by hour", "hour", 24),
    "7d": Period("7d", "Last 7 days, by day", "day", 7),
    "30d": Period("30d", "Last 30 days, by day", "day", 30),
}
DEFAULT_PERIOD = "24h"


@dataclass(frozen=True)
class Window:
    """The period's buckets, the last one holding `now`; the previous period is as many
    buckets just before."""

    period: Period
    buckets: tuple[datetime, ...]
    start: datetime
    end: datetime
    previous_start: datetime

    def bucket_at(self, index: int) -> datetime | None:
        """The bucket of an index counted from the previous period's start; None for one
        of the previous period."""
        index -= self.period.buckets
        return self.buckets[index] if 0 <= index < len(self.buckets) else None


def truncate(moment: datetime, unit: str) -> datetime:
    """The start of the UTC hour or day."""
    moment = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if unit == "day" else moment


def window_for(period: Period, now: datetime | None = None) -> Window:
    now = now or timezone.now()
    last = truncate(now, period.unit)
    buckets = tuple(last - period.step * i for i in reversed(range(period.buckets)))
    start = buckets[0]
    return Window(
        period=period,
        buckets=buckets,
        start=start,
        end=last + period.step,
        previous_start=start - period.step * period.buckets,
    )


# -- what the user may look at -----------------------------------------------------------------


def dashboard_workspaces(user: Any) -> QuerySet[Workspace]:
    """The workspaces the user sees: the filter's choices."""
    return scope(Workspace.objects.all(), user, field="").order_by("name")


def dashboard_entities(user: Any, workspace: Workspace | None = None) -> QuerySet[Entity]:
    """The entities of the user's workspaces (of one of them, when given)."""
    entities = scope(Entity.objects.all(), user).select_related("workspace")
    if workspace is not None:
        entities = entities.filter(workspace=workspace)
    return entities.order_by("name", "workspace__name")


def _executions(user: Any, workspace: Workspace | None, entity: Entity | None) -> QuerySet[Run]:
    # Trials (the designer's "Try it") are not production: the dashboard leaves them out.
    runs = scope(Run.objects.filter(trial=False), user)
    if workspace is not None:
        runs = runs.filter(workspace=workspace)
    if entity is not None:
        return runs.filter(entity=entity)
    return runs.filter(parent__isnull=True)


def _approvals(user: Any, workspace: Workspace | None, entity: Entity | None) -> QuerySet:
    approvals = scope(Approval.objects.all(), user)
    if workspace is not None:
        approvals = approvals.filter(workspace=workspace)
    if entity is not None:
        approvals = approvals.filter(entity=entity)
    return approvals


# -- the percentile ----------------------------------------------------------------------------


class PercentileCont(Aggregate):
    """PostgreSQL's ordered-set aggregate `percentile_cont(f) WITHIN GROUP (ORDER BY x)`.
    The fraction is a number written into the SQL by this module, never input."""

    function = "PERCENTILE_CONT"
    name = "PercentileCont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        if not 0 <= float(fraction) <= 1:
            raise ValueError("a percentile's fraction is between 0 and 1")
        super().__init__(expression, fraction=repr(float(fraction)), **extra)


class BucketIndex(Func):
    """Which bucket of `step` a moment falls in, counted from `origin` (0, 1, …): integer
    arithmetic on seconds since the epoch, in C on both databases. Only for moments at or
    after `origin` (the filters keep the others out)."""

    output_field = IntegerField()

    def __init__(self, field: str, *, origin: datetime, step: timedelta) -> None:
        super().__init__(F(field))
        self.origin = int(origin.timestamp())
        self.step = int(step.total_seconds())

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        raise NotSupportedError("buckets are numbered on PostgreSQL and SQLite only")

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        sql, params = compiler.compile(self.source_expressions[0])
        return (
            f"FLOOR((EXTRACT(EPOCH FROM {sql}) - %s) / %s)::integer",
            (*params, self.origin, self.step),
        )

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # SQLite keeps a datetime as UTC text ("2025-03-05 13:59:59.999999"); strftime('%s')
        # reads whole seconds of its first 19 characters (given the fraction it would round
        # to the millisecond, and 13:59:59.9999 would land in the next hour).
        sql, params = compiler.compile(self.source_expressions[0])
        return (
            f"((CAST(strftime(%s, substr({sql}, 1, 19)) AS INTEGER) - %s) / %s)",
            ("%s", *params, self.origin, self.step),
        )


def percentile_cont(values: Iterable[float], fraction: float) -> float | None:
    """What `percentile_cont` answers: linear interpolation between the closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return None
    position = fraction * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _native_percentile() -> bool:
    return connection.vendor == "postgresql"


# -- the numbers -------------------------------------------------------------------------------


@dataclass
class RunTally:
    """Finished executions of one bucket, one period or one entity."""

    finished: int = 0
    completed: int = 0
    cost: Decimal = Decimal(0)
    completed_tokens: int = 0
    p95_ms: float | None = None

    def add(self, other: RunTally) -> None:
        self.finished += other.finished
        self.completed += other.completed
        self.cost += other.cost
        self.completed_tokens += other.completed_tokens

    @property
    def success_rate(self) -> float | None:
        return 100 * self.completed / self.finished if self.finished else None

    @property
    def avg_cost(self) -> Decimal | None:
        return self.cost / self.finished if self.finished else None

    @property
    def tokens_per_success(self) -> float | None:
        return self.completed_tokens / self.completed if self.completed else None


@dataclass
class ApprovalTally:
    decided: int = 0
    approved: int = 0
    edited: int = 0
    locked: int = 0
    rejected: int = 0
    timed_out: int = 0

    def add(self, other: ApprovalTally) -> None:
        for name in ("decided", "approved", "edited", "locked", "rejected", "timed_out"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def approval_rate(self) -> float | None:
        return 100 * self.approved / self.decided if self.decided else None


@dataclass
class EntityRow:
    entity_id: Any
    name: str
    workspace: str
    tally: RunTally
    # the entity's `observability.metrics.track_*` flags (runs/metrics.py `tracked`)
    tracked: dict[str, bool] = field(default_factory=lambda: tracked(None))


@dataclass
class CustomMetricRow:
    """One custom metric of one entity over the period, aggregated as the entity declares."""

    entity_id: Any
    entity: str
    workspace: str
    name: str
    aggregation: str  # SUM, AVG, MAX, MIN or COUNT
    value: float
    runs: int  # the runs that recorded a number for it


@dataclass
class Dashboard:
    window: Window
    current: RunTally
    previous: RunTally
    buckets: dict[datetime, RunTally]
    approvals: ApprovalTally
    approvals_previous: ApprovalTally
    approval_buckets: dict[datetime, ApprovalTally]
    statuses: dict[datetime, dict[str, int]]
    queue_depth: int
    entities: list[EntityRow]
    alerts: list[Alert]
    p95_sampled: bool = False  # SQLite read only a sample of the times
    custom_metrics: list[CustomMetricRow] = field(default_factory=list)
    # the chosen entity's track_* flags; every figure is tracked without an entity chosen
    tracked: dict[str, bool] = field(default_factory=lambda: tracked(None))


def dashboard_metrics(
    *,
    user: Any,
    period: Period,
    workspace: Workspace | None = None,
    entity: Entity | None = None,
    now: datetime | None = None,
) -> Dashboard:
    """Every number of the dashboard for what the user may see, narrowed to the workspace and
    the entity when given (the caller checked they are the user's)."""
    window = window_for(period, now)

    def bucket(field: str) -> BucketIndex:
        return BucketIndex(field, origin=window.previous_start, step=period.step)

    executions = _executions(user, workspace, entity)
    finished = executions.filter(
        status__in=TERMINAL,
        completed_at__gte=window.previous_start,
        completed_at__lt=window.end,
    )
    p95 = {"p95_ms": PercentileCont(WORKING_MS, 0.95)} if _native_percentile() else {}
    buckets, current, previous = _run_buckets(finished, window, bucket, p95)
    sampled, entity_p95 = _p95s(finished, window, bucket, buckets, current, previous, p95)
    statuses = _status_buckets(executions, window, bucket)
    scoped_approvals = _approvals(user, workspace, entity)
    approvals, approvals_previous, approval_buckets = _approval_buckets(
        scoped_approvals, window, bucket
    )
    entities = [] if entity is not None else _entity_rows(finished, window, p95, entity_p95)
    return Dashboard(
        window=window,
        current=current,
        previous=previous,
        buckets=buckets,
        approvals=approvals,
        approvals_previous=approvals_previous,
        approval_buckets=approval_buckets,
        statuses=statuses,
        queue_depth=scoped_approvals.filter(status__in=OPEN, approval_required=True).count(),
        entities=entities,
        alerts=_open_alerts(user, workspace, entity),
        p95_sampled=sampled,
        custom_metrics=_custom_metrics(user, workspace, entity, window),
        tracked=tracked({"observability": entity.observability} if entity is not None else None),
    )


def _tallies() -> dict[str, Aggregate]:
    """What a RunTally counts, as aggregates of a query."""
    return {
        "finished": Count("pk"),
        "completed": Count("pk", filter=Q(status=RunStatus.COMPLETED)),
        "cost": Sum("total_cost_usd"),
        "completed_tokens": Sum("total_tokens", filter=Q(status=RunStatus.COMPLETED)),
    }


def _run_buckets(
    finished: QuerySet[Run], window: Window, bucket: Callable[[str], BucketIndex], p95: dict
) -> tuple[dict[datetime, RunTally], RunTally, RunTally]:
    """Both periods' buckets of finished runs (the previous period's add up to its totals):
    the current period's buckets, and each period's totals."""
    buckets: dict[datetime, RunTally] = {}
    previous = RunTally()
    current = RunTally()
    rows = (
        finished.annotate(bucket=bucket("completed_at"))
        .values("bucket")
        .annotate(**_tallies(), **p95)
        .order_by()
    )
    for row in rows:
        tally = _run_tally(row)
        moment = window.bucket_at(row["bucket"])
        if moment is not None:
            buckets[moment] = tally
            current.add(tally)
        else:
            previous.add(tally)
    return buckets, current, previous


def _p95s(
    finished: QuerySet[Run],
    window: Window,
    bucket: Callable[[str], BucketIndex],
    buckets: dict[datetime, RunTally],
    current: RunTally,
    previous: RunTally,
    p95: dict,
) -> tuple[bool, dict[Any, float | None] | None]:
    """The P95 of each period (a percentile does not add up from its buckets): by the
    database when `p95` holds its aggregate, else from a sample read in Python, which gives
    the entities' P95 too. Answers whether it sampled, and those entities' P95."""
    if p95:
        _period_p95(finished, window, current, previous, p95)
        return False, None
    entity_p95: dict[Any, float | None] = {}
    sampled = _p95_in_python(
        finished.annotate(bucket=bucket("completed_at")),
        window,
        buckets,
        current,
        previous,
        entity_p95,
    )
    return sampled, entity_p95


def _period_p95(
    finished: QuerySet[Run], window: Window, current: RunTally, previous: RunTally, p95: dict
) -> None:
    """The P95 of each period, by the database."""
    in_current = Case(
        When(completed_at__gte=window.start, then=Value(True)),
        default=Value(False),
        output_field=BooleanField(),
    )
    for row in (
        finished.annotate(is_current=in_current).values("is_current").annotate(**p95).order_by()
    ):
        (current if row["is_current"] else previous).p95_ms = row["p95_ms"]


def _status_buckets(
    executions: QuerySet[Run], window: Window, bucket: Callable[[str], BucketIndex]
) -> dict[datetime, dict[str, int]]:
    """Runs started in each bucket, by their status now."""
    statuses: dict[datetime, dict[str, int]] = defaultdict(dict)
    for row in (
        executions.filter(created_at__gte=window.start, created_at__lt=window.end)
        .annotate(bucket=bucket("created_at"))
        .values("bucket", "status")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        moment = window.bucket_at(row["bucket"])
        if moment is not None:
            statuses[moment][row["status"]] = row["n"]
    return dict(statuses)


def _approval_buckets(
    scoped_approvals: QuerySet[Approval], window: Window, bucket: Callable[[str], BucketIndex]
) -> tuple[ApprovalTally, ApprovalTally, dict[datetime, ApprovalTally]]:
    """Decided requests in each bucket of both periods: the current period's totals, the
    previous period's, and the current period's buckets."""
    approvals, approvals_previous = ApprovalTally(), ApprovalTally()
    approval_buckets: dict[datetime, ApprovalTally] = {}
    for row in (
        scoped_approvals.filter(
            status__in=DECIDED,
            responded_at__gte=window.previous_start,
            responded_at__lt=window.end,
        )
        .annotate(bucket=bucket("responded_at"))
        .values("bucket")
        .annotate(
            decided=Count("pk"),
            approved=Count("pk", filter=Q(status=ApprovalStatus.APPROVED)),
            edited=Count("pk", filter=Q(status=ApprovalStatus.APPROVED, decision=Decision.EDIT)),
            locked=Count(
                "pk",
                filter=Q(status=ApprovalStatus.APPROVED, decision=Decision.LOCK_CONSTRAINT),
            ),
            rejected=Count("pk", filter=Q(status=ApprovalStatus.REJECTED)),
            timed_out=Count("pk", filter=Q(status=ApprovalStatus.TIMEOUT)),
        )
        .order_by()
    ):
        moment = window.bucket_at(row.pop("bucket"))
        tally = ApprovalTally(**row)
        if moment is not None:
            approval_buckets[moment] = tally
            approvals.add(tally)
        else:
            approvals_previous.add(tally)
    return approvals, approvals_previous, approval_buckets


def _entity_rows(
    finished: QuerySet[Run],
    window: Window,
    p95: dict,
    sampled_p95: dict[Any, float | None] | None,
) -> list[EntityRow]:
    """Cost by entity: the entities whose executions cost most in the period (their P95 is
    the sampled one, `sampled_p95`, when the database has no percentile)."""
    entities = []
    for row in (
        finished.filter(completed_at__gte=window.start)
        .values("entity_id", "entity__name", "workspace__name", "entity__observability")
        .annotate(**_tallies(), **p95)
        .order_by("-cost", "entity__name")[:ENTITY_ROWS]
    ):
        tally = _run_tally(row)
        if sampled_p95 is not None:
            tally.p95_ms = sampled_p95.get(row["entity_id"])
        entities.append(
            EntityRow(
                row["entity_id"],
                row["entity__name"],
                row["workspace__name"],
                tally,
                tracked({"observability": row["entity__observability"]}),
            )
        )
    return entities


def _custom_metrics(
    user: Any, workspace: Workspace | None, entity: Entity | None, window: Window
) -> list[CustomMetricRow]:
    """The custom metrics recorded in the period: one GROUP BY by entity and metric, every
    aggregation at once, with the entity's definition as it is now, which says the
    aggregation shown (a metric the entity no longer declares is left out). At most
    CUSTOM_METRIC_ROWS, the most recorded first; listed by entity, then metric."""
    metrics = scope(RunMetric.objects.filter(run__trial=False), user).filter(
        recorded_at__gte=window.start, recorded_at__lt=window.end
    )
    if workspace is not None:
        metrics = metrics.filter(workspace=workspace)
    if entity is not None:
        metrics = metrics.filter(entity=entity)
    rows = []
    for row in (
        metrics.values(
            "entity_id", "entity__name", "workspace__name", "entity__observability", "name"
        )
        .annotate(
            COUNT=Count("pk"),
            SUM=Sum("value"),
            AVG=Avg("value"),
            MAX=Max("value"),
            MIN=Min("value"),
        )
        .order_by("-COUNT", "entity_id", "name")[:CUSTOM_METRIC_ROWS]
    ):
        settings = metrics_settings({"observability": row["entity__observability"]})
        declared = {
            metric.get("metric_name"): metric.get("aggregation")
            for metric in settings.get("custom_metrics") or ()
        }
        aggregation = declared.get(row["name"])
        if aggregation not in ("SUM", "AVG", "MAX", "MIN", "COUNT"):
            continue
        rows.append(
            CustomMetricRow(
                entity_id=row["entity_id"],
                entity=row["entity__name"],
                workspace=row["workspace__name"],
                name=row["name"],
                aggregation=aggregation,
                value=float(row[aggregation]),
                runs=row["COUNT"],
            )
        )
    return sorted(rows, key=lambda row: (row.entity, row.workspace, row.name))


def _open_alerts(user: Any, workspace: Workspace | None, entity: Entity | None) -> list[Alert]:
    """The open alerts, newest first."""
    alerts = scope(Alert.objects.all(), user).filter(acknowledged_at__isnull=True)
    if workspace is not None:
        alerts = alerts.filter(workspace=workspace)
    if entity is not None:
        alerts = alerts.filter(Q(entity=entity) | Q(entity__isnull=True))
    return list(
        alerts.select_related("workspace", "entity").order_by("-created_at", "-pk")[:ALERT_ROWS]
    )


def _run_tally(row: dict) -> RunTally:
    return RunTally(
        finished=row["finished"],
        completed=row["completed"],
        cost=row["cost"] or Decimal(0),
        completed_tokens=row["completed_tokens"] or 0,
        p95_ms=row.get("p95_ms"),
    )


def _p95_in_python(
    finished: QuerySet[Run],
    window: Window,
    buckets: dict[datetime, RunTally],
    current: RunTally,
    previous: RunTally,
    entity_p95: dict[Any, float | None],
) -> bool:
    """SQLite: one query reads the times with their bucket (`finished` is annotated with it)
    and entity, at most P95_SAMPLE_MAX of them (a uniform sample: in the order of the runs'
    random ids), and the P95 of each bucket, period and entity is taken here. Answers whether
    it was a sample."""
    rows = list(
        finished.filter(execution_time_ms__isnull=False)
        .order_by("pk")
        .values_list("bucket", "entity_id", WORKING_MS)[: P95_SAMPLE_MAX + 1]
    )
    sampled = len(rows) > P95_SAMPLE_MAX
    by_bucket: dict[int, list[int]] = defaultdict(list)
    by_entity: dict[Any, list[int]] = defaultdict(list)
    now_times: list[int] = []
    before_times: list[int] = []
    first = window.period.buckets  # the index of the period's first bucket
    for index, entity_id, ms in rows[:P95_SAMPLE_MAX]:
        if index >= first:
            by_bucket[index].append(ms)
            by_entity[entity_id].append(ms)
            now_times.append(ms)
        else:
            before_times.append(ms)
    for index, times in by_bucket.items():
        moment = window.bucket_at(index)
        if moment in buckets:
            buckets[moment].p95_ms = percentile_cont(times, 0.95)
    current.p95_ms = percentile_cont(now_times, 0.95)
    previous.p95_ms = percentile_cont(before_times, 0.95)
    entity_p95.update({key: percentile_cont(times, 0.95) for key, times in by_entity.items()})
    return sampled
