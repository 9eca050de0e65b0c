"""A step's record is frozen data: its outcome is a new record, the old one stays as it was."""

from __future__ import annotations

import dataclasses

import pytest

from runs.engine.state import StepRecord

pytestmark = pytest.mark.smoke


def a_record() -> StepRecord:
    return StepRecord("s", 2, "S", "TOOL_CALL", "RUNNING", 1, attempt=2, started_at="t0")


def test_a_record_cannot_be_changed_in_place():
    record = a_record()

    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = "COMPLETED"


def test_a_change_is_a_new_record_and_leaves_the_old_one_as_it_was():
    record = a_record()

    moved = record.changed(status="WAITING", attempt=3)

    assert (moved.status, moved.attempt, moved.key, moved.started_at) == ("WAITING", 3, "s", "t0")
    assert (record.status, record.attempt) == ("RUNNING", 2)
    assert moved == dataclasses.replace(record, status="WAITING", attempt=3)


def test_a_change_of_a_field_the_record_does_not_have_is_refused():
    with pytest.raises(TypeError, match="approved_by"):
        a_record().changed(approved_by="bob")


def test_the_named_changes_set_their_fields_only():
    record = a_record()

    given = record.with_input({"q": 1})
    done = given.completed({"a": 2})
    failed = given.failed("TOOL_ERROR", "it broke")

    assert given == dataclasses.replace(record, input={"q": 1})
    assert done == dataclasses.replace(given, status="COMPLETED", output={"a": 2})
    assert failed == dataclasses.replace(
        given, status="FAILED", error_code="TOOL_ERROR", error_message="it broke"
    )
    assert record == a_record()


def test_a_waiting_record_says_why_or_keeps_the_failure_it_waits_after():
    failed = a_record().failed("RATE_LIMITED", "too many calls")

    assert failed.waiting() == dataclasses.replace(failed, status="WAITING")
    assert failed.waiting("a person decides") == dataclasses.replace(
        failed, status="WAITING", error_message="a person decides"
    )
    assert failed.status == "FAILED"
