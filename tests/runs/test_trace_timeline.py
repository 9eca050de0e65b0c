"""The trace page's timeline view: a row per node in the tree's order, each bar placed by its
start from the root's and sized by its duration (a running node's up to now), time on a
person drawn apart, an axis in ms, s or min, a bounded page at any size, names escaped, and
another workspace's run not found."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Approval
from runs.models import Run, RunStatus, StepRun
from runs.trace_page import MAX_TIMELINE, axis_ticks, ms_label, trace_timeline
from tests.factories import EntityFactory, approval_request
from tests.support.traces import bar_of, build_trace, place, timeline_rows

pytestmark = pytest.mark.smoke

HOSTILE = '<img src=x onerror="window.__xss=1">'


@pytest.fixture
def kinds(acme):
    action = EntityFactory(workspace=acme, name="parse")
    skill = EntityFactory(workspace=acme, name="extract", type="SKILL", children=[action])
    agent = EntityFactory(workspace=acme, name="analyst", type="AGENT", children=[skill])
    process = EntityFactory(workspace=acme, name="video_ad", type="PROCESS", children=[agent])
    return {"PROCESS": process, "AGENT": agent, "SKILL": skill, "ACTION": action}


def timeline(client, run: Run, query: str = "") -> str:
    response = client.get(f"/runs/{run.pk}/?view=timeline{query}")
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def preorder(trace: dict[str, list[Run]]) -> list[str]:
    """The trace's ids as the tree shows them: each node, then its children by group index."""
    children: dict[object, list[Run]] = {}
    for rows in trace.values():
        for run in rows:
            children.setdefault(run.parent_id, []).append(run)
    order: list[str] = []

    def walk(run: Run) -> None:
        order.append(str(run.pk))
        for child in sorted(children.get(run.pk, []), key=lambda r: r.group_index):
            walk(child)

    walk(trace["PROCESS"][0])
    return order


# -- the rows and the bars --------------------------------------------------------------------


def test_it_shows_every_node_in_the_trees_order_indented_by_depth(client, alice, kinds):
    trace = build_trace(kinds, 2, 2, 1)
    # Siblings made in the reverse of their group order: the tree (and the timeline) lists
    # them by when they were made, then by group; by depth alone the agents would come first.
    base = timezone.now()
    for rows in trace.values():
        for run in rows:
            Run.objects.filter(pk=run.pk).update(
                created_at=base + timedelta(seconds=run.depth * 10 - run.group_index)
            )
            run.group_index = -run.group_index  # the order `preorder` must find
    client.force_login(alice)
    html = timeline(client, trace["PROCESS"][0])
    assert timeline_rows(html) == preorder(trace)
    depths = re.findall(r'class="tl-name" href="[^"]+" style="--depth:(\d+)"', html)
    assert depths == ["0", "1", "2", "3", "2", "3", "1", "2", "3", "2", "3"]
    assert 'aria-current="page">Timeline' in html
    assert 'id="trace"' not in html  # the tree is the other view


def test_bars_are_placed_by_start_and_sized_by_duration(client, alice, kinds):
    trace = build_trace(kinds, 1, 1, 1)
    root, agent = trace["PROCESS"][0], trace["AGENT"][0]
    skill, action = trace["SKILL"][0], trace["ACTION"][0]
    origin = timezone.now() - timedelta(minutes=5)
    place(root, origin, 0, 10)
    place(agent, origin, 1, 4)
    place(skill, origin, 2, 2.5, status=RunStatus.FAILED)
    Run.objects.filter(pk=action.pk).update(
        status=RunStatus.PENDING, started_at=None, completed_at=None
    )
    client.force_login(alice)
    html = timeline(client, root)
    assert bar_of(html, root.pk) == (0.0, 100.0)
    assert bar_of(html, agent.pk) == (10.0, 40.0)
    assert bar_of(html, skill.pk) == (20.0, 25.0)
    assert bar_of(html, action.pk) is None  # not started: no bar
    assert "duration not started yet" in html
    assert f'id="tl-{skill.pk}" class="tl-row tl-failed"' in html
    # Hover and focus say start, duration, cost and status.
    assert "analyst · Completed · start +1 s · duration 4 s · cost $0.0015" in html
    ticks = re.findall(r'class="tl-tick" style="left:([\d.]+)%">([^<]+)<', html)
    assert ticks == [
        ("0.00", "0"),
        ("20.00", "2 s"),
        ("40.00", "4 s"),
        ("60.00", "6 s"),
        ("80.00", "8 s"),
        ("100.00", "10 s"),
    ]
    assert 'data-active="false"' in html


def test_a_running_node_reaches_now_and_grows_as_time_goes(alice, kinds):
    trace = build_trace(kinds, 1, 1, 1)
    root, action = trace["PROCESS"][0], trace["ACTION"][0]
    origin = timezone.now() - timedelta(minutes=5)
    for run in trace["PROCESS"] + trace["AGENT"] + trace["SKILL"]:
        place(run, origin, 0, None, status=RunStatus.RUNNING)
    place(action, origin, 5, None, status=RunStatus.RUNNING)

    def action_bar(seconds: float) -> tuple[float | None, float, str]:
        shown = trace_timeline(user=alice, run_id=root.pk, now=origin + timedelta(seconds=seconds))
        assert shown.active
        row = next(row for row in shown.rows if row.run.pk == action.pk)
        return row.left, row.width, row.duration

    assert action_bar(10) == (50.0, 50.0, "5 s so far")
    assert action_bar(20) == (25.0, 75.0, "15 s so far")


def test_a_page_of_a_run_that_goes_on_refreshes_and_its_fragment_brings_the_header(
    client, alice, kinds
):
    trace = build_trace(kinds, 1, 1, 1)
    root = trace["PROCESS"][0]
    Run.objects.filter(trace_id=root.pk).update(status=RunStatus.RUNNING, completed_at=None)
    client.force_login(alice)
    html = timeline(client, root)
    assert 'id="timeline-body" data-active="true"' in html
    assert f'data-refresh="/runs/{root.pk}/timeline/"' in html
    body = client.get(f"/runs/{root.pk}/timeline/").content.decode()
    assert '<div id="timeline-body" data-active="true"' in body and "<html" not in body
    assert 'id="trace-head"' in body and 'data-ended="false"' in body
    Run.objects.filter(pk=root.pk).update(status=RunStatus.COMPLETED)
    body = client.get(f"/runs/{root.pk}/timeline/").content.decode()
    assert 'data-active="false"' in body and "Ended · Completed" in body


def test_time_waiting_on_a_person_is_drawn_apart_in_the_bar(client, alice, kinds):
    trace = build_trace(kinds, 1, 1, 1)
    root, agent = trace["PROCESS"][0], trace["AGENT"][0]
    origin = timezone.now() - timedelta(minutes=5)
    place(root, origin, 0, 10)
    place(agent, origin, 1, 8)
    asked = approval_request(agent)
    Approval.objects.filter(pk=asked.pk).update(
        requested_at=origin + timedelta(seconds=3), responded_at=origin + timedelta(seconds=7)
    )
    client.force_login(alice)
    html = timeline(client, root)
    row = html[html.index(f'<li id="tl-{agent.pk}"') :]
    row = row[: row.index("</li>")]
    # The agent's bar runs 1 s to 9 s; the person took 3 s to 7 s: from 25% of it, for 50%.
    assert 'class="tl-wait" style="left:25.00%;width:50.00%"' in row
    assert 'title="Waiting on a person: 4 s"' in row
    assert "waited on a person 4 s" in row
    root_row = html[html.index(f'<li id="tl-{root.pk}"') :]
    assert "tl-wait" not in root_row[: root_row.index("</li>")]  # drawn where it was asked


def test_a_link_to_one_node_opens_its_details_beside_the_timeline(client, alice, kinds):
    trace = build_trace(kinds, 1, 1, 1)
    skill = trace["SKILL"][0]
    client.force_login(alice)
    html = timeline(client, skill)
    assert '<div id="timeline-detail" class="node-detail" aria-live="polite">' in html
    assert f'<div class="detail-body" data-run="{skill.pk}">' in html
    assert f'href="/runs/{skill.pk}/?view=timeline"' in html
    assert f'data-node="/runs/{skill.trace_id}/nodes/{skill.trace_id}/"' in html
    assert timeline_rows(html)[0] == str(trace["PROCESS"][0].pk)  # the whole trace
    root_html = timeline(client, trace["PROCESS"][0])
    assert '<div id="timeline-detail" class="node-detail" hidden' in root_html


# -- size, safety, scope ----------------------------------------------------------------------


def test_a_big_trace_shows_its_first_nodes_in_bounded_queries(
    client, alice, kinds, django_assert_max_num_queries
):
    small, big = build_trace(kinds, 1, 1, 1), build_trace(kinds, 10, 10, 10)
    client.force_login(alice)
    timeline(client, small["PROCESS"][0])  # the first request's one-time reads
    for trace in (small, big):
        for run in (trace["PROCESS"][0], trace["ACTION"][-1]):
            with django_assert_max_num_queries(15):
                html = timeline(client, run)
        with django_assert_max_num_queries(10):
            assert client.get(f"/runs/{run.trace_id}/timeline/").status_code == 200
    html = timeline(client, big["PROCESS"][0])
    assert len(timeline_rows(html)) == MAX_TIMELINE
    assert timeline_rows(html) == preorder(big)[:MAX_TIMELINE]
    assert "611 more nodes not shown" in html and "use the status filter or the search" in html
    assert "1111 nodes" in html


def test_a_filter_shows_the_nodes_it_picks_with_their_ancestors(client, alice, kinds):
    trace = build_trace(kinds, 2, 2, 1)
    failed = trace["ACTION"][3]
    Run.objects.filter(pk=failed.pk).update(status=RunStatus.FAILED)
    client.force_login(alice)
    html = timeline(client, trace["PROCESS"][0], "&status=failed")
    assert timeline_rows(html) == [str(pk) for pk in (*failed.lineage, failed.pk)]
    assert '<option value="failed" selected>' in html and "Show all" in html
    assert 'data-refresh="/runs/' in html and "status=failed" in html
    refused = client.get(f"/runs/{failed.pk}/?view=timeline&status=exploded")
    assert refused.status_code == 400


def test_names_a_model_or_a_person_wrote_are_escaped(client, alice, acme):
    hostile = EntityFactory(workspace=acme, name="hostile", identity={"display_name": HOSTILE})
    trace = build_trace({"PROCESS": hostile}, 0, 0, 0)
    root = trace["PROCESS"][0]
    child = build_trace({"PROCESS": hostile}, 0, 0, 0)["PROCESS"][0]
    Run.objects.filter(pk=child.pk).update(
        parent_id=root.pk, trace_id=root.pk, depth=1, lineage=[str(root.pk)], parent_step_key="s#1"
    )
    StepRun.objects.create(
        run_id=root.pk,
        step_key="s",
        position=0,
        name=HOSTILE,
        type="CHILD_ENTITY_INVOCATION",
        status="COMPLETED",
        started_at=timezone.now(),
    )
    client.force_login(alice)
    html = timeline(client, root)
    assert HOSTILE not in html and "<img" not in html
    assert "&lt;img src=x onerror=&quot;window.__xss=1&quot;&gt; · hostile" in html


def test_another_workspaces_run_is_not_found(client, alice, charlie, kinds):
    trace = build_trace(kinds, 1, 1, 1)
    client.force_login(charlie)
    for run in (trace["PROCESS"][0], trace["ACTION"][0]):
        assert client.get(f"/runs/{run.pk}/?view=timeline").status_code == 404
        assert client.get(f"/runs/{run.pk}/timeline/").status_code == 404
    client.force_login(alice)
    assert client.get(f"/runs/{uuid.uuid4()}/?view=timeline").status_code == 404


# -- the axis ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("span_ms", "labels"),
    [
        (80, ["0", "20 ms", "40 ms", "60 ms", "80 ms"]),
        (2_300, ["0", "500 ms", "1 s", "1.5 s", "2 s"]),
        (150_000, ["0", "30 s", "1 min", "1 min 30 s", "2 min", "2 min 30 s"]),
        (7_200_000, ["0", "30 min", "1 h", "1 h 30 min", "2 h"]),
    ],
)
def test_the_axis_has_a_few_round_ticks_in_a_readable_unit(span_ms, labels):
    ticks = axis_ticks(span_ms)
    assert [tick.label for tick in ticks] == labels
    assert ticks[0].left == 0 and all(0 <= tick.left <= 100 for tick in ticks)
    assert 2 <= len(ticks) <= 6


def test_times_read_in_their_unit():
    assert [ms_label(ms) for ms in (0, 4.5, 250, 1000, 1500, 60_000, 3_900_000)] == [
        "0",
        "4.5 ms",
        "250 ms",
        "1 s",
        "1.5 s",
        "1 min",
        "1 h 5 min",
    ]
