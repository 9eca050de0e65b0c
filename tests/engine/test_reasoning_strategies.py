"""REFLECTION and TREE_OF_THOUGHTS do what they say, on both stores: a reflecting step
critiques its draft against the entity's criteria and revises it when the critique asks;
a branching step makes several candidates and keeps the one a judge names. Every call is
one of the step's recorded calls, counted against its limits."""

from __future__ import annotations

from typing import Any

import pytest

from runs.engine.strategies import BRANCHES
from tests.support.worlds import World, io


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def thinker(world: World, mode: str, **logic_gate: Any) -> str:
    return world.add(
        "thinker",
        "SKILL",
        io_contract=io({"topic": "string"}, text="string"),
        logic_gate={"reasoning_config": {"reasoning_mode": mode}, **logic_gate},
    )


def by_purpose(world: World, run: str) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for call in world.call_log(run):
        found.setdefault(call.purpose, []).append(call)
    return found


# The offline model's critique revises owls and keeps tides: both ways are walked.
@pytest.mark.parametrize("topic", ["owls", "tides"])
def test_reflection_critiques_the_draft_and_revises_it_when_asked(world, topic):
    thinker(world, "REFLECTION")
    run = world.run("thinker", {"topic": topic})

    assert world.status(run) == "COMPLETED", world.error(run)
    calls = by_purpose(world, run)
    (draft,) = calls["THOUGHT"]
    (critique,) = calls["CRITIQUE"]
    assert "Critique the answer above against these criteria" in critique.prompt
    assert "it does the task it was given" in critique.prompt
    assert critique.parsed["verdict"] in ("keep", "revise")
    if critique.parsed["verdict"] == "revise":
        (revision,) = calls["REVISION"]
        for issue in critique.parsed["issues"]:
            assert issue in revision.prompt
        assert "Answer again, fixing them." in revision.prompt
        assert world.output(run) == revision.parsed
    else:
        assert "REVISION" not in calls
        assert world.output(run) == draft.parsed


def test_reflection_checks_against_the_review_criteria_when_there_are_some(world):
    review = {
        "enabled": False,
        "success_criteria": [
            {"criterion": "names one source", "validation_type": "REGEX", "validator": "source"}
        ],
    }
    thinker(world, "REFLECTION", review_mechanism=review)
    run = world.run("thinker", {"topic": "owls"})

    (critique,) = by_purpose(world, run)["CRITIQUE"]
    assert "- names one source" in critique.prompt


def test_tree_of_thoughts_keeps_the_candidate_the_judge_names(world):
    thinker(world, "TREE_OF_THOUGHTS")
    run = world.run("thinker", {"topic": "owls"})

    assert world.status(run) == "COMPLETED", world.error(run)
    calls = by_purpose(world, run)
    candidates = calls["CANDIDATE"]
    assert len(candidates) == BRANCHES
    for number in range(1, BRANCHES + 1):
        assert sum(f"approach {number} of {BRANCHES}" in c.prompt for c in candidates) == 1
    (judge,) = calls["JUDGE"]
    for candidate in candidates:
        assert candidate.parsed["text"] in judge.prompt
    best = judge.parsed["best"]
    chosen = next(c for c in candidates if f"approach {best} of {BRANCHES}" in c.prompt)
    assert world.output(run) == chosen.parsed


def test_each_call_of_a_strategy_counts_against_the_call_limit(world):
    thinker(world, "TREE_OF_THOUGHTS")
    world.edit(
        "thinker",
        "SKILL",
        io_contract=io({"topic": "string"}, text="string"),
        logic_gate={"reasoning_config": {"reasoning_mode": "TREE_OF_THOUGHTS"}},
        governance={"execution_limits": {"max_llm_calls": BRANCHES}},
    )
    run = world.run("thinker", {"topic": "owls"})

    assert world.status(run) in ("FAILED", "BLOCKED")
    code, message = world.error(run)
    assert "max_llm_calls" in message, (code, message)
    assert world.model_call_count(run) == BRANCHES  # the judge had no room


def test_chain_of_thought_stays_one_call(world):
    thinker(world, "CHAIN_OF_THOUGHT")
    run = world.run("thinker", {"topic": "owls"})
    assert [c.purpose for c in world.call_log(run)] == ["THOUGHT"]
