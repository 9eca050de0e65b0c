"""Summaries through the model as olive (operator in Acme) sees them: a loop that summarises
its earlier passes and a memory that folds its oldest items, executed through the API and run
on the real store (PostgreSQL in CI). The trace API lists each summary as a model call of the
run, counted in its metrics, and the trace page shows it under its own step record."""

from __future__ import annotations

import pytest

from runs.models import LLMCall, MemoryItem, StepRun
from tests.factories import EntityFactory
from tests.support.queued_runs import Driver
from tests.support.runs import io, step
from tests.support.runs_api import execute_url, operator

pytestmark = pytest.mark.smoke


@pytest.fixture
def olive(acme):
    return operator(acme)


def summarising(acme):
    """Draft, then Review, back to Draft while the iteration is below 3 (three passes, a
    summary before the second and the third); its memory folds past two items."""
    review = step(2, "Review", "THOUGHT")
    review["exit_conditions"] = [{"condition": {"<": [{"var": "iteration"}, 3]}, "next_step": 1}]
    return EntityFactory(
        workspace=acme,
        name="summariser",
        type="SKILL",
        io_contract=io({"topic": "string"}, text="string"),
        planning={
            "static_plan": {"enabled": True, "steps": [step(1, "Draft", "THOUGHT"), review]},
            "loop_control": {"max_iterations": 3, "iteration_context_mode": "SUMMARIZED"},
        },
        capabilities={
            "memory": {
                "enabled": True,
                "scope": "ENTITY",
                "retention_policy": {"summarization_threshold": 2},
            }
        },
    )


def execute(api, entity, topic: str) -> str:
    response = api.post(execute_url(entity), {"input_data": {"topic": topic}}, format="json")
    assert response.status_code == 202, response.content
    run_id = response.json()["run_id"]
    driver = Driver()
    driver.queue.append(run_id)
    driver.drain()
    return run_id


def test_summaries_are_calls_of_the_run_in_the_trace_api_and_page(api, olive, acme):
    entity = summarising(acme)
    api.force_login(olive)
    first, second = execute(api, entity, "<b>first</b>"), execute(api, entity, "second")
    third = execute(api, entity, "third")

    for run_id in (first, second, third):
        document = api.get(f"/api/v1/runs/{run_id}").json()
        assert document["status"] == "COMPLETED", document["error"]
    tree = api.get(f"/api/v1/runs/{third}/trace").json()["trace_tree"]
    purposes = [call["purpose"] for call in tree["node"]["llm_calls"]]
    # Two passes summarised, and three items in memory folded to two.
    assert purposes.count("SUMMARY") == 3 and purposes.count("THOUGHT") == 6
    metrics = api.get(f"/api/v1/runs/{third}").json()["metrics"]
    assert metrics["llm_calls"] == 9
    assert LLMCall.objects.filter(run_id=third).count() == 9

    steps = set(StepRun.objects.filter(run_id=third).values_list("name", "type", "status"))
    assert {("Summary", "SUMMARY", "COMPLETED"), ("Memory summary", "SUMMARY", "COMPLETED")} <= (
        steps
    )
    assert MemoryItem.objects.filter(entity=entity).count() == 2

    html = api.get(f"/runs/{third}/nodes/{third}/", HTTP_HX_REQUEST="true").content.decode()
    assert "<td>Summary</td>" in html and "<td>Memory summary</td>" in html
    assert html.count("<td>SUMMARY</td>") == 3
    assert "summary · " in html  # the calls' purpose
    assert "Summarise these earlier iterations for the next one" in html
    # What the fold quoted of the first run's input is shown escaped.
    assert "<b>first</b>" not in html and "&lt;b&gt;first&lt;/b&gt;" in html
