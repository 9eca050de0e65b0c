"""Editing tool arguments on a request's page: fields generated from the tool's schema, the raw
JSON as the advanced form; checked against the schema with the message at the field; hostile
input refused with a clear message, never a 500. And the lock's tool picker."""

from __future__ import annotations

import pytest
from django.urls import reverse

from approvals.models import Approval, ApprovalStatus
from tests.factories import approval_request, make_tool

pytestmark = pytest.mark.smoke

HTMX = {"HX-Request": "true"}
SCHEMA = {
    "type": "object",
    # `x-order`: the fields' order, which PostgreSQL's jsonb does not keep by itself.
    "properties": {
        "query": {
            "type": "string",
            "minLength": 3,
            "description": "What to search for",
            "x-order": 1,
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "x-order": 2},
        "score": {"type": "number", "x-order": 3},
        "safe": {"type": "boolean", "x-order": 4},
        "engine": {"enum": ["web", "news"], "x-order": 5},
        "tags": {"type": "array", "items": {"type": "string"}, "x-order": 6},
        "filters": {"type": "object", "x-order": 7},
    },
    "required": ["query", "limit"],
    "additionalProperties": False,
}
PAYLOAD = {"query": "quarterly numbers", "limit": 5, "engine": "web", "filters": {"year": 2025}}


@pytest.fixture
def rich(acme_run):
    return approval_request(
        acme_run,
        payload=PAYLOAD,
        edit_schema=SCHEMA,
        context_snapshot={"tool": {"tool_id": "search", "name": "web_search"}},
    )


def edit(client, approval, source="fields", **fields):
    data = {"decision": "edit", "edit-source": source}
    names = {"query": 0, "limit": 1, "score": 2, "safe": 3, "engine": 4, "tags": 5}
    for name, value in fields.items():
        key = "edit-payload" if name == "payload" else f"edit-arg_{names[name]}"
        data[key] = value
    return client.post(reverse("approvals:decision", args=[approval.pk]), data, headers=HTMX)


def fresh(approval) -> Approval:
    return Approval.objects.get(pk=approval.pk)


def test_the_page_shows_a_field_for_each_simple_property(client, dave, rich):
    client.force_login(dave)
    page = client.get(reverse("approvals:detail", args=[rich.pk])).content.decode()
    assert "<legend>Tool arguments</legend>" in page
    assert 'name="edit-arg_0" value="quarterly numbers"' in page
    assert "What to search for" in page  # the description
    assert 'query <span class="required" title="required">*</span>' in page
    assert 'name="edit-arg_1" value="5"' in page and "whole number" in page
    assert '<option value="0" selected>web</option>' in page  # the enum
    assert "Edit filters in the raw JSON below." in page
    # The raw JSON is there, open: filters can only be edited in it.
    assert '<details class="raw-json" open>' in page
    assert "&quot;filters&quot;: {" in page


def test_an_edit_in_the_fields_keeps_what_they_do_not_show(client, dave, rich):
    client.force_login(dave)
    response = edit(
        client,
        rich,
        query="annual numbers",
        limit="7",
        score="2.5",
        safe="true",
        engine="1",
        tags="finance\nq3\n",
        payload="",
    )
    assert response.status_code == 200, response.content.decode()
    approval = fresh(rich)
    assert (approval.status, approval.decision) == (ApprovalStatus.APPROVED, "edit")
    assert approval.approved_payload == {
        "query": "annual numbers",
        "limit": 7,
        "score": 2.5,
        "safe": True,
        "engine": "news",
        "tags": ["finance", "q3"],
        "filters": {"year": 2025},  # not a field: kept from what was asked
    }


def test_an_optional_field_left_empty_leaves_the_property_out(client, dave, rich):
    client.force_login(dave)
    edit(client, rich, query="annual numbers", limit="5", engine="", safe="", score="", tags="")
    assert fresh(rich).approved_payload == {
        "query": "annual numbers",
        "limit": 5,
        "filters": {"year": 2025},
    }


def test_the_schema_refuses_at_the_field(client, dave, rich):
    client.force_login(dave)
    response = edit(client, rich, query="ab", limit="99")
    assert response.status_code == 422
    page = response.content.decode()
    assert 'id="id_edit-arg_0_error"' in page and "&#x27;ab&#x27; is too short" in page
    assert 'id="id_edit-arg_1_error"' in page and "99 is greater than the maximum of 50" in page
    assert fresh(rich).status == ApprovalStatus.PENDING


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("seven", "Enter a whole number, such as 42."),
        ("2.5", "Enter a whole number, such as 42."),
        ("9" * 30, "Enter a whole number between -9,007,199,254,740,991"),
        ("9" * 500, "This number is too long: at most 40 characters."),
        ("", "This field is required."),
    ],
)
def test_a_number_that_is_not_one_is_refused_at_its_field(client, dave, rich, limit, message):
    client.force_login(dave)
    response = edit(client, rich, query="fine query", limit=limit)
    assert response.status_code == 422
    page = response.content.decode()
    assert 'id="id_edit-arg_1_error"' in page
    assert message in page
    assert fresh(rich).status == ApprovalStatus.PENDING


def test_a_huge_float_and_a_nul_byte_are_refused_not_a_500(client, dave, rich):
    client.force_login(dave)
    response = edit(client, rich, query="fine\x00query", limit="5", score="1e999")
    assert response.status_code == 422
    page = response.content.decode()
    assert "Null characters are not allowed." in page
    assert "This number is too large" in page
    assert fresh(rich).status == ApprovalStatus.PENDING


def test_the_raw_json_wins_when_it_is_what_was_edited(client, dave, rich):
    client.force_login(dave)
    response = edit(
        client,
        rich,
        source="json",
        query="ignored",
        limit="1",
        payload='{"query": "from the raw box", "limit": 3, "filters": {"year": 2024}}',
    )
    assert response.status_code == 200
    assert fresh(rich).approved_payload == {
        "query": "from the raw box",
        "limit": 3,
        "filters": {"year": 2024},
    }


def test_without_a_script_a_changed_raw_json_wins_and_an_unchanged_one_leaves_the_fields(
    client, dave, rich
):
    client.force_login(dave)
    unchanged = (
        '{"query": "quarterly numbers", "limit": 5, "engine": "web", "filters": {"year": 2025}}'
    )
    edit(client, rich, source="", query="from the fields", limit="5", engine="0", payload=unchanged)
    assert fresh(rich).approved_payload["query"] == "from the fields"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ('{"query": "ok", "limit": 1e999}', "numbers must be finite"),
        ('{"query": "a\\u0000b", "limit": 1}', "text may not contain the NUL character"),
        ("[" * 5_000 + "]" * 5_000, "is nested deeper than 64 levels"),
        ('{"query": ', "This is not valid JSON"),
    ],
)
def test_hostile_raw_json_is_refused_at_the_raw_box(client, dave, rich, payload, message):
    client.force_login(dave)
    response = edit(client, rich, source="json", payload=payload)
    assert response.status_code == 422
    page = response.content.decode()
    assert 'id="id_edit-payload_error"' in page
    assert message in page
    assert fresh(rich).status == ApprovalStatus.PENDING


def test_a_hostile_schema_still_gives_a_page(client, dave, acme_run):
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string"} for i in range(500)}
        | {"ref": {"$ref": "#/nope"}, "<b>x</b>": {"type": "string", "description": "<i>d</i>"}},
    }
    approval = approval_request(acme_run, payload={"p1": "v"}, edit_schema=schema)
    client.force_login(dave)
    response = client.get(reverse("approvals:detail", args=[approval.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count('data-arg="') == 40  # the first 40 fields; the rest are edited as raw JSON
    assert "<b>x</b>" not in page and "<i>d</i>" not in page


def test_a_plan_is_edited_as_json_only(client, dave, acme_run):
    plan = [{"name": "draft", "step_type": "THOUGHT", "order": 1}]
    approval = approval_request(acme_run, subject="plan", payload=plan, edit_schema=None)
    client.force_login(dave)
    page = client.get(reverse("approvals:detail", args=[approval.pk])).content.decode()
    assert "<legend>Tool arguments</legend>" not in page
    assert 'name="edit-payload"' in page


def test_a_rejection_on_the_page_needs_a_reason_and_asks_to_confirm(client, dave, asked):
    client.force_login(dave)
    page = client.get(reverse("approvals:detail", args=[asked.pk])).content.decode()
    assert 'hx-confirm="Reject this request? The run is told your reason."' in page
    response = client.post(
        reverse("approvals:decision", args=[asked.pk]),
        {"decision": "reject", "reject-notes": "   "},
        headers=HTMX,
    )
    assert response.status_code == 422
    assert "Say why you reject it" in response.content.decode()
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_the_lock_picks_from_the_workspaces_and_the_built_in_tools(
    client, dave, acme, globex, asked
):
    make_tool(acme, "send_email")
    make_tool(globex, "globex_secret_tool")
    client.force_login(dave)
    page = client.get(reverse("approvals:detail", args=[asked.pk])).content.decode()
    assert 'name="lock_constraint-forbid_tools" value="send_email"' in page
    assert 'name="lock_constraint-forbid_tools" value="http_request"' in page
    assert "globex_secret_tool" not in page

    response = client.post(
        reverse("approvals:decision", args=[asked.pk]),
        {
            "decision": "lock_constraint",
            "lock_constraint-constraint": "No email",
            "lock_constraint-forbid_tools": ["send_emial"],
        },
        headers=HTMX,
    )
    assert response.status_code == 422
    assert "There is no tool named send_emial in this workspace" in response.content.decode()
    assert fresh(asked).status == ApprovalStatus.PENDING
