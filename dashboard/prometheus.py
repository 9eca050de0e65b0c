"""What `/metrics` tells Prometheus about the whole instance, read from the database when it
is scraped (so every web process answers the same, with no multiprocess mode).

Instance-wide figures for the people who operate Hierarch, by workspace at most: no entity,
run or person is ever a label (their names are the workspaces' business, and a label per run
would grow without bound). Three queries a scrape, whatever the number of runs:

- runs by workspace and status, with the model calls, tool calls, tokens and cost of the root
  runs (a root run's counters hold its descendants', so roots alone count each call once);
- the queue: runs PENDING or RUNNING that are due now (no wake time ahead of them);
- the workspaces' slugs, for the labels.

Workers: with the Celery executor, the workers that answer a ping within `PING_SECONDS`
(Celery's public control API); with the inline executor, the thread pool's size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from celery import current_app
from django.conf import settings
from django.db.models import Count, Q, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from entities.models import Workspace
from runs.models import Run, RunStatus

log = logging.getLogger(__name__)

PING_SECONDS = 0.5
ROOT = Q(parent__isnull=True)


class HierarchCollector(Collector):
    """The instance's figures at scrape time (see the module's docstring)."""

    def collect(self) -> Iterator[Metric]:
        yield from self._runs()
        yield self._queue()
        yield self._workers()

    def _runs(self) -> Iterator[Metric]:
        runs = GaugeMetricFamily(
            "hierarch_runs", "Runs by workspace and status now", labels=["workspace", "status"]
        )
        totals = {
            "llm_calls": CounterMetricFamily(
                "hierarch_model_calls", "Model calls made by runs", labels=["workspace"]
            ),
            "tool_calls": CounterMetricFamily(
                "hierarch_tool_calls", "Tool calls made by runs", labels=["workspace"]
            ),
            "tokens": CounterMetricFamily(
                "hierarch_tokens", "Model tokens used by runs", labels=["workspace"]
            ),
            "cost": CounterMetricFamily(
                "hierarch_cost_usd",
                "Cost of runs' model calls, USD",
                labels=["workspace"],
            ),
        }
        slugs = dict(Workspace.objects.values_list("pk", "slug"))
        sums: dict[str, dict[str, float]] = {name: {} for name in totals}
        for row in (
            Run.objects.values("workspace_id", "status")
            .annotate(
                n=Count("pk"),
                llm_calls=Sum("llm_calls", filter=ROOT),
                tool_calls=Sum("tool_calls", filter=ROOT),
                tokens=Sum("total_tokens", filter=ROOT),
                cost=Sum("total_cost_usd", filter=ROOT),
            )
            .order_by()
        ):
            workspace = slugs.get(row["workspace_id"], str(row["workspace_id"]))
            runs.add_metric([workspace, row["status"]], row["n"])
            for name in totals:
                sums[name][workspace] = sums[name].get(workspace, 0.0) + float(row[name] or 0)
        yield runs
        for name, family in totals.items():
            for workspace, value in sorted(sums[name].items()):
                family.add_metric([workspace], value)
            yield family

    @staticmethod
    def _queue() -> Metric:
        now = timezone.now()
        due = Run.objects.filter(
            Q(wake_at__isnull=True) | Q(wake_at__lte=now),
            status__in=[RunStatus.PENDING, RunStatus.RUNNING],
        ).count()
        return GaugeMetricFamily(
            "hierarch_queue_depth", "Runs PENDING or RUNNING that are due now", value=due
        )

    @staticmethod
    def _workers() -> Metric:
        executor = settings.HIERARCH_EXECUTOR
        family = GaugeMetricFamily(
            "hierarch_workers",
            "Celery workers that answered a ping, or the inline executor's threads",
            labels=["executor"],
        )
        family.add_metric([executor], _celery_workers() if executor == "celery" else _threads())
        return family


def _celery_workers() -> int:
    try:
        return len(current_app.control.ping(timeout=PING_SECONDS) or [])
    except Exception:  # a broker down answers no worker; the scrape still answers
        log.warning("no answer from the Celery broker to count workers", exc_info=True)
        return 0


def _threads() -> int:
    threads: Any = settings.HIERARCH_ENGINE["INLINE_WORKERS"]
    return int(threads)
