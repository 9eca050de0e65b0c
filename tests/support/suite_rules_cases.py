"""Cases for tests/test_suite_rules.py, which runs them in a pytest of their own (this file's
name keeps the suite from collecting it): a skipped test, and background work a test leaves
behind."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from runs import background

POOL = ThreadPoolExecutor(max_workers=1)
ENDED: list[str] = []


@pytest.mark.skipif(True, reason="a reason given by a mark")
def test_skipped_by_a_mark():
    pass


def test_skipped_from_its_body():
    pytest.skip("a reason given from the body")


def test_it_leaves_work_running_and_a_hint_waiting():
    started = threading.Event()

    def slow_step() -> None:
        started.set()
        threading.Event().wait(0.5)  # a step under way when the test ends
        ENDED.append("step")

    background.submit(POOL, slow_step)
    background.later(3600.0, ENDED.append, "hint")  # a hint waiting on its timer
    assert started.wait(10)
    assert background.unfinished() == 2


def test_the_next_test_finds_the_step_ended_and_the_hint_dropped():
    assert background.unfinished() == 0
    assert ENDED == ["step"]
