"""What the page shows of the numbers: headline cards with their change against the previous
period, the charts, the entity rows. Formatting only; every number comes from
`dashboard.selectors.dashboard_metrics`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils.safestring import SafeString

from dashboard.charts import Point, Series, bar_chart, line_chart, stacked_bar_chart
from dashboard.selectors import ApprovalTally, Dashboard, RunTally
from runs.models import RunStatus

NO_RUNS = "No runs in this period."
NOT_TRACKED = "not tracked"

# The figures an entity's `observability.metrics.track_*` flag turns off, by card key.
TRACKED_BY = {
    "avg_cost": "track_cost",
    "p95_latency": "track_latency",
    "tokens_per_success": "track_token_usage",
}

STATUS_COLORS = {
    RunStatus.COMPLETED: "#067647",
    RunStatus.FAILED: "#b42318",
    RunStatus.CANCELLED: "#98a2b3",
    RunStatus.BLOCKED: "#b54708",
    RunStatus.PAUSED: "#f79009",
    RunStatus.WAITING: "#7a5af8",
    RunStatus.RUNNING: "#2453c9",
    RunStatus.PENDING: "#84adff",
}


# -- numbers as text ---------------------------------------------------------------------------


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} %"


def usd(value: Any) -> str:
    if value is None:
        return "—"
    amount = float(value)
    if amount == 0:
        return "$0"
    if abs(amount) >= 100:
        return f"${amount:,.0f}"
    if abs(amount) >= 1:
        return f"${amount:,.2f}"
    digits = max(2, 3 - int(f"{abs(amount):e}".split("e")[1]))  # three significant digits
    return f"${amount:.{digits}f}".rstrip("0").rstrip(".")


def duration(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s".replace(".00 s", " s")
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min".replace(".0 min", " min")
    return f"{ms / 3_600_000:.1f} h".replace(".0 h", " h")


def count(value: float | None) -> str:
    return "—" if value is None else f"{round(value):,}"


def bucket_label(moment: datetime, unit: str) -> tuple[str, str]:
    """(axis label, full title) of a bucket."""
    day = f"{moment:%b} {moment.day}"
    if unit == "day":
        return day, f"{moment:%a} {day}"
    return (day if moment.hour == 0 else f"{moment:%H}:00"), f"{day}, {moment:%H}:00"


# -- headline cards ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    text: str  # "+5.0 pts", "−12 %"
    direction: str  # up, down, flat
    tone: str  # good, bad, neutral
    previous: str


@dataclass(frozen=True)
class Card:
    key: str
    label: str
    value: str
    detail: str
    change: Change | None
    chart: SafeString | None = None


def change(
    current: Any, previous: Any, *, points: bool, better: str | None, fmt: Any
) -> Change | None:
    """The change against the previous period: in percentage points for a rate, in % of the
    earlier value otherwise; None when either period has nothing to measure."""
    if current is None or previous is None:
        return None
    current, previous = float(current), float(previous)
    if points:
        delta = current - previous
        text = f"{delta:+.1f} pts"
    else:
        if previous == 0:
            return None
        delta = (current - previous) / previous * 100
        text = f"{delta:+.0f} %"
    direction = "flat" if abs(delta) < 0.05 else ("up" if delta > 0 else "down")
    if direction == "flat" or better is None:
        tone = "neutral"
    else:
        tone = "good" if direction == better else "bad"
    return Change(text.replace("-", "−"), direction, tone, fmt(previous))


def headline_cards(data: Dashboard) -> list[Card]:
    """The cards; a figure the chosen entity does not track reads "not tracked"."""
    return [_untracked(card) if _hidden(data, card.key) else card for card in _cards(data)]


def _hidden(data: Dashboard, key: str) -> bool:
    flag = TRACKED_BY.get(key)
    return flag is not None and not data.tracked[flag]


def _untracked(card: Card) -> Card:
    flag = TRACKED_BY[card.key]
    return Card(
        card.key,
        card.label,
        NOT_TRACKED.capitalize(),
        f"This entity's definition turns {flag} off (observability.metrics): its runs still "
        "count it for budgets and limits, and the dashboard leaves it out.",
        None,
    )


def _cards(data: Dashboard) -> list[Card]:
    now, before = data.current, data.previous
    hitl, hitl_before = data.approvals, data.approvals_previous
    sampled = " (from a sample of the times)" if data.p95_sampled else ""
    return [
        Card(
            "success_rate",
            "Success rate",
            pct(now.success_rate),
            f"{now.completed:,} of {now.finished:,} finished executions completed",
            change(now.success_rate, before.success_rate, points=True, better="up", fmt=pct),
        ),
        Card(
            "avg_cost",
            "Average cost per execution",
            usd(now.avg_cost),
            f"{usd(now.cost)} over {now.finished:,} finished executions",
            change(now.avg_cost, before.avg_cost, points=False, better="down", fmt=usd),
        ),
        Card(
            "p95_latency",
            "P95 run time, excluding time waiting on a person",
            duration(now.p95_ms),
            f"95 % of finished executions worked at most this long{sampled}",
            change(now.p95_ms, before.p95_ms, points=False, better="down", fmt=duration),
        ),
        Card(
            "tokens_per_success",
            "Tokens per successful execution",
            count(now.tokens_per_success),
            f"{now.completed_tokens:,} tokens over {now.completed:,} completed executions",
            change(
                now.tokens_per_success,
                before.tokens_per_success,
                points=False,
                better="down",
                fmt=count,
            ),
        ),
        Card(
            "approval_rate",
            "HITL approval rate",
            pct(hitl.approval_rate),
            f"{hitl.approved:,} of {hitl.decided:,} decided requests approved "
            f"({hitl.edited:,} edited, {hitl.locked:,} with a constraint); "
            f"{hitl.rejected:,} rejected, {hitl.timed_out:,} timed out",
            change(
                hitl.approval_rate, hitl_before.approval_rate, points=True, better=None, fmt=pct
            ),
        ),
        Card(
            "queue_depth",
            "Open HITL queue",
            f"{data.queue_depth:,}",
            "requests waiting for a person now",
            None,
        ),
    ]


# -- charts ------------------------------------------------------------------------------------


def _percent(value: float) -> str:
    return f"{value:.0f} %" if value == round(value) else pct(value)


# The run metrics charted over the buckets: key, title, the value of a bucket's tally, and
# how its chart reads.
_RUN_METRICS: list[tuple[str, str, Callable[[RunTally], Any], dict[str, Any]]] = [
    (
        "success_rate",
        "Success rate",
        lambda t: t.success_rate,
        {"fmt": _percent, "ceiling": 100, "empty": NO_RUNS, "color": "#067647"},
    ),
    (
        "avg_cost",
        "Average cost per execution",
        lambda t: t.avg_cost,
        {"fmt": usd, "empty": NO_RUNS},
    ),
    (
        "p95_latency",
        "P95 run time, excluding time waiting on a person",
        lambda t: t.p95_ms,
        {"fmt": duration, "empty": NO_RUNS, "color": "#7a5af8", "time": True},
    ),
    (
        "tokens_per_success",
        "Tokens per successful execution",
        lambda t: t.tokens_per_success,
        {
            "fmt": count,
            "empty": "No successful runs in this period.",
            "color": "#b54708",
            "whole": True,
        },
    ),
]


def metric_charts(data: Dashboard) -> list[tuple[str, SafeString]]:
    """(key, chart) of each metric over the period's buckets."""
    unit = data.window.period.unit
    labels = [bucket_label(bucket, unit) for bucket in data.window.buckets]
    charts = [
        (key, line_chart(title=title, points=_run_points(data, labels, value), unit=unit, **style))
        for key, title, value, style in _RUN_METRICS
        if not _hidden(data, key)
    ]
    approval_points = [
        Point(label, title, data.approval_buckets.get(bucket, ApprovalTally()).approval_rate)
        for bucket, (label, title) in zip(data.window.buckets, labels, strict=True)
    ]
    charts.append(
        (
            "approval_rate",
            line_chart(
                title="HITL approval rate",
                points=approval_points,
                fmt=_percent,
                ceiling=100,
                empty="No request was decided in this period.",
                color="#0e7090",
                unit=unit,
            ),
        )
    )
    return charts


def _run_points(
    data: Dashboard, labels: list[tuple[str, str]], value: Callable[[RunTally], Any]
) -> list[Point]:
    """The value of each bucket's runs (a bucket without runs counts as an empty tally)."""
    empty = RunTally()
    out = []
    for bucket, (label, title) in zip(data.window.buckets, labels, strict=True):
        number = value(data.buckets.get(bucket, empty))
        out.append(Point(label, title, None if number is None else float(number)))
    return out


def status_chart(data: Dashboard) -> SafeString:
    unit = data.window.period.unit
    labels = [bucket_label(bucket, unit) for bucket in data.window.buckets]
    series = [
        Series(
            status.label.capitalize(),
            color,
            [data.statuses.get(bucket, {}).get(status, 0) for bucket in data.window.buckets],
        )
        for status, color in STATUS_COLORS.items()
    ]
    return stacked_bar_chart(
        title="Runs by status (by when they started)", labels=labels, series=series, empty=NO_RUNS
    )


def entity_cost_chart(data: Dashboard, *, several_workspaces: bool) -> SafeString:
    rows = [
        (
            f"{row.name} ({row.workspace})" if several_workspaces else row.name,
            float(row.tally.cost),
            f" over {row.tally.finished:,} finished executions",
        )
        for row in data.entities
        if row.tracked["track_cost"]
    ]
    return bar_chart(
        title=f"Cost by entity (top {len(rows) or 10})", rows=rows, fmt=usd, empty=NO_RUNS
    )


def entity_rows(data: Dashboard) -> list[dict]:
    """The entity table; a figure the entity does not track reads "not tracked"."""
    rows = []
    for row in data.entities:
        cost, latency, tokens = (
            row.tracked[flag] for flag in ("track_cost", "track_latency", "track_token_usage")
        )
        rows.append(
            {
                "name": row.name,
                "workspace": row.workspace,
                "finished": f"{row.tally.finished:,}",
                "success_rate": pct(row.tally.success_rate),
                "avg_cost": usd(row.tally.avg_cost) if cost else NOT_TRACKED,
                "p95": duration(row.tally.p95_ms) if latency else NOT_TRACKED,
                "tokens_per_success": count(row.tally.tokens_per_success)
                if tokens
                else NOT_TRACKED,
                "cost": usd(row.tally.cost) if cost else NOT_TRACKED,
            }
        )
    return rows


def custom_metric_rows(data: Dashboard) -> list[dict]:
    """The custom metrics table: each entity's metrics over the period, as it aggregates
    them."""
    return [
        {
            "entity": row.entity,
            "workspace": row.workspace,
            "name": row.name,
            "aggregation": row.aggregation,
            "value": _metric_value(row.value),
            "runs": f"{row.runs:,}",
        }
        for row in data.custom_metrics
    ]


def _metric_value(value: float) -> str:
    """A whole number with its thousands, else six significant digits."""
    return f"{round(value):,}" if value == round(value) else f"{value:,.6g}"
