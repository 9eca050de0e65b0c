"""The dashboard in a real browser: the charts render as SVG in Chromium, and changing the
period swaps the numbers and charts in place and puts the period in the address bar."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import RunStatus
from tests.dashboard.builders import execution
from tests.factories import EntityFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_charts_render_and_the_period_changes_in_place(console_page, alice, acme, failures):
    from playwright.sync_api import expect

    writer = EntityFactory(workspace=acme, name="writer")
    now = timezone.now()
    execution(writer, ended=now - timedelta(minutes=5), cost="0.25", tokens=100, ms=900)
    execution(writer, status=RunStatus.FAILED, ended=now - timedelta(hours=2), cost="0.05", ms=40)
    for days in (2, 3, 4):
        execution(writer, ended=now - timedelta(days=days), cost="1", tokens=50, ms=2000)

    page = console_page
    page.goto("/admin/login/?next=/dashboard/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")

    success = page.locator("#metric-success_rate .value")
    expect(success).to_have_text("50.0 %")
    chart = page.locator("#chart-success_rate svg[role=img]")
    expect(chart).to_be_visible()
    expect(chart).to_have_attribute("aria-label", re.compile(r"2 of 24 hours measured"))
    box = chart.bounding_box()
    assert box is not None and box["width"] > 200 and box["height"] > 60  # drawn, not collapsed
    expect(page.locator("#chart-statuses svg rect")).not_to_have_count(0)
    expect(page.locator("#chart-entities svg")).to_contain_text("writer")
    tooltip = page.locator("#chart-success_rate svg circle title").first
    expect(tooltip).to_contain_text(re.compile(r"\d+ %"))

    page.evaluate("window.pageMark = 'kept'")
    page.select_option("#id_period", "7d")
    expect(page).to_have_url(re.compile(r"/dashboard/\?period=7d$"))
    expect(success).to_have_text("80.0 %")  # four of five in the week
    expect(chart).to_have_attribute("aria-label", re.compile(r"of 7 days measured"))
    expect(page.locator("#dashboard-scope")).to_contain_text("Last 7 days, by day")
    assert page.evaluate("window.pageMark") == "kept"  # swapped in place, not reloaded

    page.go_back()
    expect(page).to_have_url(re.compile(r"/dashboard/$"))
    expect(page.locator("#metric-success_rate .value")).to_have_text("50.0 %")
    assert failures == [], failures


def test_chart_labels_are_readable_on_a_phone(console_page, alice, acme, failures):
    """At 390 px the charts' labels are drawn at a size a person reads (not the 6 px a
    560-unit chart scaled to a phone gives), the x labels shown do not touch, and a long
    entity name is cut beside its bar, whole in its tooltip."""
    from playwright.sync_api import expect

    writer = EntityFactory(workspace=acme, name="writer")
    long_name = EntityFactory(workspace=acme, name="summarise_" + "quarterly_" * 8 + "report")
    now = timezone.now()
    for days in range(30):
        execution(writer, ended=now - timedelta(days=days, minutes=5), cost="0.5", ms=90_000)
    execution(long_name, ended=now - timedelta(hours=1), cost="20", ms=300_000)

    page = console_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/admin/login/?next=/dashboard/%3Fperiod%3D30d")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    chart = page.locator("#chart-p95_latency svg[role=img]")
    expect(chart).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390

    for selector in ("#chart-p95_latency svg", "#chart-statuses svg"):
        shown = [t for t in page.locator(f"{selector} text.x-label").all() if t.is_visible()]
        boxes = [t.bounding_box() for t in shown]
        assert 2 <= len(boxes) <= 4, (selector, boxes)
        for left, right in zip(boxes, boxes[1:], strict=False):
            assert left["x"] + left["width"] + 4 <= right["x"], (selector, left, right)
        assert min(box["height"] for box in boxes) >= 10, (selector, boxes)
    y_label = page.locator("#chart-p95_latency svg text.y-label").last
    assert y_label.bounding_box()["height"] >= 10
    assert y_label.bounding_box()["x"] >= chart.bounding_box()["x"] - 1  # not cut off

    bar_label = page.locator("#chart-entities svg text.bar-label").first
    expect(bar_label).to_have_text(re.compile(r"^summarise_quar.*…$"))
    expect(page.locator("#chart-entities svg title").first).to_contain_text(long_name.name)
    assert failures == [], failures
