"""pii_handling REDACT and ENCRYPT apply to every stored and shown copy of a run's data: a
card number and an e-mail address in a run's input, echoed by a tool in a child run and
read back by a later step, are in clear in no table, page or API answer, and the run still
works on the clear values."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from governance.safety import pii_open
from governance.vault import PiiCipher
from runs.models import Run
from tests.factories import EntityFactory, tool_definition
from tests.support.runs import Driver, static_plan, step
from tests.support.stored import places_holding

CARD = "4111 1111 1111 1111"  # Luhn-valid
EMAIL = "bob.payer@example.com"
CLEAR = [CARD, CARD.replace(" ", ""), EMAIL]


def render(order: int, name: str, template: str, variables: dict) -> dict:
    plan_step = step(order, name, "TOOL_CALL", tool_id="render")
    plan_step["input_mapping"] = {"template": template, "variables": variables}
    return plan_step


def billing(workspace, mode: str):
    """billing (PROCESS) → mailer (ACTION): the mailer renders the card and the address,
    then renders its first step's text again from the run state, with its length (which
    only the clear text has)."""
    oversight = {"human_oversight": {"pii_handling": mode}}
    tool = tool_definition("render", implementation="template_render", permissions="READ")
    EntityFactory(
        workspace=workspace,
        name=f"mailer_{mode.lower()}",
        tools=[tool],
        governance=oversight,
        planning=static_plan(
            render(1, "Draft", "Card {{ card }} for {{ email }}", {"var": "input"}),
            render(
                2,
                "Again",
                "{{ draft.text }} ({{ draft.text | length }})",
                {"draft": {"var": "Draft"}},
            ),
        ),
    )
    return EntityFactory(
        workspace=workspace,
        name=f"billing_{mode.lower()}",
        type="PROCESS",
        governance=oversight,
        children=[
            {
                "child_id": f"mailer_{mode.lower()}",
                "input_mapping": {"card": {"var": "input.card"}, "email": {"var": "input.email"}},
            }
        ],
    )


def shown_to_a_viewer(client, viewer, runs: list[Run]) -> str:
    api = APIClient()
    client.force_login(viewer)
    api.force_login(viewer)
    root = runs[0]
    answers = [client.get(f"/runs/{root.pk}/")]
    answers += [client.get(f"/runs/{root.pk}/nodes/{run.pk}/") for run in runs]
    answers += [api.get(f"/api/v1/runs/{run.pk}") for run in runs]
    answers.append(api.get(f"/api/v1/runs/{root.pk}/trace"))
    assert {a.status_code for a in answers} == {200}
    return "\n".join(a.content.decode() for a in answers)


@pytest.mark.parametrize("mode", ["REDACT", "ENCRYPT"])
def test_personal_data_is_in_clear_in_no_stored_or_shown_copy_and_the_run_still_works(
    acme, bob, client, mode
):
    # One step per advance: each step starts from the run as stored, as after a crash.
    driver = Driver(steps_per_advance=1)
    run = driver.run(billing(acme, mode), {"card": CARD, "email": EMAIL, "note": "hello"})

    assert run.status == "COMPLETED", run.error_message
    child = Run.objects.get(parent=run)
    # The second step read the first one's text back from the stored state, in clear.
    text = f"Card {CARD} for {EMAIL}"
    opened = pii_open(child.state, PiiCipher().decrypt)
    assert opened["Again"] == {"text": f"{text} ({len(text)})"}
    assert pii_open(child.input_data, PiiCipher().decrypt) == {"card": CARD, "email": EMAIL}
    assert pii_open(run.input_data, PiiCipher().decrypt)["note"] == "hello"
    assert places_holding(CLEAR) == []
    page = shown_to_a_viewer(client, bob, [run, child])
    assert [value for value in CLEAR if value in page] == []
    if mode == "REDACT":  # a person reads a redaction, never a token
        assert "[REDACTED:EMAIL]" in page and "[REDACTED:CREDIT_CARD]" in page
        assert "enc:" not in page
    else:
        assert "enc:" in page


def test_with_allow_the_data_is_kept_as_it_is(acme):
    run = Driver().run(billing(acme, "ALLOW"), {"card": CARD, "email": EMAIL})

    assert run.status == "COMPLETED", run.error_message
    text = f"Card {CARD} for {EMAIL}"
    assert Run.objects.get(parent=run).state["Again"] == {"text": f"{text} ({len(text)})"}
