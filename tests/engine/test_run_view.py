"""The engine's view of a run is frozen data: every change is a new view."""

from __future__ import annotations

import dataclasses

import pytest

from runs.engine.state import Events, RunView, StepRecord, take_pending

pytestmark = pytest.mark.smoke


def a_view(**fields: object) -> RunView:
    defaults: dict[str, object] = {
        "id": "run-1",
        "trace_id": "run-1",
        "workspace_id": 1,
        "definition": {},
        "status": "RUNNING",
        "input": {"q": 1},
        "state": {"a": 1},
        "plan": [],
        "cursor": 0,
        "iteration": 1,
        "depth": 0,
        "parent_id": None,
    }
    return RunView(**{**defaults, **fields})


def test_a_view_cannot_be_changed_in_place():
    view = a_view()

    with pytest.raises(dataclasses.FrozenInstanceError):
        view.cursor = 1


def test_a_change_is_a_new_view_and_leaves_the_old_one_as_it_was():
    view = a_view()

    moved = view.changed(cursor=2, attempt=3)

    assert (moved.cursor, moved.attempt, moved.state) == (2, 3, {"a": 1})
    assert (view.cursor, view.attempt) == (0, 1)
    assert moved == dataclasses.replace(view, cursor=2, attempt=3)


def test_a_change_of_a_field_the_view_does_not_have_is_refused():
    with pytest.raises(TypeError, match="curser"):
        a_view().changed(curser=2)


def test_state_changes_build_a_new_dict():
    view = a_view()

    changed = view.with_state(b=2).without_state("a")

    assert changed.state == {"b": 2}
    assert view.state == {"a": 1}


def test_buffered_records_are_taken_by_a_write_without_touching_the_view():
    step = StepRecord("s", 0, "S", "THOUGHT", "COMPLETED", 1)
    view = a_view().buffered([step], [("step.finished", {"step": "S"})]).noted("x", y=1)

    taken, steps, events = take_pending(view, [], [("run.status", {})])

    assert steps == [step]
    assert [kind for kind, _ in events] == ["step.finished", "x", "run.status"]
    assert (taken.pending_steps, taken.pending_events) == ([], Events())
    assert len(view.pending_steps) == 1 and len(view.pending_events.items) == 2
