"""A draft-review loop that runs out of passes: `writer` (SKILL) drafts, then reviews, and
the review sends it back to the draft while the iteration is below `back_while`; it may
make two passes, so with the default it waits BLOCKED (MAX_PASSES_EXHAUSTED) after two."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from runs.models import Run
from runs.services import run_start
from tests.factories import EntityFactory
from tests.support.queued_runs import Driver
from tests.support.runs import step


def review_loop(workspace: Any, *, back_while: int = 3, max_iterations: int = 2) -> Any:
    review = step(2, "Review", "THOUGHT")
    review["exit_conditions"] = [
        {"condition": {"<": [{"var": "iteration"}, back_while]}, "next_step": 1}
    ]
    return EntityFactory(
        workspace=workspace,
        name="writer",
        type="SKILL",
        planning={
            "static_plan": {"enabled": True, "steps": [step(1, "Draft", "THOUGHT"), review]},
            "loop_control": {"max_iterations": max_iterations},
        },
    )


def out_of_passes(workspace: Any) -> tuple[Run, Driver]:
    """A run of `review_loop` driven until it runs out of passes (BLOCKED), and its driver."""
    driver = Driver()
    with transaction.atomic():
        run = run_start(entity=review_loop(workspace), input_data={})
    driver.queue.append(str(run.pk))
    driver.drain()
    run.refresh_from_db()
    assert (run.status, run.error_code) == ("BLOCKED", "MAX_PASSES_EXHAUSTED")
    return run, driver
