"""The runs page in a real browser, with the real engine: an operator opens the runs list,
goes to start a run, finds the entity with the search, fills the form generated from its
input schema (a value the schema refuses comes back at its field first), starts the run,
lands on its page, and watches its row on the list go from running to completed without a
reload."""

from __future__ import annotations

import re

import pytest

from runs.models import ACTIVE, Run, RunStatus
from runs.views.listing import run_url
from tests.factories import EntityFactory, UserFactory, grant

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Each offline model call of the server takes this long, so the run is still going when the
# list opens and its completion can only reach the page through the list's own refresh.
SLOW_MS = "4000"


@pytest.fixture(autouse=True)
def slow_model(monkeypatch):
    """Set before the server starts (autouse fixtures come first): daphne inherits it."""
    monkeypatch.setenv("HIERARCH_OFFLINE_LATENCY_MS", SLOW_MS)


def greeter(workspace):
    return EntityFactory(
        workspace=workspace,
        name="greeter",
        io_contract={
            "input": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "minLength": 3, "description": "Who to greet"},
                        "excited": {"type": "boolean", "default": False},
                        "tone": {"enum": ["warm", "dry"], "default": "warm"},
                    },
                    "required": ["name"],
                }
            },
            "output": {
                "schema": {"type": "object", "properties": {"greeting": {"type": "string"}}}
            },
        },
    )


def test_an_operator_starts_a_run_from_its_form_and_watches_it_complete_on_the_list(
    console_page, acme, failures
):
    from playwright.sync_api import expect

    page = console_page
    grant(UserFactory(username="olga"), acme, "operator")
    entity = greeter(acme)
    EntityFactory(workspace=acme, name="summarizer")

    page.goto("/admin/login/?next=/runs/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")
    expect(page.locator("#runs-results")).to_contain_text("No run yet.")

    page.click("a.btn:text('Start a run')")
    expect(page.locator("h1")).to_have_text("Start a run")
    expect(page.locator("#start-entities")).to_contain_text("summarizer")
    page.fill("#id_q", "greet")
    expect(page.locator("#start-entities")).not_to_contain_text("summarizer")
    expect(page).to_have_url(re.compile(r"/runs/start/\?q=greet$"))
    page.click("#start-entities a.row-link:text('greeter')")

    expect(page.locator("h1")).to_have_text("Run greeter")
    expect(page.locator("label[for=id_name]")).to_have_class("required")
    expect(page.locator("#id_name_helptext")).to_have_text("Who to greet")
    expect(page.locator("#id_excited")).not_to_be_checked()
    expect(page.locator("#id_tone")).to_have_value('"warm"')

    page.fill("#id_name", "Al")
    page.click("button:text('Start the run')")
    expect(page.locator("#id_name_error")).to_contain_text("'Al' is too short")
    expect(page.locator("#id_name")).to_have_value("Al")
    assert not Run.objects.exists()

    page.fill("#id_name", "Ada Lovelace")
    page.check("#id_excited")
    page.select_option("#id_tone", label="dry")
    page.click("button:text('Start the run')")
    page.wait_for_url(lambda url: "/runs/start/" not in url)
    run = Run.objects.get(entity=entity)
    assert run.input_data == {"name": "Ada Lovelace", "excited": True, "tone": "dry"}
    assert run.created_by.username == "olga"
    assert page.url.endswith(run_url(run))

    page.goto("/runs/")
    row = page.locator(f"#run-{run.pk}")
    expect(row).to_contain_text("greeter")
    expect(row).to_contain_text("olga")
    # The run is still going: the results refresh themselves while it is shown.
    assert row.get_attribute("data-status") in ACTIVE, "the run ended before the list opened"
    expect(page.locator("#runs-results")).to_have_attribute("hx-trigger", re.compile("every 2s"))
    page.evaluate("window.sameDocument = true")

    expect(row.locator(".run-status")).to_have_text("Completed", timeout=30_000)
    assert page.evaluate("window.sameDocument") is True  # no reload
    assert Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED
    expect(row).to_contain_text("$")
    # With nothing left going, the list stops asking.
    expect(page.locator("#runs-results")).not_to_have_attribute("hx-trigger", re.compile("."))
    assert failures == []
