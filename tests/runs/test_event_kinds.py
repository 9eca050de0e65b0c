"""A trace's events are of the kinds `runs.engine.state.EventKind` lists: the engine's are
checked by mypy, and the run services refuse another from any other app (the approvals
tests go through every kind approvals records)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from runs.models import RunEvent
from runs.services import run_note, run_resume


@pytest.mark.django_db
@pytest.mark.parametrize("call", ["note", "resume"])
def test_an_event_of_a_kind_not_listed_is_refused_and_nothing_is_recorded(call):
    ids = {"run_id": uuid.uuid4(), "trace_id": uuid.uuid4()}
    with pytest.raises(ValueError, match="'approval.made_up' is not a kind of trace event"):
        if call == "note":
            run_note(**ids, event="approval.made_up", payload={})
        else:
            run_resume(
                **ids,
                status="RUNNING",
                waited=timedelta(0),
                event="approval.made_up",
                payload={},
            )
    assert not RunEvent.objects.exists()
