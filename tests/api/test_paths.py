"""One path convention for the API: no trailing slash, as the schema lists every path; the
same address with a trailing slash (the habit of DRF users, and the old `/api/v1/approvals/`)
is answered by the same view, whatever the method, body included."""

from __future__ import annotations

import re

import pytest

from approvals.models import ApprovalStatus
from tests.api.checks import error_of
from tests.factories import grant, make_tool

DOCUMENTATION = {"/api/v1/schema/", "/api/v1/docs/"}  # pages, not resources


@pytest.fixture
def schema(api, db) -> dict:
    return api.get("/api/v1/schema/", {"format": "json"}).json()


@pytest.fixture
def real(acme, dave, acme_request) -> dict[str, str]:
    """A value for each path parameter that names something of Acme's."""
    grant(dave, acme, "designer", "operator", "admin")
    tool = make_tool(acme, "echo")
    return {
        "entities": str(acme_request.run.entity_id),
        "runs": str(acme_request.run_id),
        "approvals": str(acme_request.pk),
        "tools": str(tool.pk),
        "workspaces": "acme",
        "version": "1.0.0",
    }


def address(path: str, real: dict[str, str]) -> str:
    collection = path.split("/")[3]
    return re.sub(
        r"\{(\w+)\}",
        lambda m: real["version"] if m.group(1) == "version" else real[collection],
        path,
    )


def test_every_path_of_the_schema_has_no_trailing_slash(schema):
    slashed = [path for path in schema["paths"] if path.endswith("/")]

    assert slashed == []
    assert "/api/v1/approvals" in schema["paths"]


def test_every_read_answers_the_same_with_a_trailing_slash(api, dave, schema, real):
    api.force_login(dave)
    reads = [path for path, methods in schema["paths"].items() if "get" in methods]
    assert len(reads) >= 12

    for path in reads:
        plain, slashed = address(path, real), address(path, real) + "/"
        first, second = api.get(plain), api.get(slashed)

        assert first.status_code == 200, (plain, first.content[:300])
        assert second.status_code == 200, slashed
        if "webhook-secret" not in path:  # made on first need, the same thereafter
            assert first.json() == second.json(), path


def test_every_write_reaches_the_same_view_with_a_trailing_slash(api, dave, schema, real):
    api.force_login(dave)
    writes = [
        (method, path)
        for path, methods in schema["paths"].items()
        for method in methods
        if method in {"post", "put", "patch", "delete"}
    ]
    assert len(writes) >= 8

    for method, path in writes:
        # A body no write takes: each view refuses it the same way, naming the field, which
        # it can only do if the body reached it.
        answers = [
            getattr(api, method)(where, {"no_such_field": 1}, format="json")
            for where in (address(path, real), address(path, real) + "/")
        ]

        assert answers[0].status_code == answers[1].status_code, (method, path)
        if answers[0].status_code < 400:  # a write that takes no body (cancel, rerun) did it
            assert set(answers[0].json()) == set(answers[1].json()), (method, path)
        else:
            assert answers[0].json() == answers[1].json(), (method, path)


def test_a_decision_posted_to_the_old_address_with_a_slash_is_taken(api, dave, acme_request):
    api.force_login(dave)

    response = api.post(
        f"/api/v1/approvals/{acme_request.pk}/decision/", {"decision": "approve"}, format="json"
    )

    assert response.status_code == 200, response.content
    acme_request.refresh_from_db()
    assert acme_request.status == ApprovalStatus.APPROVED


def test_the_old_approvals_list_address_still_answers(api, dave, acme_request):
    api.force_login(dave)

    old, new = api.get("/api/v1/approvals/"), api.get("/api/v1/approvals")

    assert old.status_code == new.status_code == 200
    assert old.json() == new.json()
    assert new.json()["results"][0]["url"] == f"/api/v1/approvals/{acme_request.pk}"


def test_an_address_that_is_no_endpoint_either_way_is_a_json_404(api, dave):
    api.force_login(dave)

    for where in ("/api/v1/nothing", "/api/v1/nothing/", "/api/v1/entities//"):
        body = error_of(api.get(where), 404, "NOT_FOUND")
        assert "the endpoints are listed at /api/v1/docs/" in body["error"]["message"]


def test_a_post_with_a_slash_and_a_token_needs_no_csrf_token(client, dave, acme_request):
    from governance.tokens import api_token_create

    _, token = api_token_create(user=dave, name="script")
    # Django's client enforces CSRF here, as a browser would meet it.
    client.handler.enforce_csrf_checks = True

    response = client.post(
        f"/api/v1/approvals/{acme_request.pk}/decision/",
        {"decision": "reject", "notes": "no"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )

    assert response.status_code == 200, response.content


def test_a_session_post_with_a_slash_still_needs_the_csrf_token(client, dave, acme_request):
    client.handler.enforce_csrf_checks = True
    client.force_login(dave)

    response = client.post(
        f"/api/v1/approvals/{acme_request.pk}/decision/",
        {"decision": "approve"},
        content_type="application/json",
    )

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "CSRF_FAILED"


def test_the_schema_and_docs_pages_answer_without_their_slash_too(api, dave):
    api.force_login(dave)

    assert api.get("/api/v1/schema", {"format": "json"}).status_code == 200
    assert api.get("/api/v1/docs").status_code == 200
