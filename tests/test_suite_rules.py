"""The rules tests/conftest.py sets for the whole suite: background work ends with its test,
threads and the test meet in the database without "database table is locked", and with
HIERARCH_TESTS_NO_SKIP=1 (CI on every service) a skipped test fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.db import connections

from entities.models import Workspace

ROOT = Path(__file__).resolve().parent.parent
CASES = "tests/support/suite_rules_cases.py"


def run_cases(**env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "HIERARCH_TESTS_NO_SKIP"}
    return subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs"]
        + ["-o", "python_files=suite_rules_cases.py", CASES],
        cwd=ROOT,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_work_a_test_left_to_threads_is_stopped_before_the_next_test():
    result = run_cases()

    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed, 2 skipped" in result.stdout, result.stdout
    assert "a reason given by a mark" in result.stdout
    assert "a reason given from the body" in result.stdout


def test_with_no_skips_required_a_skipped_test_fails_with_its_reason():
    result = run_cases(HIERARCH_TESTS_NO_SKIP="1")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "2 passed" in result.stdout and "skipped" not in result.stdout.splitlines()[-1]
    assert "skipped where nothing may be (HIERARCH_TESTS_NO_SKIP=1): a reason given by a mark" in (
        result.stdout
    )
    assert "(HIERARCH_TESTS_NO_SKIP=1): a reason given from the body" in result.stdout


@pytest.mark.django_db(transaction=True)
def test_threads_and_the_test_use_the_database_at_the_same_moment():
    """On pytest-django's shared in-memory SQLite database this failed at once with
    "database table is locked"; on the test file (WAL, as `make run`'s) writers queue."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            number = 0
            while not stop.is_set() and number < 200:
                number += 1
                Workspace.objects.create(name=f"W{number}", slug=f"w{number}")
        except BaseException as exc:  # reported by the test
            failures.append(exc)
        finally:
            connections.close_all()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(200):
            list(Workspace.objects.values_list("slug", flat=True))
            Workspace.objects.filter(slug="w1").update(name="First")
            if not writer.is_alive():
                break
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not failures, failures
    assert Workspace.objects.filter(slug__startswith="w").count() >= 1
