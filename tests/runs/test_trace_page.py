"""The trace page and its fragments: what the server renders first, who may see it, what a
node's details show (escaped), and that a big trace costs the same queries as a small one."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.models import LLMCall, Run, RunEvent, RunStatus, StepRun, ToolCall
from runs.store import latest_version
from tests.factories import EntityFactory, approval_request
from tests.support.runs import static_plan, step
from tests.support.traces import build_trace, nodes_in

pytestmark = pytest.mark.smoke

XSS = '<script>alert("owned")</script>'


@pytest.fixture
def kinds(acme):
    """One entity of each type, nested as the seed's hierarchy is."""
    action = EntityFactory(workspace=acme, name="parse")
    skill = EntityFactory(workspace=acme, name="extract", type="SKILL", children=[action])
    agent = EntityFactory(workspace=acme, name="analyst", type="AGENT", children=[skill])
    process = EntityFactory(workspace=acme, name="video_ad", type="PROCESS", children=[agent])
    return {"PROCESS": process, "AGENT": agent, "SKILL": skill, "ACTION": action}


@pytest.fixture
def small(kinds):
    return build_trace(kinds, 2, 2, 2)


def test_it_renders_the_root_and_its_children_on_the_server(client, alice, small):
    root = small["PROCESS"][0]
    client.force_login(alice)
    response = client.get(f"/runs/{root.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    shown = nodes_in(html)
    assert shown == [str(root.pk), *[str(agent.pk) for agent in small["AGENT"]]]
    assert "video_ad" in html and "analyst" in html
    assert "Completed" in html and "1.2 s" in html and "$0.0015" in html
    # The agents' subtrees stay collapsed, with their child count and the URL to load them.
    agent = small["AGENT"][0]
    assert f'aria-controls="children-{agent.pk}" aria-expanded="false"' in html
    assert f'data-url="/runs/{root.pk}/nodes/{agent.pk}/children/"' in html
    # What the live socket needs: where, and after which event.
    assert f'data-socket="/ws/runs/{root.pk}/"' in html
    assert 'data-after="7"' in html
    assert "hierarch/trace.js" in html and "hierarch/trace.css" in html


def test_a_run_below_the_root_shows_the_whole_trace_with_its_path_open(client, alice, small):
    root = small["PROCESS"][0]
    action = small["ACTION"][5]  # under the second agent's first skill
    skill = Run.objects.get(pk=action.parent_id)
    agent = Run.objects.get(pk=skill.parent_id)
    LLMCall.objects.create(
        run=action,
        call_key=f"{action.pk}:1",
        model_provider="local",
        model_name="offline",
        input_prompt="Parse this",
        output_response="parsed",
        prompt_tokens=3,
        completion_tokens=1,
        total_tokens=4,
        cost_usd=Decimal("0.000004"),
        latency_ms=2,
    )
    client.force_login(alice)
    html = client.get(f"/runs/{action.pk}/").content.decode()
    shown = nodes_in(html)
    assert shown[0] == str(root.pk)  # the whole trace, from its root
    for ancestor in (agent, skill, action):
        assert str(ancestor.pk) in shown
    assert f'<div id="row-{action.pk}" class="node-row status-completed is-focus">' in html
    assert f'aria-controls="children-{skill.pk}" aria-expanded="true"' in html
    other_agent = small["AGENT"][0]
    assert f'aria-controls="children-{other_agent.pk}" aria-expanded="false"' in html
    # The requested run's details are open.
    assert "local/offline" in html and "Parse this" in html
    assert len(shown) == 1 + 2 + 2 + 2  # root, agents, the agent's skills, the skill's actions


def test_another_workspaces_run_is_not_found(client, charlie, small):
    root = small["PROCESS"][0]
    action = small["ACTION"][0]
    client.force_login(charlie)
    for url in (
        f"/runs/{root.pk}/",
        f"/runs/{action.pk}/",
        f"/runs/{root.pk}/nodes/{action.pk}/",
        f"/runs/{root.pk}/nodes/{root.pk}/children/",
    ):
        assert client.get(url).status_code == 404, url
    rows = client.get(f"/runs/{root.pk}/rows/?ids={action.pk}")
    assert rows.status_code == 200 and nodes_in(rows.content.decode()) == []


def test_an_unknown_run_is_not_found_and_a_visitor_must_sign_in(client, alice, small):
    root = small["PROCESS"][0]
    response = client.get(f"/runs/{root.pk}/")
    assert response.status_code == 302 and "/login/" in response["Location"]
    client.force_login(alice)
    assert client.get(f"/runs/{uuid.uuid4()}/").status_code == 404
    assert client.get("/runs/not-a-uuid/").status_code == 404


def test_a_node_of_another_trace_is_not_found_under_this_one(client, alice, kinds, small):
    other = build_trace(kinds, 1, 1, 1)
    root = small["PROCESS"][0]
    client.force_login(alice)
    stranger = other["ACTION"][0]
    assert client.get(f"/runs/{root.pk}/nodes/{stranger.pk}/").status_code == 404
    assert client.get(f"/runs/{root.pk}/nodes/{stranger.pk}/children/").status_code == 404


def test_a_collapsed_subtree_loads_its_children_with_their_counts(client, alice, small):
    root = small["PROCESS"][0]
    agent = small["AGENT"][1]
    client.force_login(alice)
    response = client.get(f"/runs/{root.pk}/nodes/{agent.pk}/children/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    skills = [s for s in small["SKILL"] if s.parent_id == agent.pk]
    assert nodes_in(html) == [str(s.pk) for s in skills]
    assert "<html" not in html  # a fragment
    assert 'title="Show or hide its 2 child runs"' in html
    leaf = small["ACTION"][0]
    assert (
        "No child runs yet."
        in client.get(f"/runs/{root.pk}/nodes/{leaf.pk}/children/").content.decode()
    )


def test_fresh_rows_come_with_their_ancestors_and_bad_ids_are_refused(client, alice, small):
    root = small["PROCESS"][0]
    action = small["ACTION"][3]
    Run.objects.filter(pk=action.pk).update(status=RunStatus.FAILED, error_code="TOOL_ERROR")
    client.force_login(alice)
    html = client.get(f"/runs/{root.pk}/rows/?ids={action.pk}").content.decode()
    skill = Run.objects.get(pk=action.parent_id)
    assert nodes_in(html) == [str(root.pk), str(skill.parent_id), str(skill.pk), str(action.pk)]
    assert f'<div id="row-{action.pk}" class="node-row status-failed">' in html
    assert "TOOL_ERROR" in html

    refused = client.get(f"/runs/{root.pk}/rows/?ids={action.pk},nonsense")
    assert refused.status_code == 400
    assert refused.content.decode() == "ids: 'nonsense' is not a run id"
    assert client.get(f"/runs/{root.pk}/rows/").content.decode() == "ids: give at least one run id"
    many = ",".join(str(uuid.uuid4()) for _ in range(201))
    assert "at most 200" in client.get(f"/runs/{root.pk}/rows/?ids={many}").content.decode()


def test_a_nodes_details_show_what_it_recorded_escaped(client, alice, small, acme):
    root = small["PROCESS"][0]
    action = small["ACTION"][0]
    Run.objects.filter(pk=action.pk).update(
        input_data={"brief": XSS},
        output_data={"text": "done"},
        state={"note": XSS},
        error_message=f"the tool said {XSS}",
        error_code="TOOL_ERROR",
        dynamic_plan=[{"name": "Call parser", "type": "TOOL_CALL", "tool_id": "nlp_parser"}],
    )
    step = StepRun.objects.create(
        run=action,
        step_key="s1",
        position=0,
        name="Call parser",
        type="TOOL_CALL",
        status="COMPLETED",
        input={"text": XSS},
        output={"ok": True},
        started_at=timezone.now(),
    )
    LLMCall.objects.create(
        run=action,
        step=step,
        call_key=f"{action.pk}:s1:1",
        model_provider="openai",
        model_name="gpt-4o-mini",
        input_prompt="Fill the arguments <of the tool>",
        output_response=XSS,
        prompt_tokens=30,
        completion_tokens=12,
        total_tokens=42,
        cost_usd=Decimal("0.000021"),
        latency_ms=321,
    )
    ToolCall.objects.create(
        run=action,
        step=step,
        idempotency_key=f"{action.pk}:s1:1",
        tool_id="nlp_parser",
        tool_name="NLP parser",
        input_parameters={"text": "hello"},
        output_result={"html": XSS},
        success=True,
        latency_ms=17,
    )
    RunEvent.objects.create(
        trace_id=root.pk, seq=3, run=action, type="run.status", payload={"status": "FAILED"}
    )
    approval = approval_request(action)
    client.force_login(alice)
    response = client.get(f"/runs/{root.pk}/nodes/{action.pk}/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<script>" not in html
    escaped = "&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt;"
    assert html.count(escaped) == 2  # the model's answer, the error message
    # JSON columns: escaped inside the pretty-printed JSON (its quotes escaped again).
    assert html.count("&lt;script&gt;alert(\\&quot;owned\\&quot;)&lt;/script&gt;") == 4
    assert "Fill the arguments &lt;of the tool&gt;" in html
    assert "openai/gpt-4o-mini" in html and "30 + 12 = 42 tokens" in html and "321 ms" in html
    assert "nlp_parser" in html and "Succeeded" in html and "17 ms" in html
    assert (
        "Call parser" in html
        and "TOOL_CALL → nlp_parser" in html
        and "(as run, reconciled)" in html
    )
    assert "run.status" in html and "&quot;FAILED&quot;" in html
    assert f'href="/approvals/{approval.pk}/"' in html


def test_a_run_not_yet_planned_shows_its_versions_static_plan(client, alice, acme):
    action = EntityFactory(
        workspace=acme,
        name="planned",
        planning=static_plan(step(1, "First", "THOUGHT"), step(2, "Second", "THOUGHT")),
    )
    run_id = uuid.uuid4()
    Run.objects.create(
        id=run_id,
        trace_id=run_id,
        workspace=acme,
        entity=action,
        entity_version=latest_version(action),
        status=RunStatus.PENDING,
    )
    client.force_login(alice)
    html = client.get(f"/runs/{run_id}/nodes/{run_id}/").content.decode()
    assert "the pinned version's static plan" in html
    assert html.index("First") < html.index("Second")


def test_a_big_trace_costs_the_same_queries_as_a_small_one(client, alice, kinds):
    """50 nodes against 500: the page (at the root and at a deep run), a collapsed
    subtree, a node's details and a rows refresh each read a fixed number of times."""
    small = build_trace(kinds, 2, 3, 7)  # 1 + 2 + 6 + 42 = 51 runs
    big = build_trace(kinds, 5, 9, 10)  # 1 + 5 + 45 + 450 = 501 runs
    assert Run.objects.filter(trace_id=big["PROCESS"][0].pk).count() == 501
    client.force_login(alice)

    def urls(trace: dict) -> list[str]:
        root, skill, action = trace["PROCESS"][0], trace["SKILL"][-1], trace["ACTION"][-1]
        return [
            f"/runs/{root.pk}/",
            f"/runs/{action.pk}/",
            f"/runs/{root.pk}/nodes/{skill.pk}/children/",
            f"/runs/{root.pk}/nodes/{action.pk}/",
            f"/runs/{root.pk}/rows/?ids={action.pk},{skill.pk}",
        ]

    def counts(trace: dict) -> list[int]:
        found = []
        for url in urls(trace):
            with CaptureQueriesContext(connection) as queries:
                assert client.get(url).status_code == 200
            found.append(len(queries.captured_queries))
        return found

    counts(small)  # the first request's one-time reads (content types, sessions)
    small_counts, big_counts = counts(small), counts(big)
    assert small_counts == big_counts
    assert max(big_counts) <= 16, big_counts
    page = client.get(f"/runs/{big['PROCESS'][0].pk}/").content.decode()
    assert len(nodes_in(page)) == 1 + 5  # the root and its children, not 501 rows


def test_an_operator_sees_cancel_and_rerun_and_a_viewer_does_not(client, bob, acme, kinds):
    from tests.factories import UserFactory, grant, paused_run

    run = paused_run(kinds["ACTION"])
    olive = grant(UserFactory(username="olive"), acme, "operator")
    client.force_login(olive)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'action="/runs/{run.pk}/cancel/"' in html
    assert f'action="/runs/{run.pk}/rerun/"' in html
    client.force_login(bob)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "/cancel/" not in html and "/rerun/" not in html
    assert "Paused" in html
