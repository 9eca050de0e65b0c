"""A request's page: the explanation packet, what it asks, who may see it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import approval_request

pytestmark = pytest.mark.smoke


def detail(approval) -> str:
    return reverse("approvals:detail", args=[approval.pk])


def test_it_shows_the_explanation_packet(client, dave, acme_run):
    approval = approval_request(
        acme_run,
        reasoning_summary="The search may leak the client's name.",
        confidence={"plan": 80, "execution": None, "output": 64},
        risk_level="high",
        risk_rank=2,
        risk_factors=["calls an external service", "the query names a client"],
        alternatives=[
            {"option": "search the internal wiki", "pros": ["private"], "cons": ["stale"]},
        ],
        cost_estimate={
            "cost_so_far_usd": "0.0123",
            "estimated_to_finish_usd": "0.04",
            "tokens_consumed": 12345,
            "basis": "cost per step so far",
        },
        downstream_impact={
            "affected_steps": ["summarise", "send"],
            "reversibility": "partial",
            "time_to_complete": "about 40 s (mean of 3 completed runs)",
        },
        context_snapshot={"plan": ["search", "summarise", "send"], "cursor": 0},
        judge={"decision": "escalate", "confidence": 0.42, "rationale": "Names a client."},
    )
    client.force_login(dave)
    response = client.get(detail(approval))
    assert response.status_code == 200
    page = response.content.decode()
    for text in (
        "The search may leak the client&#x27;s name.",
        "calls an external service",
        "the query names a client",
        "80 %",
        "64 %",
        "not assessed",
        "search the internal wiki",
        "$0.0123",
        "$0.04",
        "12,345",
        "cost per step so far",
        "summarise, send",
        "partial",
        "about 40 s (mean of 3 completed runs)",
        "Names a client.",
        "42 %",
        "Tool arguments",
        "&quot;query&quot;: &quot;quarterly numbers&quot;",
        "&quot;cursor&quot;: 0",
        f'href="{reverse("runs:detail", args=[acme_run.pk])}"',  # the console's trace
    ):
        assert text in page, text
    assert reverse("admin:runs_run_change", args=[acme_run.pk]) not in page


def test_it_offers_the_four_decisions_to_an_approver(client, dave, asked):
    client.force_login(dave)
    page = client.get(detail(asked)).content.decode()
    for decision in ("approve", "edit", "reject", "lock_constraint"):
        assert f'name="decision" value="{decision}"' in page
    # The editor starts from what was asked.
    assert "&quot;query&quot;: &quot;quarterly numbers&quot;\n}</textarea>" in page
    assert 'hx-post="' in page
    # Its socket also hears when someone else decides this request.
    assert f'ws-connect="/ws/approvals/?detail={asked.pk}"' in page


def test_it_offers_only_the_decisions_the_checkpoint_allows(client, dave, acme_run):
    approval = approval_request(acme_run, allowed_decisions=["approve", "reject"])
    client.force_login(dave)
    page = client.get(detail(approval)).content.decode()
    assert 'value="approve"' in page
    assert 'value="reject"' in page
    assert 'value="edit"' not in page
    assert 'value="lock_constraint"' not in page


def test_it_shows_a_viewer_the_request_without_the_forms(client, bob, asked):
    client.force_login(bob)
    response = client.get(detail(asked))
    assert response.status_code == 200
    page = response.content.decode()
    assert 'name="decision"' not in page
    assert "Waiting for an approver of Acme." in page


def test_it_answers_404_for_another_workspaces_request(client, erin, charlie, asked):
    for person in (erin, charlie):
        client.force_login(person)
        assert client.get(detail(asked)).status_code == 404
    assert client.get(reverse("approvals:detail", args=[987654])).status_code == 404


def test_it_escapes_what_a_model_or_a_tool_wrote(client, dave, acme_run):
    approval = approval_request(
        acme_run,
        payload={"query": "<script>alert('payload')</script>"},
        reasoning_summary="<img src=x onerror=alert('summary')>",
        risk_factors=["<b>bold</b>"],
        context_snapshot={"note": "</pre><script>alert('snapshot')</script>"},
        judge={"decision": "escalate", "confidence": 0.5, "rationale": "<script>judge()</script>"},
    )
    client.force_login(dave)
    page = client.get(detail(approval)).content.decode()
    assert "<script>alert" not in page
    assert "<img src=x" not in page
    assert "<b>bold</b>" not in page
    assert "<script>judge" not in page
    assert "&lt;script&gt;alert(&#x27;payload&#x27;)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(&#x27;summary&#x27;)&gt;" in page
    assert "&lt;/pre&gt;&lt;script&gt;" in page
