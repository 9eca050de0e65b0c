"""The demo's designer in a real browser (Debian's Chromium through Playwright): sign in, add
a child that would make a cycle and see it refused at the field, then add a fresh action
instead, created through the "+" popup, and see the new version."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command

from entities.models import ChildLink, Entity
from tests.chromium import browser_context

pytestmark = [pytest.mark.browser, pytest.mark.smoke]


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
    with browser_context(live_server.url, monkeypatch) as context:
        page = context.new_page()
        page.on("response", lambda response: _watch(response, failures))
        page.on("pageerror", lambda error: failures.append(f"script error: {error}"))
        yield page


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
    expect(page.locator(".topbar .brand")).to_have_text("Hierarch")

    page.goto("/admin/entities/entity/")
    page.fill("#searchbar", "content_analyst")
    page.press("#searchbar", "Enter")
    page.click("#result_list a:text-is('content_analyst_agent')")
    expect(page.locator("h2", has_text="content_analyst_agent")).to_be_visible()
    # The admin's scripts and styles were served: inlines.js added the "Add another" link,
    # base.css laid out the page, and topbar.css the product's bar above it.
    expect(page.locator("#child_links-group .add-row a")).to_have_text("Add another Child")
    assert page.eval_on_selector("#container", "el => getComputedStyle(el).display") == "flex"
    assert page.eval_on_selector(".topbar", "el => getComputedStyle(el).display") == "flex"

    versions_before = list(demo.versions.values_list("version", flat=True))
    children_before = children_of(demo)
    row = len(children_before)  # the empty extra row after the existing children
    # The child picker searches the workspace (the admin's autocomplete), typed into.
    page.click(f"#child_links-{row} td.field-child .select2-selection")
    page.fill(".select2-container--open .select2-search__field", "video_ad_creation")
    page.click(".select2-results__option:text-is('video_ad_creation_process (process)')")
    expect(page.locator(f"#id_child_links-{row}-child option:checked")).to_have_text(
        "video_ad_creation_process (process)"
    )
    page.click("input[name=_save]")

    expect(page.locator(".errornote")).to_be_visible()
    errors = page.locator(f"#child_links-{row} td.field-child .errorlist li")
    # A process under an agent also breaks the type rule: both are told at the field.
    expect(errors).to_have_text(
        [
            re.compile("is a PROCESS and cannot be a child of the AGENT"),
            "creates a cycle: content_analyst_agent → video_ad_creation_process → "
            "content_analyst_agent; an entity cannot be its own ancestor",
        ]
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
