"""The versions page in a real browser against the live server: a designer opens an
entity's history, compares two versions, reads the diff, restores the older one; and the
page fits a phone."""

from __future__ import annotations

import pytest
from django.urls import reverse

from entities.selectors import entity_version_list
from entities.services import entity_save
from tests.factories import definition

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
PROMPT = "You are a careful writer who drafts every brief in plain words."
# One unbroken word longer than a phone is wide: the diff must wrap it, not scroll.
LONG_WORD = "https://example.com/" + "x" * 300


def writer(workspace, user) -> object:
    """An agent with three versions: a new prompt in 1.0.1, a lower depth limit in 1.0.2."""

    def version(prompt: str, depth: int) -> dict:
        data = definition("writer", "AGENT", max_depth=depth)
        data["identity"]["persona"]["system_prompt"] = prompt
        return data

    entity = entity_save(workspace=workspace, definition=version(PROMPT, 5), user=user).entity
    quick = PROMPT.replace("careful", "quick") + " See " + LONG_WORD
    for depth in (5, 3):
        entity_save(workspace=workspace, entity=entity, user=user, definition=version(quick, depth))
    return entity


def sign_in(page, username: str, next_url: str) -> None:
    page.goto(f"/admin/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", "password")
    page.click("input[type=submit]")


def test_a_designer_compares_two_versions_and_restores_one(console_page, alice, acme, failures):
    from playwright.sync_api import expect

    page = console_page
    entity = writer(acme, alice)
    url = reverse("designer:versions", kwargs={"workspace": "acme", "pk": entity.pk})
    sign_in(page, "alice", url)
    expect(page.locator("h1")).to_have_text("Versions of writer")
    rows = page.locator(".versions-table tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text("1.0.2")
    # By default the newest against the one before.
    expect(page.locator("#compare-title")).to_have_text("Changes from 1.0.1 to 1.0.2")

    page.check("input[name=a][value='1.0.0']")
    page.check("input[name=b][value='1.0.2']")
    page.click("button:text-is('Compare')")
    expect(page.locator("#compare-title")).to_have_text("Changes from 1.0.0 to 1.0.2")
    prompt = page.locator(".change", has_text="Identity › Persona › System prompt")
    expect(prompt.locator("del")).to_have_text(["careful ", "words."])
    expect(prompt.locator("ins").first).to_have_text("quick ")
    expect(page.locator(".diff-counts")).to_contain_text("2 differences")

    page.locator("#version-1\\.0\\.0 a.restore-link").click()
    expect(page.locator("#restore-title")).to_have_text("Restore version 1.0.0?")
    expect(page.locator("#compare-title")).to_have_text("What restoring 1.0.0 changes")
    page.click("button:text-is('Restore 1.0.0 as a new version')")
    expect(page.locator(".alert-success")).to_have_text("Restored version 1.0.0 as version 1.0.3.")
    expect(rows).to_have_count(4)
    expect(rows.first).to_contain_text("1.0.3")
    restored = entity_version_list(entity=entity).first()
    assert restored.definition["identity"]["persona"]["system_prompt"] == PROMPT
    assert failures == []


def test_the_versions_page_fits_a_phone(console_page, alice, bob, acme, failures):
    from playwright.sync_api import expect

    page = console_page
    page.set_viewport_size(PHONE)
    entity = writer(acme, alice)
    url = reverse("designer:versions", kwargs={"workspace": "acme", "pk": entity.pk})
    sign_in(page, "alice", url)
    expect(page.locator("h1")).to_contain_text("Versions of writer")
    for path in (url, f"{url}?a=1.0.0&b=1.0.2", f"{url}?restore=1.0.0"):
        page.goto(path)
        page.wait_for_load_state("networkidle")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{path} is {width} px wide"
    # The confirmation's button is on the screen.
    button = page.locator("button:text-is('Restore 1.0.0 as a new version')")
    expect(button).to_be_visible()
    box = button.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert failures == []
