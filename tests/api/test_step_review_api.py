"""Each step's result reviewed (`review_mechanism.scope: EACH_STEP`), through the API: a
result that fails its review goes to a person as the step's own request; the approval
API's decision lets the run go on with the person's edit, and the run document and trace
and the trace page show the step's review as a step of its own."""

from __future__ import annotations

from django.db import transaction

from approvals.models import Approval
from runs.models import LLMCall
from runs.services import run_start
from tests.factories import EntityFactory
from tests.support.queued_runs import Driver
from tests.support.runs import io, step


def escalating_writer(workspace):
    return EntityFactory(
        workspace=workspace,
        name="writer",
        type="SKILL",
        io_contract=io(None, text="string"),
        logic_gate={
            "review_mechanism": {
                "enabled": True,
                "scope": "EACH_STEP",
                "on_failure": "ESCALATE",
                "success_criteria": [
                    {"criterion": "no draft", "validation_type": "REGEX", "validator": "^$"}
                ],
            }
        },
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [step(1, "Draft", "THOUGHT"), step(2, "Polish", "THOUGHT")],
            }
        },
    )


def test_a_failed_step_result_is_decided_through_the_api_and_the_run_goes_on(
    api, client, acme, dave
):
    driver = Driver()
    with transaction.atomic():
        run = run_start(entity=escalating_writer(acme), input_data={})
    driver.queue.append(str(run.pk))
    driver.drain()
    run.refresh_from_db()
    assert run.status == "PAUSED"

    api.force_login(dave)
    (pending,) = api.get("/api/v1/approvals").json()["results"]
    assert (pending["step"], pending["trigger"]) == ("Draft", "REVIEW_ESCALATE")
    assert "the result of step 'Draft' needs a person" in pending["reasoning_summary"]
    approval = Approval.objects.get(pk=pending["id"])
    answer = api.post(
        f"/api/v1/approvals/{approval.pk}/decision",
        {"decision": "edit", "payload": {"text": "a person's draft"}},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    driver.queue.append(str(run.pk))
    driver.drain()

    # Polish's result fails too: its own request, then approved as it is.
    run.refresh_from_db()
    assert run.status == "PAUSED"
    polish = Approval.objects.get(run=run, status="PENDING")
    assert polish.step_name == "Polish"
    prompts = LLMCall.objects.filter(run=run).values_list("input_prompt", flat=True)
    assert sum("a person's draft" in prompt for prompt in prompts) == 1  # Polish read the edit
    answer = api.post(
        f"/api/v1/approvals/{polish.pk}/decision", {"decision": "approve"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    driver.queue.append(str(run.pk))
    driver.drain()

    document = api.get(f"/api/v1/runs/{run.pk}").json()
    assert document["status"] == "COMPLETED", document
    assert LLMCall.objects.filter(run=run).count() == 2  # each step called once, replays free
    client.force_login(dave)
    page = client.get(f"/runs/{run.pk}/nodes/{run.pk}/").content.decode()
    assert "Review of Draft" in page and "Review of Polish" in page
