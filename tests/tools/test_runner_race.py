"""Workers racing on one record call, on PostgreSQL (SQLite serialises every writer)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction

from tests.factories import WorkspaceFactory
from tests.marks import postgresql_only
from tests.tools.conftest import invocation
from tools.models import RecordedRow
from tools.runner import RegistryToolRunner

pytestmark = [
    pytest.mark.django_db(transaction=True),
    postgresql_only(
        (
            "SQLite lets one writer in at a time, so there is no race to test; "
            "it runs on PostgreSQL (DATABASE_URL)"
        ),
    ),
]

WORKERS = 8


def _in_thread(function):
    def call(*args):
        try:
            return function(*args)
        finally:
            connection.close()

    return call


def test_workers_racing_on_one_key_write_one_row():
    workspace = WorkspaceFactory(slug="race")
    call = invocation("record", {"table": "t", "data": {"n": 1}}, workspace_id=workspace.pk)
    start = threading.Barrier(WORKERS)

    @_in_thread
    def worker(_: int):
        start.wait()
        return RegistryToolRunner().invoke(call)

    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(worker, range(WORKERS)))

    assert RecordedRow.objects.count() == 1
    assert sum(not result.replayed for result in results) == 1
    assert {result.output["id"] for result in results} == {RecordedRow.objects.get().pk}


def test_a_worker_waits_for_one_still_writing_and_returns_its_row():
    workspace = WorkspaceFactory(slug="race")
    call = invocation("record", {"table": "t", "data": {"n": 1}}, workspace_id=workspace.pk)
    written = threading.Event()

    @_in_thread
    def first():
        with transaction.atomic():
            result = RegistryToolRunner().invoke(call)
            written.set()
            time.sleep(0.3)  # the second worker's INSERT now waits on the unique key
        return result

    @_in_thread
    def second():
        written.wait(5)
        started = time.monotonic()
        result = RegistryToolRunner().invoke(call)
        return result, time.monotonic() - started

    with ThreadPoolExecutor(2) as pool:
        one, two = pool.submit(first), pool.submit(second)
        first_result, (second_result, waited) = one.result(), two.result()

    assert not first_result.replayed
    assert second_result.replayed
    assert second_result.output == first_result.output
    assert waited >= 0.2  # its INSERT waited for the first to commit, then found the row
    assert RecordedRow.objects.count() == 1


def test_a_key_whose_first_write_rolled_back_can_be_written_again():
    workspace = WorkspaceFactory(slug="race")
    call = invocation("record", {"table": "t", "data": {"n": 1}}, workspace_id=workspace.pk)

    with pytest.raises(RuntimeError), transaction.atomic():
        RegistryToolRunner().invoke(call)
        raise RuntimeError("the step's transaction failed after the call")

    assert not RegistryToolRunner().invoke(call).replayed
    assert RecordedRow.objects.count() == 1
