"""The trace's timeline in a real browser: switched to from the tree (the address says so),
a bar per node placed where its times say, a tooltip on hover, a click opening a node's
details beside the bars; a run still going refreshes its bars until it ends; and on a phone
the page does not scroll sideways."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Run, RunStatus
from tests.factories import EntityFactory
from tests.support.traces import build_trace, place

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


@pytest.fixture
def trace(acme):
    action = EntityFactory(workspace=acme, name="parse")
    skill = EntityFactory(workspace=acme, name="extract", type="SKILL", children=[action])
    agent = EntityFactory(workspace=acme, name="analyst", type="AGENT", children=[skill])
    process = EntityFactory(workspace=acme, name="video_ad", type="PROCESS", children=[agent])
    made = build_trace(
        {"PROCESS": process, "AGENT": agent, "SKILL": skill, "ACTION": action}, 2, 1, 1
    )
    return made


def sign_in(page, next_url: str) -> None:
    page.goto(f"/admin/login/?next={next_url}")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")


def test_the_timeline_shows_bars_and_opens_a_node(console_page, alice, trace, failures):
    from playwright.sync_api import expect

    root, agent, skill = trace["PROCESS"][0], trace["AGENT"][0], trace["SKILL"][0]
    origin = timezone.now() - timedelta(minutes=10)
    for run in Run.objects.filter(trace_id=root.pk):
        place(run, origin, 6, 3)  # the second agent's branch: 6 s to 9 s
    place(root, origin, 0, 10)
    place(agent, origin, 1, 4)
    place(skill, origin, 2, 2.5)
    page = console_page
    sign_in(page, f"/runs/{root.pk}/")
    expect(page.locator(f"#row-{root.pk}")).to_contain_text("video_ad")  # the tree first

    page.click(".trace-views a:text-is('Timeline')")
    expect(page).to_have_url(re.compile(rf"/runs/{root.pk}/\?view=timeline$"))
    rows = page.locator("#timeline .tl-row")
    expect(rows).to_have_count(Run.objects.filter(trace_id=root.pk).count())
    track = page.locator(f"#tl-{agent.pk} .tl-track").bounding_box()
    bar = page.locator(f"#tl-{agent.pk} .tl-bar").bounding_box()
    # 1 s to 5 s of a 10 s trace: from 10% of the track, 40% of it wide.
    assert bar["x"] - track["x"] == pytest.approx(0.1 * track["width"], abs=2)
    assert bar["width"] == pytest.approx(0.4 * track["width"], abs=2)
    expect(page.locator(".tl-tick").last).to_have_text("10 s")

    tip = page.locator(f"#tl-{agent.pk} .tl-tip")
    expect(tip).to_be_hidden()
    page.hover(f"#tl-{agent.pk} .tl-track")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("start +1 s · duration 4 s")

    page.click(f"#tl-{skill.pk} .tl-track")
    detail = page.locator("#timeline-detail")
    expect(detail).to_be_visible()
    expect(detail.locator(f'.detail-body[data-run="{skill.pk}"]')).to_contain_text("extract")
    expect(page.locator(f"#tl-{skill.pk}")).to_have_class(re.compile(r"\bis-selected\b"))
    expect(page).to_have_url(re.compile(rf"/runs/{skill.pk}/\?view=timeline$"))

    # The address it left opens the same: the timeline, that node's details.
    page.reload()
    expect(page.locator(f'#timeline-detail .detail-body[data-run="{skill.pk}"]')).to_be_visible()
    expect(page.locator(".trace-views a[aria-current=page]")).to_have_text("Timeline")

    page.set_viewport_size(PHONE)
    page.goto(f"/runs/{root.pk}/?view=timeline")
    expect(page.locator(f"#tl-{agent.pk} .tl-bar")).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the timeline is {width} px wide on a phone"
    box = page.locator(f"#tl-{agent.pk} .tl-track").bounding_box()
    assert box["x"] + box["width"] <= PHONE["width"], box
    # The axis's labels shown do not run into each other.
    shown = [tick.bounding_box() for tick in page.locator(".tl-tick").all() if tick.is_visible()]
    assert len(shown) >= 2
    for left, right in zip(shown, shown[1:], strict=False):
        assert left["x"] + left["width"] <= right["x"], (left, right)
    assert failures == [], failures


def test_a_run_that_goes_on_grows_its_bars_until_it_ends(console_page, alice, trace, failures):
    from playwright.sync_api import expect

    root, agent = trace["PROCESS"][0], trace["AGENT"][0]
    origin = timezone.now() - timedelta(seconds=4)
    # PAUSED (on a person): still going, and no worker of the server's takes it up.
    place(root, origin, 0, None, status=RunStatus.PAUSED)
    place(agent, origin, 0, 1)  # done: its share of a span that grows shrinks
    page = console_page
    sign_in(page, f"/runs/{root.pk}/?view=timeline")
    bar = page.locator(f"#tl-{agent.pk} .tl-bar")
    expect(bar).to_be_visible()
    first = bar.get_attribute("style")
    expect(page.locator("#trace-live")).to_have_text("Live")
    # A refresh (every few seconds) brings the bars of a longer span.
    page.wait_for_function(
        "(before) => document.querySelector('#tl-" + str(agent.pk) + " .tl-bar')"
        ".getAttribute('style') !== before",
        arg=first,
        timeout=15_000,
    )
    Run.objects.filter(pk=root.pk).update(
        status=RunStatus.COMPLETED, completed_at=timezone.now(), execution_time_ms=9000
    )
    expect(page.locator("#trace-live")).to_have_text("Ended · Completed", timeout=15_000)
    expect(page.locator("#timeline-body")).to_have_attribute("data-active", "false")
    assert failures == [], failures
