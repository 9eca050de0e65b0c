"""A Celery worker's own hints (runs/executors.py): after the commit, a run goes to one of the
worker's own threads while it has steps to spare, to the broker when it is full or stopping."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction

from runs import executors
from runs.services import run_advance
from runs.tasks import advance_run


class Broker:
    """Stands in for runs.tasks.advance_run: records what would have been sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def delay(self, run_id: str) -> None:
        self.sent.append(run_id)

    def delay_on_commit(self, run_id: str) -> None:
        transaction.on_commit(lambda: self.sent.append(run_id))

    def apply_async_on_commit(self, args: tuple, **options: object) -> None:
        raise AssertionError("no delayed hint here")


@pytest.fixture
def worker(transactional_db, settings):
    """This process as a Celery worker of two slots, its runs advanced by `advanced`."""
    settings.HIERARCH_EXECUTOR = "celery"
    broker = Broker()
    advanced: list[str] = []
    release = threading.Event()

    def advance(run_id: str) -> None:
        advanced.append(run_id)
        release.wait(10)

    executors.executor_install(advance=advance, advance_task=broker)
    executors.worker_hints_install(2)
    yield broker, advanced, release
    release.set()
    executors.worker_hints_install(0)
    executors.executor_install(advance=run_advance, advance_task=advance_run)


def wait_for(condition, timeout: float = 5) -> bool:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if condition():
            return True
        done.wait(0.01)
    return condition()


def test_it_advances_a_run_on_its_own_thread_while_it_has_a_free_slot(worker):
    broker, advanced, release = worker
    executors.worker_task_started()  # the task whose step hints
    try:
        with transaction.atomic():
            executors.enqueue("child-1")
            assert advanced == []  # not before the commit
        assert wait_for(lambda: advanced == ["child-1"])
        assert broker.sent == []
        # Two steps in flight (the task and child-1) fill both slots: the next goes out.
        executors.enqueue("child-2")
        assert broker.sent == ["child-2"]
        assert advanced == ["child-1"]
    finally:
        executors.worker_task_ended()


def test_a_rolled_back_hint_goes_nowhere(worker):
    broker, advanced, _ = worker

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        executors.enqueue("rolled-back")
        raise Rollback
    threading.Event().wait(0.2)  # time for a thread to have taken it, had it been sent
    assert advanced == [] and broker.sent == []


def test_a_stopping_worker_sends_every_hint_to_the_broker(worker):
    broker, advanced, _ = worker
    executors.worker_hints_install(0)
    executors.enqueue("child-1")
    assert broker.sent == ["child-1"]
    assert advanced == []
