"""`model_version` picks the model called: the name and the version as providers name their
dated models, recorded with the call."""

from __future__ import annotations

import pytest

from runs.engine.thoughts import model_id
from runs.models import LLMCall
from tests.factories import EntityFactory
from tests.support.runs import Driver, io


@pytest.mark.parametrize(
    ("name", "version", "called"),
    [
        ("gpt-4o", "2024-08-06", "gpt-4o-2024-08-06"),
        ("claude-3-5-sonnet", "20241022", "claude-3-5-sonnet-20241022"),
        ("gpt-4o-2024-08-06", "2024-08-06", "gpt-4o-2024-08-06"),  # said twice: once
        ("offline", None, "offline"),
        ("offline", "", "offline"),
        ("offline", "  ", "offline"),
    ],
)
def test_the_model_called_is_its_name_and_version(name, version, called):
    assert model_id({"model_name": name, "model_version": version}) == called


def test_a_run_calls_and_records_the_versioned_model(db, acme):
    action = EntityFactory(
        workspace=acme,
        name="dated",
        io_contract=io(None, ok="boolean"),
        logic_gate={
            "reasoning_config": {
                "model_provider": "local",
                "model_name": "offline",
                "model_version": "2026-11-01",
            }
        },
    )
    run = Driver().run(action, {})
    assert run.status == "COMPLETED", run.error_message
    (call,) = LLMCall.objects.filter(run=run)
    assert (call.model_provider, call.model_name) == ("local", "offline-2026-11-01")
