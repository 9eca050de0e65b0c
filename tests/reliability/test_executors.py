"""The executors' hints, in this process: sent after commit, delayed hints only for short
waits; and a Celery worker that boots without the model library."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from django.db import transaction

from runs import executors
from tests.reliability.processes import ROOT


def test_a_short_delayed_hint_reaches_the_inline_pool_after_the_delay(
    transactional_db, settings, monkeypatch
):
    settings.HIERARCH_EXECUTOR = "inline"
    submitted = threading.Event()
    hinted: list[tuple[str, float]] = []

    def submit(run_id: str) -> None:
        hinted.append((run_id, time.monotonic()))
        submitted.set()

    monkeypatch.setattr(executors, "_submit_inline", submit)
    sent = time.monotonic()
    executors.enqueue_at("run-1", 0.3)
    assert submitted.wait(5)
    assert hinted[0][0] == "run-1" and hinted[0][1] - sent >= 0.3


def test_a_long_delay_sends_no_hint_the_sweeper_finds_the_run(
    transactional_db, settings, monkeypatch
):
    settings.HIERARCH_EXECUTOR = "inline"
    monkeypatch.setattr(threading, "Timer", None)  # any timer would fail loudly
    executors.enqueue_at("run-1", executors.DELAYED_HINT_MAX_SECONDS + 1)


def test_a_hint_is_sent_only_when_the_transaction_commits(transactional_db, settings, monkeypatch):
    settings.HIERARCH_EXECUTOR = "inline"
    hinted: list[str] = []
    monkeypatch.setattr(executors, "_submit_inline", hinted.append)

    class Rollback(Exception):
        pass

    try:
        with transaction.atomic():
            executors.enqueue("rolled-back")
            raise Rollback
    except Rollback:
        pass
    with transaction.atomic():
        executors.enqueue("committed")
        assert hinted == []
    assert hinted == ["committed"]


def test_a_celery_worker_boots_without_importing_litellm():
    # What `celery -A config worker` imports before its first task: the app, Django, the tasks.
    code = (
        "import sys, django; from config.celery import app; django.setup(); "
        "app.loader.import_default_modules(); app.autodiscover_tasks(force=True); "
        "import runs.tasks; c = app.conf; "
        "print('litellm' in sys.modules, 'runs.tasks.advance_run' in app.tasks, "
        "c.task_acks_late, c.task_reject_on_worker_lost, c.worker_prefetch_multiplier, "
        "c.task_serializer, c.accept_content, "
        "c.beat_schedule['sweep-runs']['task'])"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "HIERARCH_EXECUTOR": "celery"}
    result = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().split(maxsplit=7) == [
        "False",
        "True",
        "True",
        "True",
        "1",
        "json",
        "['json']",
        "runs.tasks.sweep_runs",
    ]
