"""Summaries through the model, on both stores (runs/engine/summaries.py): a loop whose
iteration context is SUMMARIZED has its earlier passes summarised by a recorded model call,
once per pass at most (every N passes with summary_every_n_iterations), reused after a crash
and counted against the limits; a memory past its summarization_threshold folds its oldest
items into a summary item by a recorded call, before max_items applies. The real gateway
(offline model through litellm) answers every call."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from runs.engine.core import RunView
from runs.engine.ports import ModelCall, ModelError, ModelReply, ModelRequest, Record
from tests.support.runs import step
from tests.support.worlds import Call, StoreWrapper, World, io, limits

pytestmark = pytest.mark.smoke


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def looping(
    world: World,
    name: str = "writer",
    *,
    back_while: int,
    every: int | None = None,
    **sections: Any,
) -> str:
    """Draft, then Review, which jumps back to Draft while the iteration is below
    `back_while`: passes 1 to `back_while`, two THOUGHT calls each, SUMMARIZED context."""
    review = step(2, "Review", "THOUGHT")
    review["exit_conditions"] = [
        {"condition": {"<": [{"var": "iteration"}, back_while]}, "next_step": 1}
    ]
    return world.add(
        name,
        "SKILL",
        planning={
            "static_plan": {"enabled": True, "steps": [step(1, "Draft", "THOUGHT"), review]},
            "loop_control": {
                "max_iterations": back_while,
                "iteration_context_mode": "SUMMARIZED",
                "summary_every_n_iterations": every,
            },
        },
        **sections,
    )


def summaries_of(world: World, run: str) -> list[Call]:
    return [call for call in world.call_log(run) if call.purpose == "SUMMARY"]


def thought(world: World, run: str, name: str, iteration: int) -> Call:
    (found,) = [
        call
        for call in world.call_log(run)
        if call.purpose == "THOUGHT"
        and call.iteration == iteration
        and call.step.startswith(_step_key(name))
    ]
    return found


def _step_key(name: str) -> str:
    return {"Draft": "s1", "Review": "s2"}[name]


def heading(passes: int) -> str:
    """How a prompt names the summary of the first `passes` passes."""
    return f"Summary of iterations 1-{passes}" if passes > 1 else "Summary of iteration 1"


# -- SUMMARIZED: the earlier passes ----------------------------------------------------------


def test_summarized_calls_the_model_once_a_pass_from_the_second_and_the_next_prompt_shows_it(
    world,
):
    looping(world, back_while=4)
    run = world.run("writer", {})

    assert world.status(run) == "COMPLETED", world.error(run)
    calls = world.call_log(run)
    assert [(c.purpose, c.iteration) for c in calls] == [
        ("THOUGHT", 1),
        ("THOUGHT", 1),
        ("SUMMARY", 2),
        ("THOUGHT", 2),
        ("THOUGHT", 2),
        ("SUMMARY", 3),
        ("THOUGHT", 3),
        ("THOUGHT", 3),
        ("SUMMARY", 4),
        ("THOUGHT", 4),
        ("THOUGHT", 4),
    ]
    summaries = summaries_of(world, run)
    assert {c.step for c in summaries} == {"summary"}
    for call in summaries:
        assert "Summarise these earlier iterations for the next one" in call.prompt
        text = call.parsed["summary"]
        assert text
        # Both THOUGHT steps of the pass read the pass's one summary.
        for name in ("Draft", "Review"):
            prompt = thought(world, run, name, call.iteration).prompt
            assert f"{heading(call.iteration - 1)}: {text}" in prompt
    # Each summary takes in the one before it.
    assert summaries[0].parsed["summary"] in summaries[1].prompt
    # The trace shows each as a call of its own step record.
    assert [(name, it) for name, it in world.step_passes(run) if name == "Summary"] == [
        ("Summary", 2),
        ("Summary", 3),
        ("Summary", 4),
    ]
    assert [e["step"] for e in world.events_of(run, "llm.call")].count("Summary") == 3
    assert world.call_counts(run) == (11, 0)


def test_summary_every_two_iterations_summarises_every_other_pass(world):
    looping(world, back_while=6, every=2)
    run = world.run("writer", {})

    assert world.status(run) == "COMPLETED", world.error(run)
    summaries = summaries_of(world, run)
    # Once two passes gathered since the last summary: before passes 3 and 5.
    assert [c.iteration for c in summaries] == [3, 5]
    # Pass 2 sees pass 1 as it was; pass 4 the summary of 1-2 and pass 3 verbatim.
    second = thought(world, run, "Draft", 2).prompt
    assert "Iteration 1: " in second and "Summary of iteration" not in second
    fourth = thought(world, run, "Draft", 4).prompt
    first_summary = summaries[0].parsed["summary"]
    assert f"Summary of iterations 1-2: {first_summary}" in fourth
    assert "Iteration 3: " in fourth
    sixth = thought(world, run, "Draft", 6).prompt
    assert f"Summary of iterations 1-4: {summaries[1].parsed['summary']}" in sixth
    assert "Iteration 5: " in sixth and first_summary not in sixth


class WorkerDied(BaseException):
    """The worker process was killed: not an Exception, so the engine cannot record it."""


class _DiesAfterTheSummary(StoreWrapper):
    """The worker dies the moment the summary call's record is committed: it lets go of
    nothing, its lease is left behind."""

    def record(self, run: RunView, record: Record) -> RunView:
        written = self._store.record(run, record)
        if isinstance(record, ModelCall) and record.request.purpose == "SUMMARY":
            raise WorkerDied(run.id)
        return written

    def release(self, run: RunView) -> None:
        pass  # a dead worker releases nothing


def test_a_crash_after_the_summary_returned_does_not_pay_it_again(world):
    looping(world, back_while=3)
    run = world.start("writer", {})
    world.wrap_next = _DiesAfterTheSummary
    with pytest.raises(WorkerDied):
        world.advance_all()
    assert [c.iteration for c in summaries_of(world, run)] == [2]

    world.let_time_pass(world.lease_seconds + 1)
    world.advance(run)
    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    assert [c.iteration for c in summaries_of(world, run)] == [2, 3]  # pass 2's once
    assert world.model_call_count(run) == 8
    assert world.call_counts(run) == (8, 0)
    summary_events = [e for e in world.events_of(run, "llm.call") if e["step"] == "Summary"]
    assert len(summary_events) == 2
    text = summaries_of(world, run)[0].parsed["summary"]
    assert f"Summary of iteration 1: {text}" in thought(world, run, "Draft", 2).prompt


class _FailsFirstSummary:
    """The real gateway, but the first summary call fails as a provider outage would."""

    def __init__(self, model: Any):
        self.model, self.failed = model, False

    def complete(self, request: ModelRequest) -> ModelReply:
        if request.purpose == "SUMMARY" and not self.failed:
            self.failed = True
            raise ModelError("503 Service Unavailable", retryable=True)
        return self.model.complete(request)

    def count_tokens(self, model: str, text: str) -> int:
        return self.model.count_tokens(model, text)

    def estimate_cost(self, request: ModelRequest) -> Decimal:
        return self.model.estimate_cost(request)


def test_a_failed_summary_call_fails_the_step_and_the_retry_policy_tries_again(world):
    looping(
        world,
        back_while=2,
        logic_gate={"retry_policy": {"max_retries": 1, "backoff_strategy": "LINEAR"}},
    )
    world.model = _FailsFirstSummary(world.model)
    run = world.run("writer", {})

    assert world.status(run) == "RUNNING"
    assert ("Summary", 1, "FAILED") in world.step_statuses(run)
    draft = [s for s in world.step_statuses(run) if s[0] == "Draft"]
    assert draft == [("Draft", 1, "COMPLETED"), ("Draft", 1, "FAILED")]
    (retry,) = world.events_of(run, "step.retry")
    assert (retry["step"], retry["attempt"]) == ("Draft", 2)
    (failed,) = [e for e in world.events_of(run, "step.finished") if e["status"] == "FAILED"]
    assert failed["error"] == "LLM_ERROR"

    world.let_time_pass(1.1)
    world.advance(run)
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    statuses = world.step_statuses(run)
    assert ("Summary", 2, "COMPLETED") in statuses and ("Draft", 2, "COMPLETED") in statuses
    (summary,) = summaries_of(world, run)
    assert (summary.iteration, summary.attempt) == (2, 2)


def test_a_failed_summary_call_past_the_retries_fails_the_run_saying_so(world):
    looping(world, back_while=2, logic_gate={"retry_policy": {"max_retries": 0}})
    world.model = _FailsFirstSummary(world.model)
    run = world.run("writer", {})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "LLM_ERROR"
    assert "summarising the earlier iterations failed: 503 Service Unavailable" in message


def test_max_llm_calls_counts_the_summary_call(world):
    looping(world, back_while=3, governance=limits(max_llm_calls=2))
    run = world.run("writer", {})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "LIMIT_EXCEEDED"
    assert "writer reached max_llm_calls 2" in message
    assert world.model_call_count(run) == 2  # the summary was never asked for
    statuses = world.step_statuses(run)
    assert ("Summary", 1, "FAILED") in statuses and statuses[-1] == ("Draft", 1, "FAILED")


class _EstimatesSeen:
    """The real gateway, noting what each call was estimated to cost at most."""

    def __init__(self, model: Any):
        self.model, self.estimates = model, []

    def complete(self, request: ModelRequest) -> ModelReply:
        return self.model.complete(request)

    def count_tokens(self, model: str, text: str) -> int:
        return self.model.count_tokens(model, text)

    def estimate_cost(self, request: ModelRequest) -> Decimal:
        self.estimates.append(self.model.estimate_cost(request))
        return self.estimates[-1]


def test_a_budget_without_room_for_the_summary_blocks_the_run_before_it(world):
    # One THOUGHT step that goes back to itself: a budget of exactly the first call's
    # estimate pays pass 1 and leaves no room for pass 2's summary.
    again = step(1, "Guess", "THOUGHT")
    again["exit_conditions"] = [{"condition": {"<": [{"var": "iteration"}, 3]}, "next_step": 1}]
    planning = {
        "static_plan": {"enabled": True, "steps": [again]},
        "loop_control": {"max_iterations": 3, "iteration_context_mode": "SUMMARIZED"},
    }
    world.model = _EstimatesSeen(world.model)
    world.add("guesser", planning=planning, max_cost=1.0)
    probe = world.run("guesser", {})
    assert world.status(probe) == "COMPLETED", world.error(probe)
    first_estimate = world.model.estimates[0]

    world.edit("guesser", planning=planning, max_cost=float(first_estimate))
    run = world.run("guesser", {})

    assert world.status(run) == "BLOCKED", world.error(run)
    code, message = world.error(run)
    assert code == "BUDGET_EXHAUSTED"
    assert message.startswith("budget_exhausted: guesser has spent $")
    assert [c.purpose for c in world.call_log(run)] == ["THOUGHT"]
    assert ("Summary", 1, "WAITING") in world.step_statuses(run)
    assert world.events_of(run, "run.status")[-1]["reason"] == "budget_exhausted"
    _budget, reserved, used = world.budget(run)
    assert reserved == 0 and used > 0


# -- memory: summarization_threshold -----------------------------------------------------------


def remembering(world: World, name: str = "diarist", **retention: Any) -> str:
    return world.add(
        name,
        io_contract=io({"topic": "string"}, note="string"),
        capabilities={
            "tools": [],
            "memory": {
                "enabled": True,
                "scope": "ENTITY",
                "access_pattern": "FULL",
                "retention_policy": retention,
            },
        },
    )


def topics(contents: list[Any]) -> list[str]:
    return [c["input"]["topic"] if "input" in c else "summary" for c in contents]


def test_memory_past_its_threshold_folds_the_oldest_items_into_a_recorded_summary(world):
    remembering(world, summarization_threshold=3)
    runs = [world.run("diarist", {"topic": f"topic-{n}"}) for n in range(1, 5)]
    for run in runs:
        assert world.status(run) == "COMPLETED", world.error(run)
    assert [len(summaries_of(world, run)) for run in runs] == [0, 0, 0, 1]

    # Four items, threshold three: the two oldest went into one summary item, oldest.
    contents = world.memory_contents()
    assert topics(contents) == ["topic-4", "topic-3", "summary"]
    (fold,) = summaries_of(world, runs[3])
    assert fold.step == "memory_summary"
    assert "Summarise these earlier memory items" in fold.prompt
    assert "topic-1" in fold.prompt and "topic-2" in fold.prompt and "topic-3" not in fold.prompt
    text = fold.parsed["summary"]
    assert contents[-1] == {"summary_of_earlier_items": text, "items": 2}
    assert world.events_of(runs[3], "memory.summarized") == [{"items": 2, "kept": 2}]
    assert ("Memory summary", 1, "COMPLETED") in world.step_statuses(runs[3])
    assert world.call_counts(runs[3]) == (2, 0)  # the fold is the run's call too

    # The next run reads the summary and the recent items, then folds its oldest again.
    fifth = world.run("diarist", {"topic": "topic-5"})
    prompt = next(c.prompt for c in world.call_log(fifth) if c.purpose == "THOUGHT")
    assert f"Summary of earlier items: {text}" in prompt
    recent = prompt.replace(text, "")  # the offline summary quotes what it folds
    assert "topic-3" in recent and "topic-4" in recent and "topic-1" not in recent
    (again,) = summaries_of(world, fifth)
    assert f"Summary of earlier items: {text}" in again.prompt and "topic-3" in again.prompt
    contents = world.memory_contents()
    assert topics(contents) == ["topic-5", "topic-4", "summary"]
    assert contents[-1]["items"] == 3


def test_memory_summarises_before_max_items_applies(world):
    # Were max_items applied first, the memory would hold topics 2-4 and fold nothing.
    remembering(world, summarization_threshold=3, max_items=3)
    for n in range(1, 5):
        world.run("diarist", {"topic": f"topic-{n}"})
    assert topics(world.memory_contents()) == ["topic-4", "topic-3", "summary"]


def test_expired_items_are_neither_counted_nor_folded(world):
    remembering(world, summarization_threshold=2, ttl_seconds=3600)
    first = world.run("diarist", {"topic": "topic-1"})
    world.expire_memory_of(first)
    second = world.run("diarist", {"topic": "topic-2"})
    third = world.run("diarist", {"topic": "topic-3"})
    assert not summaries_of(world, second) and not summaries_of(world, third)  # two live

    fourth = world.run("diarist", {"topic": "topic-4"})
    (fold,) = summaries_of(world, fourth)
    assert "topic-2" in fold.prompt and "topic-3" in fold.prompt
    assert "topic-1" not in fold.prompt


def test_a_fold_with_no_room_leaves_the_memory_and_the_run_completes_saying_so(world):
    remembering(world, summarization_threshold=2)
    world.edit(
        "diarist",
        io_contract=io({"topic": "string"}, note="string"),
        capabilities={
            "tools": [],
            "memory": {
                "enabled": True,
                "scope": "ENTITY",
                "access_pattern": "FULL",
                "retention_policy": {"summarization_threshold": 2},
            },
        },
        governance=limits(max_llm_calls=1),
    )
    runs = [world.run("diarist", {"topic": f"topic-{n}"}) for n in range(1, 4)]

    assert [world.status(run) for run in runs] == ["COMPLETED"] * 3
    (skipped,) = world.events_of(runs[2], "memory.not_summarized")
    assert "reached max_llm_calls 1" in skipped["reason"]
    assert ("Memory summary", 1, "FAILED") in world.step_statuses(runs[2])
    assert not summaries_of(world, runs[2])
    assert world.call_counts(runs[2]) == (1, 0)
    assert topics(world.memory_contents()) == ["topic-3", "topic-2", "topic-1"]


def test_a_crash_after_the_fold_returned_does_not_pay_it_again_nor_remember_twice(world):
    remembering(world, summarization_threshold=2)
    world.run("diarist", {"topic": "topic-1"})
    world.run("diarist", {"topic": "topic-2"})
    run = world.start("diarist", {"topic": "topic-3"})
    world.wrap_next = _DiesAfterTheSummary
    with pytest.raises(WorkerDied):
        world.advance_all()
    assert len(summaries_of(world, run)) == 1

    world.let_time_pass(world.lease_seconds + 1)
    world.advance(run)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert len(summaries_of(world, run)) == 1
    assert world.call_counts(run) == (2, 0)
    assert topics(world.memory_contents()) == ["topic-3", "summary"]
