"""The demo's designer in a real browser (Debian's Chromium through Playwright): sign in, add
a child that would make a cycle and see it refused at the field, then add a fresh action
instead, created through the "+" popup, and see the new version."""

from __future__ import annotations

import os
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections

from entities.models import ChildLink, Entity

pytestmark = [pytest.mark.browser, pytest.mark.smoke]

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def demo(transactional_db):
    call_command("setup_demo", stdout=StringIO())
    return Entity.objects.get(workspace__slug="demo", name="content_analyst_agent")


@pytest.fixture
def failures() -> list[str]:
    """Responses of the admin's pages and static files that failed, and script errors."""
    return []


def _watch(response, failures: list[str]) -> None:
    path = response.url.split("//", 1)[-1].partition("/")[2]
    if response.status >= 400 and path.startswith(("static/", "admin/")):
        failures.append(f"{response.status} /{path}")


@pytest.fixture
def designer_page(demo, live_server, monkeypatch, failures):
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing; CI must run the browser tests")
        pytest.skip("Chromium is not installed: apt-get install chromium")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # between browser steps are still synchronous and safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = browser.new_context(base_url=live_server.url)
        context.set_default_timeout(15_000)
        page = context.new_page()
        page.on("response", lambda response: _watch(response, failures))
        page.on("pageerror", lambda error: failures.append(f"script error: {error}"))
        try:
            yield page
        finally:
            browser.close()
            # While Playwright's loop runs, Django keeps this thread's connections apart from
            # the test's own; close them, or PostgreSQL cannot drop the test database.
            connections.close_all()


def children_of(entity: Entity) -> list[str]:
    links = ChildLink.objects.filter(parent=entity).order_by("order", "id")
    return list(links.values_list("child__name", flat=True))


def test_a_designer_sees_a_cycle_refused_and_then_adds_a_fresh_action(
    designer_page, demo, failures
):
    from playwright.sync_api import expect

    page = designer_page
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "admin")
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_contain_text("Hierarch")

    page.goto("/admin/entities/entity/")
    page.fill("#searchbar", "content_analyst")
    page.press("#searchbar", "Enter")
    page.click("#result_list a:text-is('content_analyst_agent')")
    expect(page.locator("h2", has_text="content_analyst_agent")).to_be_visible()
    # The admin's scripts and styles were served: inlines.js added the "Add another" link,
    # and base.css laid out the header.
    expect(page.locator("#child_links-group .add-row a")).to_have_text("Add another Child")
    assert page.eval_on_selector("#header", "el => getComputedStyle(el).display") == "flex"

    versions_before = list(demo.versions.values_list("version", flat=True))
    children_before = children_of(demo)
    row = len(children_before)  # the empty extra row after the existing children
    page.select_option(f"#id_child_links-{row}-child", label="video_ad_creation_process (process)")
    page.click("input[name=_save]")

    expect(page.locator(".errornote")).to_be_visible()
    expect(page.locator(f"#child_links-{row} td.field-child .errorlist")).to_have_text(
        "creates a cycle: content_analyst_agent → video_ad_creation_process → "
        "content_analyst_agent; an entity cannot be its own ancestor"
    )
    assert children_of(demo) == children_before
    assert list(demo.versions.values_list("version", flat=True)) == versions_before

    # Instead: a fresh action, created in the "+" popup next to the same child field.
    with page.expect_popup() as popup_info:
        page.click(f"#add_id_child_links-{row}-child")
    popup = popup_info.value
    popup.select_option("#id_type", "ACTION")
    popup.select_option("#id_status", "ACTIVE")
    popup.fill("#id_name", "fact_check_action")
    popup.fill("#id_description", "Checks the extracted facts against the brief")
    popup.click("input[name=_save]")
    popup.wait_for_event("close")
    expect(page.locator(f"#id_child_links-{row}-child option:checked")).to_have_text(
        "fact_check_action (action)"
    )

    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("Saved as version")
    assert children_of(demo) == [*children_before, "fact_check_action"]
    new_version = Entity.objects.get(pk=demo.pk).version
    assert new_version not in versions_before
    expect(page.locator(".messagelist")).to_contain_text(f"Saved as version {new_version} (minor).")

    page.click("#result_list a:text-is('content_analyst_agent')")
    link = re.compile(rf"^{re.escape(new_version)}$")
    expect(page.locator("#versions-group a", has_text=link)).to_be_visible()
    assert failures == []
