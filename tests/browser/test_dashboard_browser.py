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
