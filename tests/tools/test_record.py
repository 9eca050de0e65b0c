"""record: one row per idempotency key."""

from __future__ import annotations

import pytest

from runs.engine.ports import VALIDATION_ERROR, ToolError
from tests.tools.conftest import context_for
from tools.builtin import Replayed, record
from tools.models import RecordedRow

pytestmark = pytest.mark.smoke


def test_it_appends_a_row(acme):
    output = record.run(
        {"table": "candidates", "data": {"name": "Ada", "score": 0.9}},
        context_for("record", key="run-7:step-2:1", workspace_id=acme.pk),
    )

    row = RecordedRow.objects.get()
    assert (row.workspace, row.run_id, row.idempotency_key) == (acme, "run-1", "run-7:step-2:1")
    assert (row.table, row.data) == ("candidates", {"name": "Ada", "score": 0.9})
    assert output == {
        "id": row.pk,
        "table": "candidates",
        "data": {"name": "Ada", "score": 0.9},
        "created_at": row.created_at.isoformat(),
    }


def test_a_replayed_key_returns_the_row_already_written(acme):
    context = context_for("record", key="run-7:step-2:1", workspace_id=acme.pk)
    first = record.run({"table": "t", "data": {"n": 1}}, context)
    again = record.run({"table": "t", "data": {"n": 1}}, context)

    assert again == Replayed(first)
    assert RecordedRow.objects.count() == 1


def test_each_key_writes_its_own_row(acme):
    for attempt in (1, 2):
        record.run(
            {"table": "t", "data": {"attempt": attempt}},
            context_for("record", key=f"run-7:step-2:{attempt}", workspace_id=acme.pk),
        )
    assert [row.data for row in RecordedRow.objects.all()] == [{"attempt": 1}, {"attempt": 2}]


def test_a_key_from_another_workspace_is_refused(acme, globex):
    record.run({"table": "t", "data": {}}, context_for("record", key="k", workspace_id=acme.pk))
    with pytest.raises(ToolError, match="already used in another workspace") as caught:
        record.run(
            {"table": "t", "data": {}}, context_for("record", key="k", workspace_id=globex.pk)
        )
    assert caught.value.permanent


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"data": {}}, "arguments.table: is required"),
        ({"table": "t"}, "arguments.data: is required"),
        ({"table": "drop table;", "data": {}}, "arguments.table: 'drop table;' does not match"),
        ({"table": "t", "data": [1]}, "arguments.data: must be an object, not a list"),
    ],
    ids=["no-table", "no-data", "bad-table-name", "data-not-an-object"],
)
def test_bad_arguments_write_nothing(acme, arguments, message):
    with pytest.raises(ToolError) as caught:
        record.run(arguments, context_for("record", workspace_id=acme.pk))
    assert caught.value.permanent and caught.value.code == VALIDATION_ERROR
    assert message in str(caught.value)
    assert not RecordedRow.objects.exists()


@pytest.mark.parametrize(
    ("key", "message"), [("", "needs an idempotency key"), ("k" * 256, "longer than 255")]
)
def test_it_refuses_a_missing_or_overlong_key(acme, key, message):
    with pytest.raises(ToolError, match=message) as caught:
        record.run({"table": "t", "data": {}}, context_for("record", key=key, workspace_id=acme.pk))
    assert caught.value.permanent
    assert not RecordedRow.objects.exists()


def test_its_sandbox_answers_like_a_written_row_and_writes_nothing(acme):
    output = record.sandbox(
        {"table": "candidates", "data": {"name": "Ada"}},
        context_for("record", workspace_id=acme.pk),
    )
    assert output["id"] is None
    assert output["table"] == "candidates" and output["data"] == {"name": "Ada"}
    assert output["created_at"]
    assert not RecordedRow.objects.exists()


def test_its_sandbox_still_refuses_bad_arguments(acme):
    with pytest.raises(ToolError, match="arguments.table: is required"):
        record.sandbox({"data": {}}, context_for("record", workspace_id=acme.pk))
