"""Charts as inline SVG, drawn on the server: a line chart, stacked bars, horizontal bars.

No JavaScript and nothing from a CDN. Each chart has a visible title, axes with ticks and
labels, a `<title>` tooltip on every point or bar, and `role="img"` with an `aria-label` that
says the numbers in words (lowest, highest, latest, totals). Every text is escaped here: an
entity's name is a person's input. With no data a chart is a sentence saying so, never an
empty frame.

Readable at any width: a chart is drawn once and scaled to its card, so on a phone (a card of
about 330 px for a 560-unit chart) dashboard.css sets a larger font in the chart's units and
hides the x labels marked `x-minor` (every other one shown, counted from the latest). The
margins and truncations here are sized for that phone font (PHONE_CHAR units a character),
so nothing runs into anything at either size: the left margin fits the longest y label, the
x labels are thinned to MAX_X_LABELS, an entity's name is cut to MAX_NAME characters (whole
in its tooltip) and a bar's value sits inside the bar when it would not fit after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from django.utils.safestring import SafeString, mark_safe

WIDTH = 560
HEIGHT = 220
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 36, 30  # the plot's margins (LEFT: at least)
MAX_X_LABELS = 8  # on a wide screen; half of them on a phone
MAX_NAME = 16  # characters of an entity's name beside its bar (then "…")
PHONE_CHAR = 10.5  # units one character takes at the phone's font (dashboard.css: 18 units)
NAME_COLUMN = 180  # units left of the horizontal bars, for MAX_NAME characters
INK, MUTED, GRID = "#1f2933", "#667085", "#e4e7ec"
ACCENT = "#2453c9"


@dataclass(frozen=True)
class Point:
    label: str  # under the axis: "14:00", "Mar 5"
    title: str  # in the tooltip and the summary: "Mar 5, 14:00"
    value: float | None  # None: nothing to measure in this bucket


@dataclass(frozen=True)
class Series:
    name: str
    color: str
    values: Sequence[float]


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def nice_ticks(maximum: float, count: int = 4, *, whole: bool = False) -> list[float]:
    """Round tick values from 0 to at least `maximum` (1, 2, 2.5 or 5 times a power of 10);
    `whole`: whole numbers only (counts)."""
    if maximum <= 0 or not math.isfinite(maximum):
        return [0.0, 1.0]
    raw = maximum / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if whole:
        step = max(1, math.ceil(step))
    top = step * math.ceil(maximum / step - 1e-9)
    return [step * i for i in range(round(top / step) + 1)]


# Round steps of a time axis, in milliseconds: a second, a minute, an hour are its units.
_TIME_STEPS_MS = [
    *(m * 10**e for e in range(0, 3) for m in (1, 2, 5)),
    *(sec * 1000 for sec in (1, 2, 5, 10, 15, 30)),
    *(minute * 60_000 for minute in (1, 2, 5, 10, 15, 30)),
    *(hour * 3_600_000 for hour in (1, 2, 3, 6, 12, 24)),
]


def time_ticks(maximum_ms: float, count: int = 4) -> list[float]:
    """Ticks of a duration axis from 0 past `maximum_ms` at a round time (250 ms, 30 s,
    2 min, 1 h): `nice_ticks` of milliseconds would say "1.7 min"."""
    if maximum_ms <= 0 or not math.isfinite(maximum_ms):
        return [0.0, 1000.0]
    step = next((s for s in _TIME_STEPS_MS if maximum_ms / s <= count), None)
    if step is None:
        return nice_ticks(maximum_ms, count)
    top = step * math.ceil(maximum_ms / step - 1e-9)
    return [float(step * i) for i in range(round(top / step) + 1)]


def _frame(title: str, label: str, body: str, height: int = HEIGHT) -> SafeString:
    return mark_safe(  # noqa: S308 - every text in it went through _e
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{_e(label)}" preserveAspectRatio="xMidYMid meet" '
        f'font-family="system-ui, sans-serif" font-size="11">'
        f'<text class="chart-title" x="0" y="16" font-size="13" font-weight="600" '
        f'fill="{INK}">{_e(title)}</text>'
        f"{body}</svg>"
    )


def empty_chart(title: str, message: str) -> SafeString:
    return mark_safe(  # noqa: S308 - escaped
        f'<div class="chart-empty" role="note"><strong>{_e(title)}</strong>'
        f"<p>{_e(message)}</p></div>"
    )


def left_margin(labels: Sequence[str]) -> int:
    """Room left of the plot for the longest y label at the phone's font."""
    return max(LEFT, math.ceil(10 + PHONE_CHAR * max((len(label) for label in labels), default=0)))


def _y_axis(
    ticks: list[float], fmt: Callable[[float], str], y: Callable[[float], float], left: int
) -> str:
    parts = []
    for tick in ticks:
        ty = y(tick)
        parts.append(
            f'<line x1="{left}" x2="{WIDTH - RIGHT}" y1="{ty:.1f}" y2="{ty:.1f}" '
            f'stroke="{GRID}" stroke-width="1"/>'
            f'<text class="y-label" x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end" '
            f'fill="{MUTED}">{_e(fmt(tick))}</text>'
        )
    return "".join(parts)


def _x_axis(labels: Sequence[str], x: Callable[[int], float], height: int, left: int) -> str:
    """The axis line and at most MAX_X_LABELS labels, the latest bucket's always; every other
    one shown is `x-minor`, which a phone hides (the latest is never minor)."""
    stride = max(1, math.ceil(len(labels) / MAX_X_LABELS))
    base = height - BOTTOM
    parts = [f'<line x1="{left}" x2="{WIDTH - RIGHT}" y1="{base}" y2="{base}" stroke="{MUTED}"/>']
    for i, label in enumerate(labels):
        back = len(labels) - 1 - i
        if back % stride:  # the latest bucket always has its label
            continue
        minor = " x-minor" if (back // stride) % 2 else ""
        parts.append(
            f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{base}" y2="{base + 4}" '
            f'stroke="{MUTED}"/>'
            f'<text class="x-label{minor}" x="{x(i):.1f}" y="{base + 16}" '
            f'text-anchor="middle" fill="{MUTED}">{_e(label)}</text>'
        )
    return "".join(parts)


def _scales(n: int, top: float, height: int, left: int = LEFT) -> tuple[Callable, Callable]:
    slot = (WIDTH - left - RIGHT) / max(n, 1)
    plot_h = height - TOP - BOTTOM

    def x(i: int) -> float:
        return left + slot * (i + 0.5)

    def y(value: float) -> float:
        return height - BOTTOM - plot_h * (value / top if top else 0)

    return x, y


def line_chart(
    *,
    title: str,
    points: Sequence[Point],
    fmt: Callable[[float], str],
    empty: str,
    ceiling: float | None = None,
    color: str = ACCENT,
    unit: str = "bucket",
    whole: bool = False,
    time: bool = False,
) -> SafeString:
    """One value per bucket, joined where consecutive buckets both have one. `ceiling` fixes
    the top of the axis (100 for a percentage); else it is rounded up from the data (to
    whole numbers with `whole`, to a round time with `time`: values in milliseconds)."""
    measured = [(i, p) for i, p in enumerate(points) if p.value is not None]
    if not measured:
        return empty_chart(title, empty)
    values = [p.value for _, p in measured]
    top = ceiling if ceiling is not None else max(values)
    ticks = time_ticks(top) if time else nice_ticks(top, whole=whole)
    left = left_margin([fmt(tick) for tick in ticks])
    x, y = _scales(len(points), ticks[-1], HEIGHT, left)

    segments, run = [], []
    for i, point in enumerate(points):
        if point.value is None:
            if run:
                segments.append(run)
            run = []
        else:
            run.append(f"{x(i):.1f},{y(point.value):.1f}")
    if run:
        segments.append(run)
    lines = "".join(
        f'<polyline points="{" ".join(s)}" fill="none" stroke="{color}" stroke-width="2" '
        'stroke-linejoin="round"/>'
        for s in segments
        if len(s) > 1
    )
    dots = "".join(
        f'<circle cx="{x(i):.1f}" cy="{y(p.value):.1f}" r="3.5" fill="{color}">'
        f"<title>{_e(p.title)}: {_e(fmt(p.value))}</title></circle>"
        for i, p in measured
    )
    low = min(measured, key=lambda item: item[1].value)[1]
    high = max(measured, key=lambda item: item[1].value)[1]
    last = measured[-1][1]
    summary = (
        f"{title}: {len(measured)} of {len(points)} {unit}s measured; "
        f"lowest {fmt(low.value)} ({low.title}), highest {fmt(high.value)} ({high.title}), "
        f"latest {fmt(last.value)} ({last.title})."
    )
    body = (
        _y_axis(ticks, fmt, y, left)
        + _x_axis([p.label for p in points], x, HEIGHT, left)
        + lines
        + dots
    )
    return _frame(title, summary, body)


def stacked_bar_chart(
    *,
    title: str,
    labels: Sequence[tuple[str, str]],
    series: Sequence[Series],
    empty: str,
    noun: str = "run",
) -> SafeString:
    """Bars per bucket (`labels`: axis label, full title), each stacked from `series` in
    order; a legend under the axis."""
    totals = [sum(s.values[i] for s in series) for i in range(len(labels))]
    if not any(totals):
        return empty_chart(title, empty)
    present = [s for s in series if any(s.values)]
    height = HEIGHT + 18
    ticks = nice_ticks(max(totals), whole=True)
    ticks_fmt = _count
    left = left_margin([ticks_fmt(tick) for tick in ticks])
    x, y = _scales(len(labels), ticks[-1], height - 18, left)
    slot = (WIDTH - left - RIGHT) / len(labels)
    bar_w = max(2.0, slot * 0.7)
    bars = []
    for i, (_, full) in enumerate(labels):
        base = 0.0
        for s in present:
            value = s.values[i]
            if not value:
                continue
            top, bottom = y(base + value), y(base)
            bars.append(
                f'<rect x="{x(i) - bar_w / 2:.1f}" y="{top:.1f}" width="{bar_w:.1f}" '
                f'height="{max(bottom - top, 0.5):.1f}" fill="{s.color}">'
                f"<title>{_e(full)}: {_count(value)} {_e(s.name.lower())} "
                f"of {_count(totals[i])}</title></rect>"
            )
            base += value
    legend, lx = [], left
    for s in present:
        legend.append(
            f'<rect x="{lx}" y="{height - 12}" width="10" height="10" fill="{s.color}"/>'
            f'<text x="{lx + 14}" y="{height - 3}" fill="{INK}">{_e(s.name)}</text>'
        )
        lx += 24 + PHONE_CHAR * len(s.name)
    busiest = max(range(len(labels)), key=lambda i: totals[i])
    parts = ", ".join(f"{_count(sum(s.values))} {s.name.lower()}" for s in present)
    summary = (
        f"{title}: {_count(sum(totals))} {noun}s ({parts}); the most, "
        f"{_count(totals[busiest])}, in {labels[busiest][1]}."
    )
    body = (
        _y_axis(ticks, ticks_fmt, y, left)
        + _x_axis([label for label, _ in labels], x, height - 18, left)
        + "".join(bars)
        + "".join(legend)
    )
    return _frame(title, summary, body, height)


def bar_chart(
    *,
    title: str,
    rows: Sequence[tuple[str, float, str]],
    fmt: Callable[[float], str],
    empty: str,
    color: str = ACCENT,
) -> SafeString:
    """Horizontal bars, largest first as given: (label, value, tooltip detail)."""
    if not rows or not any(value for _, value, _ in rows):
        return empty_chart(title, empty)
    row_h, left = 24, NAME_COLUMN
    height = TOP + row_h * len(rows) + 22
    ticks = nice_ticks(max(value for _, value, _ in rows))
    span = WIDTH - left - RIGHT - 40

    def x(value: float) -> float:
        return left + span * value / ticks[-1]

    parts = []
    for tick in ticks:
        parts.append(
            f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{TOP - 4}" '
            f'y2="{height - 18}" stroke="{GRID}"/>'
            f'<text x="{x(tick):.1f}" y="{height - 5}" text-anchor="middle" fill="{MUTED}">'
            f"{_e(fmt(tick))}</text>"
        )
    for i, (label, value, detail) in enumerate(rows):
        top = TOP + i * row_h
        short = label if len(label) <= MAX_NAME else label[: MAX_NAME - 1] + "…"
        shown = fmt(value)
        room = 8 + PHONE_CHAR * len(shown)
        # After the bar when it fits before the edge, else inside the bar's end, in white.
        if x(value) + room <= WIDTH or x(value) - left < room:
            value_text = (
                f'<text class="bar-value" x="{x(value) + 4:.1f}" y="{top + 15}" fill="{INK}">'
            )
        else:
            value_text = (
                f'<text class="bar-value" x="{x(value) - 4:.1f}" y="{top + 15}" '
                f'text-anchor="end" fill="#fff">'
            )
        parts.append(
            f"<g><title>{_e(label)}: {_e(fmt(value))}{_e(detail)}</title>"
            f'<text class="bar-label" x="{left - 6}" y="{top + 15}" text-anchor="end" '
            f'fill="{INK}">{_e(short)}</text>'
            f'<rect x="{left}" y="{top + 4}" width="{max(x(value) - left, 1):.1f}" '
            f'height="{row_h - 8}" rx="2" fill="{color}"/>'
            f"{value_text}{_e(shown)}</text>"
            "</g>"
        )
    top_row = rows[0]
    summary = (
        f"{title}: {len(rows)} entit{'y' if len(rows) == 1 else 'ies'}; the most, "
        f"{fmt(top_row[1])}, {top_row[0]}; in all {fmt(sum(v for _, v, _ in rows))}."
    )
    return _frame(title, summary, "".join(parts), height)


def _count(value: float) -> str:
    return f"{round(value):,}"
