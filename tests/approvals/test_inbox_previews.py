"""Each inbox row previews what is asked: the tool and its arguments in short, or the plan;
escaped, cut short, and as sealed as the request's page shows it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.factories import approval_request

pytestmark = pytest.mark.smoke

INBOX = reverse("approvals:inbox")


def row_of(client, approval) -> str:
    page = client.get(INBOX).content.decode()
    row = page[page.index(f'<tr id="approval-{approval.pk}"') :]
    return row[: row.index("</tr>")]


def test_a_tool_call_shows_the_tool_and_its_arguments(client, dave, acme_run):
    approval = approval_request(
        acme_run,
        payload={"query": "quarterly numbers", "limit": 5},
        context_snapshot={"tool": {"tool_id": "search", "name": "web_search"}},
    )
    client.force_login(dave)
    row = row_of(client, approval)
    assert '<code class="tool">web_search</code>' in row
    assert (
        '<span class="arg-name">query</span>='
        '<span class="arg-value">&quot;quarterly numbers&quot;</span>' in row
    )
    assert '<span class="arg-name">limit</span>=<span class="arg-value">5</span>' in row


def test_a_long_or_hostile_argument_is_cut_and_escaped(client, dave, acme_run):
    approval = approval_request(
        acme_run,
        payload={"html": "<script>alert(1)</script>" + "x" * 10_000, "deep": [[[[1]]]]},
        context_snapshot={"tool": {"tool_id": "<b>t</b>"}},
    )
    client.force_login(dave)
    row = row_of(client, approval)
    assert "<script>" not in row and "<b>t</b>" not in row
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in row
    assert "x" * 100 not in row  # cut short
    assert "…" in row
    assert "[[[…]]]" in row or "[[…]]" in row


def test_a_redacted_argument_stays_redacted(client, dave, acme_run):
    # The run store seals what a person reads (pii_handling): the row shows the sealed copy.
    approval = approval_request(
        acme_run, payload={"to": "[REDACTED:EMAIL]"}, context_snapshot={"tool": {"name": "mail"}}
    )
    client.force_login(dave)
    row = row_of(client, approval)
    assert "[REDACTED:EMAIL]" in row


def test_a_plan_shows_its_steps(client, dave, acme_run):
    plan = [{"name": f"step {i}", "step_type": "THOUGHT"} for i in range(10)]
    approval = approval_request(acme_run, subject="plan", payload=plan, edit_schema=None)
    client.force_login(dave)
    row = row_of(client, approval)
    assert "Plan of 10 steps:" in row
    assert "step 0 → step 1" in row and "step 7 → …" in row
    assert "step 9" not in row


def test_the_list_reads_in_bounded_queries(client, dave, acme_run, django_assert_max_num_queries):
    for _ in range(30):
        approval_request(acme_run)
    client.force_login(dave)
    client.get(INBOX)
    with django_assert_max_num_queries(20):
        response = client.get(INBOX)
    assert len(re.findall(r'<tr id="approval-', response.content.decode())) == 30
