"""The console on a phone (390 px wide, in a real browser against the live server): no page
scrolls sideways, the navigation folds under "Menu" and opens with it, the lists become a
card a row with each value named, and a request's Approve and Reject are on the screen."""

from __future__ import annotations

import pytest
from django.urls import reverse

from governance.tokens import api_token_create
from runs.views.listing import run_url
from tests.api.factories import approval_for
from tests.factories import EntityFactory, grant, paused_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


def test_every_console_page_fits_a_phone(console_page, dave, acme, failures):
    from playwright.sync_api import expect

    page = console_page
    page.set_viewport_size(PHONE)
    grant(dave, acme, "operator")  # to start runs too
    api_token_create(user=dave, name="nightly report")  # a row in the tokens list
    request = approval_for(paused_run(EntityFactory(workspace=acme, name="publisher")))
    pages = [
        reverse("dashboard:index"),
        reverse("runs:list"),
        reverse("runs:start"),
        reverse("runs:start_entity", args=[request.run.entity_id]),
        run_url(request.run),
        reverse("approvals:inbox"),
        reverse("approvals:inbox") + "?show=decided",
        reverse("approvals:detail", args=[request.pk]),
        reverse("account:tokens"),
    ]

    page.goto("/admin/login/?next=/dashboard/")
    page.fill("#id_username", "dave")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator("h1")).to_have_text("Dashboard")

    for path in pages:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{path} is {width} px wide"

    # The links fold under "Menu", which opens them.
    page.goto(reverse("runs:list"))
    nav = page.locator("#topnav")
    expect(nav).to_be_hidden()
    page.click(".nav-toggle")
    expect(page.locator(".nav-toggle")).to_have_attribute("aria-expanded", "true")
    expect(nav.locator("a", has_text="Inbox")).to_be_visible()
    nav.locator("a", has_text="Inbox").click()
    expect(page.locator("h1")).to_have_text("Approvals")

    # A request is a card, each value named; Approve and Reject are on the screen.
    row = page.locator(f"#approval-{request.pk}")
    expect(row.locator("td[data-label=Risk]")).to_be_visible()
    assert row.bounding_box()["width"] <= PHONE["width"]
    row.locator("a.row-link").click()
    for control in (
        page.locator("button:text-is('Approve')"),
        page.locator("summary:text-is('Reject')"),
    ):
        expect(control).to_be_visible()
        box = control.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert failures == []


def test_the_menu_is_a_plain_bar_on_a_wide_screen(console_page, dave, failures):
    from playwright.sync_api import expect

    page = console_page
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto("/admin/login/?next=/dashboard/")
    page.fill("#id_username", "dave")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator("#topnav a", has_text="Runs")).to_be_visible()
    expect(page.locator(".nav-toggle")).to_be_hidden()
    assert failures == []
