"""A REACT agent through POST /api/v1/entities/{id}/execute on PostgreSQL (real commits, the
inline executor running the engine): it looks up what it needs with its tools before it
answers, and the run's document and rows show every turn and call."""

from __future__ import annotations

import pytest

from runs.models import LLMCall, Run, ToolCall
from tests.factories import EntityFactory
from tests.marks import postgresql_only
from tests.support.react import QUESTION, REACT, stock_tool, weather_tool
from tests.support.runs_api import execute_url, operator
from tests.support.worlds import io


@postgresql_only("the reasoning loop's records through the API, on the production database")
@pytest.mark.django_db(transaction=True)
def test_a_react_agent_run_through_the_api_looks_things_up_then_answers(api, acme, settings):
    settings.HIERARCH_EXECUTOR = "inline"
    entity = EntityFactory(
        workspace=acme,
        name="forecaster",
        type="AGENT",
        tools=[weather_tool(), stock_tool()],
        logic_gate=REACT,
        io_contract=io({"city": "string", "question": "string"}, answer="string"),
    )
    api.force_login(operator(acme))

    response = api.post(
        execute_url(entity), {"input_data": QUESTION, "execution_options": {"async": False}}
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "COMPLETED", body
    assert body["metrics"]["llm_calls"] == 2 and body["metrics"]["tool_calls"] == 1
    assert "forecast" in body["output_data"]["answer"]
    run = Run.objects.get()
    (call,) = ToolCall.objects.filter(run=run)
    assert call.tool_id == "weather_lookup" and call.success
    assert call.input_parameters == {"city": "Paris"}
    assert call.idempotency_key == f"{run.pk}:{call.metadata['step']}:1:1:0"
    turns = LLMCall.objects.filter(run=run).order_by("timestamp")
    assert [t.call_key.rsplit(":", 1)[1] for t in turns] == ["0", "1"]
    assert [t.metadata.get("tool_calls", [{}])[0].get("name") for t in turns] == [
        "weather_lookup",
        None,
    ]
