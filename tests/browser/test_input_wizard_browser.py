"""The start form as a wizard (`ui_hints.form_layout: "wizard"`) in a real browser with
JavaScript on: each page swaps in place (no reload), a page's problem keeps it, Back keeps
what was typed, the review shows it all, and Start lands on the run's page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from runs.models import Run
from runs.views.listing import run_url
from tests.factories import EntityFactory, UserFactory, grant

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def greeter(workspace):
    return EntityFactory(
        workspace=workspace,
        name="greeter",
        io_contract={
            "input": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "minLength": 3, "x-order": 1},
                        "excited": {"type": "boolean", "default": False, "x-order": 2},
                    },
                    "required": ["name"],
                }
            },
            "output": {
                "schema": {"type": "object", "properties": {"greeting": {"type": "string"}}}
            },
        },
        metadata_extensions={"ui_hints": {"form_layout": "wizard"}},
    )


def test_an_operator_walks_the_wizard_and_starts_the_run(console_page, acme, failures):
    from playwright.sync_api import expect

    page = console_page
    grant(UserFactory(username="olga"), acme, "operator")
    entity = greeter(acme)
    start = reverse("runs:start_entity", args=[entity.pk])

    page.goto(f"/admin/login/?next={start}")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator("h1")).to_have_text("Run greeter")
    expect(page.locator(".wizard-where")).to_have_text("Step 1 of 3")
    expect(page.locator("#id_excited")).to_have_attribute("type", "hidden")
    page.evaluate("window.sameDocument = true")

    page.fill("#id_name", "Al")
    page.click(".wizard-actions button:text('Next')")
    expect(page.locator("#id_name_error")).to_contain_text("'Al' is too short")
    page.fill("#id_name", "Ada Lovelace")
    page.keyboard.press("Enter")  # the page's first button: Next
    expect(page.locator(".wizard-where")).to_have_text("Step 2 of 3")
    expect(page.locator("#id_excited")).to_be_focused()
    page.check("#id_excited")
    # Each page is known by its step (the fields of the others are on it too, hidden).
    page.click(".wizard-actions button:text('Back')")
    expect(page.locator(".wizard-where")).to_have_text("Step 1 of 3")
    expect(page.locator("#id_name")).to_have_value("Ada Lovelace")
    page.click(".wizard-actions button:text('Next')")
    expect(page.locator(".wizard-where")).to_have_text("Step 2 of 3")
    expect(page.locator("#id_excited")).to_be_checked()
    page.click(".wizard-actions button:text('Next')")

    expect(page.locator(".wizard-where")).to_contain_text("Step 3 of 3")
    expect(page.locator(".wizard-review")).to_contain_text("Ada Lovelace")
    expect(page.locator(".wizard-review")).to_contain_text("Yes")
    assert page.evaluate("window.sameDocument") is True  # every page swapped in place
    assert not Run.objects.exists()

    page.click(".wizard-actions button:text('Start the run')")
    page.wait_for_url(lambda url: "/runs/start/" not in url)
    run = Run.objects.get(entity=entity)
    assert run.input_data == {"name": "Ada Lovelace", "excited": True}
    assert page.url.endswith(run_url(run))
    assert failures == []
