"""The SVG charts on their own: axes and ticks, tooltips, the summary in words, escaping,
and the sentence shown instead of an empty chart."""

from __future__ import annotations

import re
from html import unescape
from xml.etree import ElementTree

import pytest

from dashboard.cards import bucket_label, duration, usd
from dashboard.charts import Point, Series, bar_chart, line_chart, nice_ticks, stacked_bar_chart

pytestmark = pytest.mark.smoke

SVG = "{http://www.w3.org/2000/svg}"


def parsed(svg: str) -> ElementTree.Element:
    """The chart as XML: it must be well formed to be drawn inline."""
    return ElementTree.fromstring(  # noqa: S314 - our own markup
        svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)
    )


def points(*values):
    return [Point(f"{h:02d}:00", f"Mar 5, {h:02d}:00", v) for h, v in enumerate(values)]


def test_ticks_are_round_numbers_from_zero_past_the_maximum():
    assert nice_ticks(100) == [0, 25, 50, 75, 100]
    assert nice_ticks(0.37) == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    assert nice_ticks(1, whole=True) == [0, 1]
    assert nice_ticks(7, whole=True) == [0, 2, 4, 6, 8]
    assert nice_ticks(0) == [0, 1]


def test_a_line_chart_has_axes_a_title_tooltips_and_its_numbers_in_words():
    svg = line_chart(
        title="Success rate",
        points=points(50, None, 100, 75),
        fmt=lambda v: f"{v:.0f} %",
        ceiling=100,
        empty="No runs in this period.",
        unit="hour",
    )
    root = parsed(svg)
    assert root.get("role") == "img"
    assert root.get("aria-label") == (
        "Success rate: 3 of 4 hours measured; lowest 50 % (Mar 5, 00:00), "
        "highest 100 % (Mar 5, 02:00), latest 75 % (Mar 5, 03:00)."
    )
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert texts[0] == "Success rate"
    assert texts[1:6] == ["0 %", "25 %", "50 %", "75 %", "100 %"]  # the y axis
    assert "03:00" in texts  # the x axis
    tips = [t.text for t in root.iter(f"{SVG}title")]
    assert tips == ["Mar 5, 00:00: 50 %", "Mar 5, 02:00: 100 %", "Mar 5, 03:00: 75 %"]
    # The gap breaks the line: one polyline joins the last two points only.
    (line,) = root.iter(f"{SVG}polyline")
    assert len(line.get("points").split()) == 2


def test_a_chart_without_data_says_so():
    html = line_chart(
        title="P95 latency",
        points=points(None, None),
        fmt=duration,
        empty="No runs in this period.",
    )
    assert "<svg" not in html
    assert "No runs in this period." in html
    assert "No runs" in stacked_bar_chart(
        title="Runs", labels=[("a", "A")], series=[Series("Done", "#000", [0])], empty="No runs"
    )
    assert "No runs" in bar_chart(title="Cost", rows=[], fmt=usd, empty="No runs")


def test_stacked_bars_stack_the_statuses_and_say_the_totals():
    root = parsed(
        stacked_bar_chart(
            title="Runs by status",
            labels=[("13:00", "Mar 5, 13:00"), ("14:00", "Mar 5, 14:00")],
            series=[
                Series("Completed", "#067647", [3, 1]),
                Series("Failed", "#b42318", [1, 0]),
                Series("Paused", "#f79009", [0, 0]),
            ],
            empty="No runs",
        )
    )
    assert root.get("aria-label") == (
        "Runs by status: 5 runs (4 completed, 1 failed); the most, 4, in Mar 5, 13:00."
    )
    tips = [t.text for t in root.iter(f"{SVG}title")]
    assert tips == [
        "Mar 5, 13:00: 3 completed of 4",
        "Mar 5, 13:00: 1 failed of 4",
        "Mar 5, 14:00: 1 completed of 1",
    ]
    legend = [t.text for t in root.iter(f"{SVG}text")][-2:]
    assert legend == ["Completed", "Failed"]  # no legend for a status that never happened


def test_every_text_is_escaped():
    name = '<script>alert("x")</script> & co'
    svg = bar_chart(title="Cost by entity", rows=[(name, 2.5, " over 3 runs")], fmt=usd, empty="")
    assert "<script>" not in svg
    root = parsed(svg)
    assert name in unescape(root.get("aria-label"))
    assert [t.text for t in root.iter(f"{SVG}title")] == [f"{name}: $2.50 over 3 runs"]
    line = line_chart(
        title="<b>t</b>", points=[Point("<i>", "<u>", 1.0)], fmt=str, empty="", unit="hour"
    )
    assert not re.search(r"<(b|i|u)>", line)


def test_numbers_read_as_a_person_writes_them():
    assert [usd(v) for v in (0, 0.0042, 0.15, 2.5, 1234.4)] == [
        "$0",
        "$0.0042",
        "$0.15",
        "$2.50",
        "$1,234",
    ]
    assert [duration(v) for v in (840, 1250, 2000, 90_000)] == [
        "840 ms",
        "1.25 s",
        "2 s",
        "1.5 min",
    ]
    from datetime import UTC, datetime

    assert bucket_label(datetime(2025, 3, 5, 14, tzinfo=UTC), "hour") == ("14:00", "Mar 5, 14:00")
    assert bucket_label(datetime(2025, 3, 5, tzinfo=UTC), "hour") == ("Mar 5", "Mar 5, 00:00")
    assert bucket_label(datetime(2025, 3, 5, tzinfo=UTC), "day") == ("Mar 5", "Wed Mar 5")


# -- readable labels ---------------------------------------------------------------------------


def daily(n: int) -> list[Point]:
    return [Point(f"Day {i + 1}", f"Day {i + 1} of {n}", float(i % 7)) for i in range(n)]


def x_labels(root: ElementTree.Element) -> list[ElementTree.Element]:
    return [t for t in root.iter(f"{SVG}text") if "x-label" in (t.get("class") or "")]


def test_many_points_keep_a_few_x_labels_the_latest_always_and_half_of_them_on_a_phone():
    for n in (24, 30, 90):
        root = parsed(line_chart(title="Runs", points=daily(n), fmt=str, empty="", unit="day"))
        labels = x_labels(root)
        assert 2 <= len(labels) <= 8, n
        assert labels[-1].text == f"Day {n}"  # the latest bucket is named
        phone = [t for t in labels if "x-minor" not in t.get("class")]
        assert len(phone) <= 4 and phone[-1].text == f"Day {n}", n
        # Shown on a phone, labels are at least 110 units apart: 18-unit text of 6 characters.
        xs = [float(t.get("x")) for t in phone]
        assert all(b - a >= 110 for a, b in zip(xs, xs[1:], strict=False)), (n, xs)


def test_a_long_entity_name_is_cut_beside_its_bar_and_whole_in_its_tooltip():
    name = "n" * 200
    root = parsed(bar_chart(title="Cost", rows=[(name, 3.0, " over 2 runs")], fmt=usd, empty=""))
    (label,) = [t for t in root.iter(f"{SVG}text") if t.get("class") == "bar-label"]
    assert len(label.text) <= 16 and label.text.endswith("…")
    assert [t.text for t in root.iter(f"{SVG}title")] == [f"{name}: $3.00 over 2 runs"]


def test_a_bars_value_stays_inside_the_chart():
    root = parsed(bar_chart(title="Cost", rows=[("big", 1500.0, "")], fmt=usd, empty=""))
    (value,) = [t for t in root.iter(f"{SVG}text") if t.get("class") == "bar-value"]
    # At the top of the axis: no room after the bar, so it is written inside its end.
    assert value.get("text-anchor") == "end" and value.get("fill") == "#fff"
    assert float(value.get("x")) <= 560


def test_a_time_axis_ticks_at_round_times_with_their_unit():
    root = parsed(
        line_chart(title="P95", points=points(60_000, 300_000), fmt=duration, empty="", time=True)
    )
    ys = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "y-label"]
    assert ys == ["0 ms", "2 min", "4 min", "6 min"]
    assert [duration(v) for v in (120_000, 5_400_000)] == ["2 min", "1.5 h"]


def test_the_y_labels_have_room_at_the_phones_font():
    root = parsed(
        line_chart(title="Cost", points=points(1200.0, 4800.0), fmt=usd, empty="", unit="hour")
    )
    ys = [t for t in root.iter(f"{SVG}text") if t.get("class") == "y-label"]
    longest = max(len(t.text) for t in ys)
    # Right-aligned at their x: each needs about 10.5 units a character on a phone.
    assert all(float(t.get("x")) >= 10.5 * longest for t in ys), [t.get("x") for t in ys]
