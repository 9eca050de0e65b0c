"""The trace page as a person reads it: a header that says whether the run can still change,
arrows that match what is open, child rows named by the plan step that started them, entity
names (not refs) in the plan, the status filter, the search and the failed path, the model
call whose response was not logged, and counters split into a node's own and its
descendants'."""

from __future__ import annotations

import re
import uuid
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.models import LLMCall, Run, RunStatus, StepRun
from tests.factories import EntityFactory, UserFactory, grant, paused_run
from tests.support.runs_api import finished_run
from tests.support.traces import build_trace

pytestmark = pytest.mark.smoke


@pytest.fixture
def kinds(acme):
    action = EntityFactory(workspace=acme, name="parse", identity={"display_name": "Parse It"})
    skill = EntityFactory(workspace=acme, name="extract", type="SKILL", children=[action])
    agent = EntityFactory(
        workspace=acme,
        name="analyst",
        type="AGENT",
        children=[skill],
        metadata={"id": "agent-001"},
        identity={"display_name": "Content Analyst"},
    )
    process = EntityFactory(workspace=acme, name="video_ad", type="PROCESS", children=[agent])
    return {"PROCESS": process, "AGENT": agent, "SKILL": skill, "ACTION": action}


@pytest.fixture
def olive(acme):
    return grant(UserFactory(username="olive"), acme, "operator")


def name_steps(trace: dict[str, list[Run]]) -> None:
    """Every parent records one step per child, named after its place, and each child points
    at the step that started it (as the engine keys it: step key, '#', iteration)."""
    now = timezone.now()
    steps = []
    for kind in ("AGENT", "SKILL", "ACTION"):
        for run in trace[kind]:
            key = f"s-{run.group_index}"
            steps.append(
                StepRun(
                    run_id=run.parent_id,
                    step_key=key,
                    position=run.group_index,
                    name=f"{kind.title()} step {run.group_index + 1}",
                    type="CHILD_ENTITY_INVOCATION",
                    status="COMPLETED",
                    started_at=now,
                )
            )
            Run.objects.filter(pk=run.pk).update(parent_step_key=f"{key}#1")
    StepRun.objects.bulk_create(steps)


def toggles(html: str) -> dict[str, tuple[str, bool]]:
    """Per node with children: its arrow's aria-expanded, and whether its list is hidden."""
    found = {}
    for node, expanded in re.findall(
        r'aria-controls="children-([0-9a-f-]{36})" aria-expanded="(true|false)"', html
    ):
        hidden = re.search(rf'<ul id="children-{node}" [^>]*\bhidden\b[^>]*>', html) is not None
        found[node] = (expanded, hidden)
    return found


# -- the header -------------------------------------------------------------------------------


def test_it_shows_an_ended_run_as_ended_without_live_or_cancel(client, olive, kinds):
    trace = build_trace(kinds, 1, 1, 1)
    root = trace["PROCESS"][0]
    client.force_login(olive)
    html = client.get(f"/runs/{root.pk}/").content.decode()
    assert 'id="trace-head" class="trace-actions" data-status="completed" data-ended="true"' in html
    assert 'data-state="ended"' in html and "Ended · Completed" in html
    assert "Connecting" not in html and "Live" not in html
    assert "/cancel/" not in html and "Cancel run" not in html
    assert f'action="/runs/{root.pk}/rerun/"' in html  # an ended run may run again


def test_it_shows_a_run_that_can_still_change_as_live_with_cancel(client, olive, kinds):
    for status in (RunStatus.PAUSED, RunStatus.BLOCKED):
        run = paused_run(kinds["ACTION"])
        Run.objects.filter(pk=run.pk).update(status=status)
        client.force_login(olive)
        html = client.get(f"/runs/{run.pk}/").content.decode()
        assert 'data-ended="false"' in html, status
        assert 'data-state="connecting"' in html and "Ended" not in html, status
        assert f'action="/runs/{run.pk}/cancel/"' in html, status


def test_a_rows_refresh_brings_the_header_so_a_run_that_ends_loses_live_and_cancel(
    client, olive, kinds
):
    trace = build_trace(kinds, 1, 1, 1)
    root, action = trace["PROCESS"][0], trace["ACTION"][0]
    Run.objects.filter(trace_id=root.pk).update(status=RunStatus.RUNNING)
    client.force_login(olive)
    html = client.get(f"/runs/{root.pk}/rows/?ids={action.pk}").content.decode()
    assert 'data-ended="false"' in html and "Cancel run" in html
    Run.objects.filter(trace_id=root.pk).update(status=RunStatus.FAILED)
    html = client.get(f"/runs/{root.pk}/rows/?ids={action.pk}").content.decode()
    assert 'id="trace-head"' in html and 'data-ended="true"' in html
    assert "Ended · Failed" in html and "Cancel run" not in html
    # A viewer's header has no actions either way.
    client.force_login(UserFactory(username="vic"))
    assert client.get(f"/runs/{root.pk}/rows/?ids={action.pk}").status_code == 200


# -- arrows and what is open -------------------------------------------------------------------


def test_every_arrow_says_whether_its_children_are_shown(client, alice, kinds):
    trace = build_trace(kinds, 2, 2, 2)
    root, action = trace["PROCESS"][0], trace["ACTION"][-1]
    client.force_login(alice)
    for url in (f"/runs/{root.pk}/", f"/runs/{action.pk}/"):
        html = client.get(url).content.decode()
        shown = toggles(html)
        assert shown, url
        for node, (expanded, hidden) in shown.items():
            assert (expanded == "true") is (not hidden), (url, node)
    # The deep link opens the path: root, second agent, its second skill.
    shown = toggles(client.get(f"/runs/{action.pk}/").content.decode())
    skill = Run.objects.get(pk=action.parent_id)
    assert shown[str(root.pk)] == ("true", False)
    assert shown[str(skill.parent_id)] == ("true", False)
    assert shown[str(skill.pk)] == ("true", False)
    assert shown[str(trace["AGENT"][0].pk)] == ("false", True)


# -- child rows named by their step, entity names in the plan ---------------------------------


def test_child_rows_are_named_by_the_plan_step_that_started_them(client, alice, kinds):
    trace = build_trace(kinds, 2, 2, 1)
    name_steps(trace)
    root, agent = trace["PROCESS"][0], trace["AGENT"][1]
    client.force_login(alice)
    html = client.get(f"/runs/{root.pk}/").content.decode()
    assert re.search(r'class="node-step"[^>]*>Agent step 1</span>\s*<a class="node-name"', html)
    assert "Agent step 2" in html and "analyst" in html
    children = client.get(f"/runs/{root.pk}/nodes/{agent.pk}/children/").content.decode()
    assert "Skill step 1" in children and "Skill step 2" in children
    skill = trace["SKILL"][-1]
    action = trace["ACTION"][-1]
    rows = client.get(f"/runs/{root.pk}/rows/?ids={action.pk}").content.decode()
    assert "Action step 1" in rows and "Skill step 2" in rows and "Agent step 2" in rows
    detail = client.get(f"/runs/{root.pk}/nodes/{skill.pk}/").content.decode()
    assert "Started by step" in detail and "Skill step 2" in detail
    # The root was started by no step: no step name on its row.
    root_row = html[html.index(f'id="row-{root.pk}"') : html.index(f'id="activity-{root.pk}"')]
    assert "node-step" not in root_row


def test_the_plan_names_its_entities_not_their_refs(client, alice, kinds, acme):
    trace = build_trace(kinds, 1, 1, 1)
    root = trace["PROCESS"][0]
    skill = kinds["SKILL"]
    Run.objects.filter(pk=root.pk).update(
        dynamic_plan=[
            {"name": "Analyse", "type": "CHILD_ENTITY_INVOCATION", "target_entity": "agent-001"},
            {
                "name": "Extract",
                "type": "CHILD_ENTITY_INVOCATION",
                "target": {"entity_id": str(skill.pk)},
            },
            {"name": "Parse", "type": "TOOL_CALL", "tool_id": "nlp_parser"},
            {"name": "Elsewhere", "type": "CHILD_ENTITY_INVOCATION", "target_entity": "gone-9"},
        ]
    )
    client.force_login(alice)
    html = client.get(f"/runs/{root.pk}/nodes/{root.pk}/").content.decode()
    assert "CHILD_ENTITY_INVOCATION → Content Analyst" in html  # its display name
    assert "CHILD_ENTITY_INVOCATION → extract" in html  # no display name: its name
    assert "TOOL_CALL → nlp_parser" in html
    assert "agent-001" not in html and str(skill.pk) not in html
    assert "→ gone-9" in html  # an entity no longer there keeps its ref


def test_the_plan_does_not_name_another_workspaces_entity(client, alice, kinds, globex):
    EntityFactory(
        workspace=globex,
        name="secret",
        type="AGENT",
        metadata={"id": "agent-777"},
        identity={"display_name": "Globex Secret"},
    )
    trace = build_trace(kinds, 1, 1, 1)
    root = trace["PROCESS"][0]
    Run.objects.filter(pk=root.pk).update(
        dynamic_plan=[
            {"name": "x", "type": "CHILD_ENTITY_INVOCATION", "target_entity": "agent-777"}
        ]
    )
    client.force_login(alice)
    html = client.get(f"/runs/{root.pk}/nodes/{root.pk}/").content.decode()
    assert "Globex Secret" not in html and "→ agent-777" in html


# -- the status filter, the search, the failed path --------------------------------------------


def test_the_failed_filter_finds_the_failed_nodes_and_the_ancestors_to_open(client, alice, kinds):
    trace = build_trace(kinds, 2, 2, 2)
    root = trace["PROCESS"][0]
    failed = [trace["ACTION"][1], trace["ACTION"][6]]
    Run.objects.filter(pk__in=[run.pk for run in failed]).update(status=RunStatus.FAILED)
    client.force_login(alice)
    found = client.get(f"/runs/{root.pk}/find/?status=failed").json()
    assert set(found["matches"]) == {str(run.pk) for run in failed}
    ancestors = {a for run in failed for a in Run.objects.get(pk=run.pk).lineage}
    assert set(found["open"]) == ancestors and str(root.pk) in found["open"]
    assert found["more"] is False
    completed = client.get(f"/runs/{root.pk}/find/?status=completed").json()
    assert len(completed["matches"]) == 15 - 2


def test_the_search_finds_nodes_by_entity_or_step_name(client, alice, kinds):
    trace = build_trace(kinds, 2, 1, 1)
    name_steps(trace)
    root = trace["PROCESS"][0]
    client.force_login(alice)
    by_display = client.get(f"/runs/{root.pk}/find/?q=parse+it").json()
    assert set(by_display["matches"]) == {str(run.pk) for run in trace["ACTION"]}
    by_step = client.get(f"/runs/{root.pk}/find/?q=agent+step+2").json()
    assert by_step["matches"] == [str(trace["AGENT"][1].pk)]
    assert by_step["open"] == [str(root.pk)]
    both = client.get(f"/runs/{root.pk}/find/?q=extract&status=failed").json()
    assert both["matches"] == []


def test_a_find_refuses_a_bad_status_and_another_workspaces_trace(client, alice, charlie, kinds):
    trace = build_trace(kinds, 1, 1, 1)
    root = trace["PROCESS"][0]
    client.force_login(alice)
    refused = client.get(f"/runs/{root.pk}/find/?status=exploded")
    assert refused.status_code == 400 and "exploded" in refused.content.decode()
    assert client.get(f"/runs/{root.pk}/find/?q={'x' * 101}").status_code == 400
    nul = client.get(f"/runs/{root.pk}/find/", {"q": "a\x00b"})
    assert nul.status_code == 400 and "NUL" in nul.content.decode()
    assert client.get(f"/runs/{uuid.uuid4()}/find/?status=failed").status_code == 404
    action = trace["ACTION"][0]  # a run of the trace, not its root
    assert client.get(f"/runs/{action.pk}/find/?status=failed").status_code == 404
    client.force_login(charlie)
    assert client.get(f"/runs/{root.pk}/find/?status=failed").status_code == 404


def test_a_find_costs_the_same_queries_in_a_big_trace(client, alice, kinds):
    small, big = build_trace(kinds, 1, 2, 2), build_trace(kinds, 4, 6, 8)
    for trace in (small, big):
        name_steps(trace)
        Run.objects.filter(pk=trace["ACTION"][-1].pk).update(status=RunStatus.FAILED)
    client.force_login(alice)

    def counted(trace: dict) -> list[int]:
        root = trace["PROCESS"][0]
        found = []
        for query in ("status=failed", "q=step", "q=parse&status=completed"):
            with CaptureQueriesContext(connection) as queries:
                assert client.get(f"/runs/{root.pk}/find/?{query}").status_code == 200
            found.append(len(queries.captured_queries))
        return found

    counted(small)
    assert counted(small) == counted(big)
    assert max(counted(big)) <= 10


def test_the_page_with_step_names_and_own_counts_stays_bounded(
    client, alice, kinds, django_assert_max_num_queries
):
    trace = build_trace(kinds, 5, 6, 6)
    name_steps(trace)
    root, action = trace["PROCESS"][0], trace["ACTION"][-1]
    client.force_login(alice)
    client.get(f"/runs/{root.pk}/")  # the first request's one-time reads
    for url in (
        f"/runs/{root.pk}/",
        f"/runs/{action.pk}/",
        f"/runs/{root.pk}/nodes/{trace['AGENT'][0].pk}/children/",
        f"/runs/{root.pk}/rows/?ids={action.pk}",
        f"/runs/{root.pk}/nodes/{root.pk}/",
    ):
        with django_assert_max_num_queries(16):
            assert client.get(url).status_code == 200


# -- the model call box, and own counts -------------------------------------------------------


def call(run: Run, response: str, prompt: str = "Hello", **fields) -> LLMCall:
    return LLMCall.objects.create(
        run=run,
        call_key=f"{run.pk}:{uuid.uuid4()}",
        model_provider="local",
        model_name="offline",
        input_prompt=prompt,
        output_response=response,
        prompt_tokens=3,
        completion_tokens=1,
        total_tokens=4,
        cost_usd=Decimal("0.000004"),
        latency_ms=2,
        **fields,
    )


def one_run(entity) -> Run:
    return finished_run(entity, ms=1000)


def detail_of(client, run: Run) -> str:
    return client.get(f"/runs/{run.trace_id}/nodes/{run.pk}/").content.decode()


def test_a_response_left_out_of_the_log_says_why(client, alice, acme):
    client.force_login(alice)
    minimal = EntityFactory(
        workspace=acme, name="quiet", governance={"human_oversight": {"audit_level": "MINIMAL"}}
    )
    run = one_run(minimal)
    call(run, "", prompt="[system] [not logged: this entity's audit settings leave it out]")
    html = detail_of(client, run)
    assert "Not logged: this entity&#x27;s audit settings leave the model&#x27;s text out" in html
    assert "(audit level MINIMAL)" in html
    assert 'class="json response"' not in html

    redacting = EntityFactory(
        workspace=acme, name="private", governance={"human_oversight": {"pii_handling": "REDACT"}}
    )
    run = one_run(redacting)
    call(run, "[REDACTED:EMAIL]")
    html = detail_of(client, run)
    assert "Not logged in clear: personal data handling (REDACT)" in html
    assert 'class="json response">[REDACTED:EMAIL]' in html

    plain = EntityFactory(workspace=acme, name="plain")
    run = one_run(plain)
    call(run, "", metadata={"parsed": {"answer": "<b>42</b>"}})
    html = detail_of(client, run)
    assert "it answered with structured data" in html
    assert "&lt;b&gt;42&lt;/b&gt;" in html and "<b>42</b>" not in html

    run = one_run(plain)
    call(run, "")
    assert "The model answered with no text" in detail_of(client, run)

    run = one_run(plain)
    call(run, "<i>an answer</i>", metadata={"parsed": {"answer": "x"}})
    html = detail_of(client, run)
    assert 'class="json response">&lt;i&gt;an answer&lt;/i&gt;' in html
    assert "Structured answer" not in html and "Not logged" not in html


def test_counts_say_which_are_the_nodes_own_and_which_its_descendants(client, alice, kinds):
    trace = build_trace(kinds, 2, 1, 1)
    root = trace["PROCESS"][0]
    agents = trace["AGENT"]
    # Counters include the runs below: the root's 1,000 tokens are its own 400 and its two
    # agents' 250 and 350 (each with what is below it).
    Run.objects.filter(pk=root.pk).update(
        total_tokens=1000, total_cost_usd=Decimal("0.01"), llm_calls=9, tool_calls=4
    )
    Run.objects.filter(pk=agents[0].pk).update(
        total_tokens=250, total_cost_usd=Decimal("0.002"), llm_calls=3, tool_calls=1
    )
    Run.objects.filter(pk=agents[1].pk).update(
        total_tokens=350, total_cost_usd=Decimal("0.003"), llm_calls=2, tool_calls=2
    )
    client.force_login(alice)
    html = client.get(f"/runs/{root.pk}/").content.decode()
    row = html[html.index(f'id="row-{root.pk}"') : html.index(f'id="activity-{root.pk}"')]
    assert "1000 tok" in row and "(own 400)" in row
    assert "$0.01" in row and "(own $0.005)" in row
    detail = detail_of(client, root)
    assert "400 own · 1000 with the runs below" in detail
    assert "4 / 1 own · 9 / 4 with the runs below" in detail
    action = trace["ACTION"][0]
    leaf = detail_of(client, action)
    assert "100 own (no runs below)" in leaf
