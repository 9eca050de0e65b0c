"""One worker started as the README deploys it keeps many model calls in flight while its
database connections stay within its pool (DB_POOL_MAX_SIZE), as pg_stat_activity sees them:
a thread waiting on a model holds none."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection

from runs.models import LLMCall, Run
from runs.services import run_start
from tests.reliability.hierarchies import action, parent, record, thought
from tests.reliability.processes import wait_for_the_end
from tools.models import RecordedRow

pytestmark = pytest.mark.reliability

POOL_MAX = 3
CHILDREN = 16
LATENCY_MS = 1500
APP = "hierarch-pool-test"


class Sampler:
    """The most connections the worker holds at once (its application_name), every 10 ms."""

    def __init__(self) -> None:
        params = connection.get_connection_params()
        params.pop("pool", None)
        self.conn = psycopg.connect(**params, autocommit=True)
        self.peak = 0
        self.samples = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        while not self.done.wait(0.01):
            (held,) = self.conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APP]
            ).fetchone()
            self.peak = max(self.peak, held)
            self.samples += 1

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=5)
        self.conn.close()


def in_flight_at_most(calls: list[LLMCall]) -> int:
    edges = []
    for call in calls:
        edges += [
            (call.timestamp - timedelta(milliseconds=call.latency_ms), 1),
            (call.timestamp, -1),
        ]
    peak = now = 0
    for _, step in sorted(edges):
        now += step
        peak = max(peak, now)
    return peak


def test_a_wide_parallel_run_on_one_worker_stays_within_the_pool(processes, workspace):
    names = [f"leaf{i}" for i in range(CHILDREN)]
    for name in names:
        action(workspace, name, thought(1, "Think"), record(2, name))
    wide = parent(workspace, "wide", *names, relationship="PARALLEL")
    processes.worker(
        "many",
        concurrency=CHILDREN * 2,
        DB_POOL_MAX_SIZE=str(POOL_MAX),
        DB_POOL_MIN_SIZE="1",
        HIERARCH_OFFLINE_LATENCY_MS=str(LATENCY_MS),
        PGAPPNAME=APP,
    )
    sampler = Sampler()
    try:
        run = run_start(entity=wide, input_data={"n": 1})
        run = wait_for_the_end(run, processes, timeout=90)
    finally:
        sampler.stop()

    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    assert Run.objects.filter(parent=run, status="COMPLETED").count() == CHILDREN
    assert RecordedRow.objects.count() == CHILDREN  # each side effect once
    assert sampler.samples > 50
    assert 1 <= sampler.peak <= POOL_MAX, f"the worker held {sampler.peak} connections"
    # The model calls overlapped far beyond the pool's size: a waiting thread held none.
    calls = list(LLMCall.objects.filter(run__parent=run))
    assert len(calls) == CHILDREN
    assert in_flight_at_most(calls) >= CHILDREN // 2, in_flight_at_most(calls)
