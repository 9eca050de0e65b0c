"""Jumps and loops, on both stores: an exit condition may jump back to any step (the next
pass of the plan starts there, its iteration one more), passes are bounded by the loop's
max_iterations, and a loop that runs out of passes before it is done does what its
`on_exhausted` says: BLOCK (the default; a person gives it more passes and it goes on),
COMPLETE or FAIL. Whatever the plan's shape, no run is left without someone to act next."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.runs import step
from tests.support.worlds import World, io

pytestmark = pytest.mark.smoke

SETTLED = {"COMPLETED", "FAILED", "CANCELLED", "BLOCKED", "PAUSED"}


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def exits(to: Any, condition: Any) -> list[dict]:
    return [{"condition": condition, "next_step": to}]


def while_iteration_below(n: int) -> dict:
    return {"<": [{"var": "iteration"}, n]}


# A condition that reads the state yet always holds ("the review always fails").
ALWAYS = {">=": [{"var": "iteration"}, 1]}


def draft_and_review(
    world: World, name: str = "writer", *, back_while: int = 3, **loop_control: Any
) -> str:
    """Draft, then Review, which jumps back to Draft while the iteration is below
    `back_while` (as "go back while the review fails")."""
    review = step(2, "Review", "THOUGHT")
    review["exit_conditions"] = exits(1, while_iteration_below(back_while))
    return world.add(
        name,
        "SKILL",
        planning={
            "static_plan": {"enabled": True, "steps": [step(1, "Draft", "THOUGHT"), review]},
            "loop_control": loop_control,
        },
    )


def passes_of(world: World, run: str) -> list[tuple[str, int]]:
    return world.step_passes(run)


def assert_settled(world: World, run: str) -> None:
    """Every run of the trace has ended or waits on a person, once the queue is empty."""
    for each in world.trace_runs(world.trace(run)):
        status = world.status(each)
        waits_on_a_child = status == "WAITING" and any(
            world.status(child) in ("BLOCKED", "PAUSED") or world.status(child) == "WAITING"
            for child in world.children(each)
        )
        assert status in SETTLED or waits_on_a_child, (world.entity_name(each), status)


def test_a_draft_review_loop_goes_back_until_its_condition_stops_holding(world):
    draft_and_review(world, back_while=3, max_iterations=5)
    run = world.run("writer", {})

    assert world.status(run) == "COMPLETED", world.error(run)
    assert passes_of(world, run) == [
        ("Draft", 1),
        ("Review", 1),
        ("Draft", 2),
        ("Review", 2),
        ("Draft", 3),
        ("Review", 3),
    ]
    nexts = world.events_of(run, "loop.next")
    assert [(e["iteration"], e["jump_from"], e["to"]) for e in nexts] == [
        (2, "Review", "Draft"),
        (3, "Review", "Draft"),
    ]
    assert world.model_call_count(run) == 6


def test_a_step_may_jump_back_to_itself(world):
    again = step(1, "Guess", "THOUGHT")
    again["exit_conditions"] = exits(1, while_iteration_below(4))
    world.add(
        "guesser",
        "SKILL",
        planning={
            "static_plan": {"enabled": True, "steps": [again, step(2, "Tell", "THOUGHT")]},
            "loop_control": {"max_iterations": 10},
        },
    )
    run = world.run("guesser", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    assert passes_of(world, run) == [
        ("Guess", 1),
        ("Guess", 2),
        ("Guess", 3),
        ("Guess", 4),
        ("Tell", 4),
    ]


def test_out_of_passes_the_run_blocks_keeps_its_output_and_goes_on_with_more(world):
    draft_and_review(world, back_while=4, max_iterations=2)
    run = world.run("writer", {})

    assert world.status(run) == "BLOCKED"
    code, message = world.error(run)
    assert code == "MAX_PASSES_EXHAUSTED"
    assert message == (
        "max_passes_exhausted: 2 of 2 passes ran and step 'Review' still jumps back to 'Draft'"
    )
    assert "text" in world.output(run)  # the last pass's output, kept
    (stopped,) = world.events_of(run, "loop.stopped")
    assert (stopped["iteration"], stopped["then"]) == (2, "BLOCK")
    assert_settled(world, run)

    # Given one more pass, the run goes on at Draft in pass 3, and blocks again after it:
    # the review still sends it back (iteration 3 < 4).
    world.grant_passes(run, 1)
    world.advance_all()
    assert world.status(run) == "BLOCKED"
    assert world.error(run)[1].startswith("max_passes_exhausted: 3 of 3 passes ran")
    assert len(world.events_of(run, "loop.stopped")) == 2

    # Two more: pass 4's review lets it through.
    world.grant_passes(run, 2)
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert passes_of(world, run)[-2:] == [("Draft", 4), ("Review", 4)]
    assert world.model_call_count(run) == 8


@pytest.mark.parametrize(
    ("on_exhausted", "status"), [("COMPLETE", "COMPLETED"), ("FAIL", "FAILED")]
)
def test_out_of_passes_the_run_ends_as_on_exhausted_says(world, on_exhausted, status):
    draft_and_review(world, back_while=9, max_iterations=2, on_exhausted=on_exhausted)
    run = world.run("writer", {})
    assert world.status(run) == status
    assert "text" in world.output(run)
    if status == "FAILED":
        assert world.error(run)[0] == "MAX_PASSES_EXHAUSTED"


def test_a_loop_that_does_not_converge_blocks_and_goes_on_when_given_passes(world):
    world.add(
        "scorer",
        io_contract=io(None, score="number"),
        planning={
            "loop_control": {
                "max_iterations": 2,
                # The offline model's numbers are never this high: the loop cannot converge.
                "convergence_criteria": [{"metric": "score", "threshold": 1e9, "operator": "GTE"}],
            }
        },
    )
    run = world.run("scorer", {})
    assert world.status(run) == "BLOCKED"
    assert world.error(run)[0] == "MAX_PASSES_EXHAUSTED"
    assert "its convergence criteria were not met: score is" in world.error(run)[1]
    assert world.model_call_count(run) == 2

    world.grant_passes(run, 1)
    world.advance_all()
    assert world.status(run) == "BLOCKED"
    assert world.model_call_count(run) == 3  # one more pass, from the first step


def test_a_child_step_jumping_back_starts_its_children_again_in_the_next_pass(world):
    world.add("fetch", io_contract=io(None, found="boolean"))
    world.add("check", io_contract=io(None, fine="boolean"))
    check = step(2, "Check", "CHILD_ENTITY_INVOCATION", entity_id="check")
    check["exit_conditions"] = exits(1, while_iteration_below(2))
    world.add(
        "collector",
        "AGENT",
        children=["fetch", "check"],
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [step(1, "Fetch", "CHILD_ENTITY_INVOCATION", entity_id="fetch"), check],
            },
            "loop_control": {"max_iterations": 3},
        },
    )
    run = world.run("collector", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    assert [world.entity_name(child) for child in world.children(run)] == [
        "fetch",
        "check",
        "fetch",
        "check",
    ]
    assert all(world.status(child) == "COMPLETED" for child in world.children(run))


# Every shape of plan settles: forward, backward, END, ESCALATE, inside parallel groups.
SHAPES: dict[str, tuple[list[dict], dict]] = {}
ENDS = {
    "straight": "COMPLETED",
    "forward": "COMPLETED",
    "end": "COMPLETED",
    "escalate": "PAUSED",
    "backward": "COMPLETED",
    "backward forever, blocks": "BLOCKED",
    "backward forever, completes": "COMPLETED",
    "backward forever, fails": "FAILED",
    "backward, no limit of its own": "BLOCKED",
}


def _shape(name: str, loop_control: dict | None = None, **exits_at: Any):
    steps = [step(i, f"S{i}", "THOUGHT") for i in (1, 2, 3)]
    for order, (to, condition) in exits_at.items():
        steps[int(order[1:]) - 1]["exit_conditions"] = exits(to, condition)
    SHAPES[name] = (steps, loop_control or {})


_shape("straight")
_shape("forward", s1=(3, True))
_shape("end", s1=("END", True))
_shape("escalate", s2=("ESCALATE", True))
_shape("backward", {"max_iterations": 3}, s3=(1, while_iteration_below(3)))
_shape("backward forever, blocks", {"max_iterations": 3}, s3=(2, ALWAYS))
_shape(
    "backward forever, completes", {"max_iterations": 2, "on_exhausted": "COMPLETE"}, s2=(1, ALWAYS)
)
_shape("backward forever, fails", {"max_iterations": 2, "on_exhausted": "FAIL"}, s3=(3, ALWAYS))
_shape("backward, no limit of its own", {"max_iterations": None}, s2=(1, ALWAYS))


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_plan_shape_settles(world, shape):
    steps, loop_control = SHAPES[shape]
    world.add(
        "shaped",
        "SKILL",
        planning={"static_plan": {"enabled": True, "steps": steps}, "loop_control": loop_control},
    )
    run = world.run("shaped", {})
    assert_settled(world, run)
    assert world.status(run) == ENDS[shape], world.error(run)


@pytest.mark.parametrize("back", [False, True])
def test_a_parallel_group_with_an_exit_settles(world, back):
    world.add("left", io_contract=io(None, ok="boolean"))
    world.add("right", io_contract=io(None, ok="boolean"))
    world.add("after", io_contract=io(None, ok="boolean"))
    right = step(2, "Right", "CHILD_ENTITY_INVOCATION", entity_id="right")
    right["exit_conditions"] = exits(1 if back else "END", while_iteration_below(2))
    world.add(
        "fan",
        "AGENT",
        children=[
            {"child_id": "left", "relationship": "PARALLEL"},
            {"child_id": "right", "relationship": "PARALLEL"},
            "after",
        ],
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [
                    step(1, "Left", "CHILD_ENTITY_INVOCATION", entity_id="left"),
                    right,
                    step(3, "After", "CHILD_ENTITY_INVOCATION", entity_id="after"),
                ],
            },
            "loop_control": {"max_iterations": 3},
        },
    )
    run = world.run("fan", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    assert_settled(world, run)
    names = sorted(world.entity_name(child) for child in world.children(run))
    assert names == (["after", "left", "left", "right", "right"] if back else ["left", "right"])
