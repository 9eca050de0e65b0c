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


@postgresql_only("hires through the API, on the production database")
@pytest.mark.django_db(transaction=True)
def test_a_coordinator_run_through_the_api_hires_and_its_trace_shows_each_hire(api, acme, settings):
    settings.HIERARCH_EXECUTOR = "inline"
    EntityFactory(
        workspace=acme,
        name="writer",
        type="SKILL",
        identity={"description": "Writes one <b>part</b> of an announcement"},
        io_contract=io({"task": "string"}, text="string"),
    )
    coordinator = EntityFactory(
        workspace=acme,
        name="coordinator",
        type="AGENT",
        max_cost=1.0,
        logic_gate=REACT,
        capabilities={
            "delegation": {"enabled": True, "templates": ["writer"], "max_budget_usd_each": 0.1}
        },
        io_contract=io({"brief": "string"}, answer="string"),
    )
    api.force_login(operator(acme))
    brief = {"brief": "Write the headline. Write the <script>body</script>."}

    response = api.post(
        execute_url(coordinator), {"input_data": brief, "execution_options": {"async": False}}
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "COMPLETED", body
    hires = body["child_runs"]
    assert [(h["role"], h["status"]) for h in hires] == [("Writer", "COMPLETED")] * 2
    assert hires[1]["task"].startswith("Write the <script>body</script>.")  # as given: JSON
    trace = api.get(f"/api/v1/runs/{body['run_id']}/trace").json()["trace_tree"]
    assert trace["node"]["budget_usd"] == 1.0
    nodes = [child["node"] for child in trace["children"]]
    assert [(n["role"], n["budget_usd"]) for n in nodes] == [("Writer", 0.1), ("Writer", 0.1)]
    assert all(n["hired_reason"].startswith("part ") for n in nodes)
    assert len(trace["node"]["llm_calls"]) == 2  # hired, then answered with their work
    run = Run.objects.get(pk=body["run_id"])
    assert run.reserved_usd == 0  # what the hires did not spend came back
