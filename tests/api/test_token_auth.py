"""`Authorization: Bearer hrc_…` on the API: a valid token acts as its user, in their
workspaces only; an expired, revoked, unknown or malformed one answers 401
AUTHENTICATION_FAILED with a `Bearer` challenge and a message that says what to do; a token
request needs no CSRF token while a session request still does."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from approvals.models import ApprovalStatus
from governance.models import ApiToken
from governance.tokens import api_token_create, api_token_revoke, token_hash
from tests.api.checks import error_of
from tests.factories import UserFactory

pytestmark = pytest.mark.smoke

LIST = "/api/v1/approvals"
CHALLENGE = 'Bearer realm="api"'


def bearer(plaintext: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {plaintext}"}


def token_of(user, **kwargs) -> tuple[ApiToken, str]:
    return api_token_create(user=user, name="script", **kwargs)


def refused(response, fragment: str) -> dict:
    body = error_of(response, 401, "AUTHENTICATION_FAILED")
    assert response["WWW-Authenticate"] == CHALLENGE
    assert fragment in body["error"]["message"], body
    assert body["retryable"] is False
    return body


def test_a_valid_token_lists_the_users_requests(api, dave, acme_request):
    _, plaintext = token_of(dave)

    response = api.get(LIST, **bearer(plaintext))

    assert response.status_code == 200, response.content
    assert [item["id"] for item in response.json()["results"]] == [acme_request.pk]


def test_the_scheme_name_is_read_in_any_case(api, dave, acme_request):
    _, plaintext = token_of(dave)

    response = api.get(LIST, HTTP_AUTHORIZATION=f"bearer {plaintext}")

    assert response.status_code == 200, response.content


def test_a_token_sees_only_its_users_workspaces(api, charlie, acme_request, globex_request):
    _, plaintext = token_of(charlie)

    listing = api.get(LIST, **bearer(plaintext))
    theirs = api.get(f"/api/v1/approvals/{acme_request.pk}", **bearer(plaintext))

    assert [item["id"] for item in listing.json()["results"]] == [globex_request.pk]
    error_of(theirs, 404, "NOT_FOUND")


def test_an_expired_token_is_refused_with_when_and_where_to_make_a_new_one(api, dave, acme_request):
    token, plaintext = token_of(dave, expires_at=timezone.now() + timedelta(days=1))
    expired = timezone.now() - timedelta(hours=1)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=expired)

    body = refused(api.get(LIST, **bearer(plaintext)), "the token has expired on ")

    assert expired.strftime("%Y-%m-%d %H:%M UTC") in body["error"]["message"]
    assert "create a new one at /account/tokens/" in body["error"]["message"]
    assert plaintext not in str(body)


def test_a_revoked_token_is_refused(api, dave, acme_request):
    token, plaintext = token_of(dave)
    api_token_revoke(token=token, user=dave)

    body = refused(api.get(LIST, **bearer(plaintext)), "the token was revoked")

    assert "create a new one at /account/tokens/" in body["error"]["message"]


@pytest.mark.parametrize(
    "header, fragment",
    [
        ("Bearer garbage", "the Bearer token is malformed"),
        ("Bearer hrc_short", "the Bearer token is malformed"),
        ("Bearer hrc_" + "a" * 43 + " extra", "the Bearer token is malformed"),
        ("Bearer ", "the Authorization header has no token after Bearer"),
        ("Bearer", "the Authorization header has no token after Bearer"),
        ("Bearer hrc_" + "b" * 43, "no such token"),
    ],
)
def test_a_token_that_is_not_one_is_refused_without_repeating_it(
    api, dave, acme_request, header, fragment
):
    body = refused(api.get(LIST, HTTP_AUTHORIZATION=header), fragment)

    credentials = header.partition(" ")[2]
    assert not credentials or credentials not in body["error"]["message"]


def test_a_token_that_is_not_ascii_is_refused(api, dave, acme_request):
    # The header as a client may send it: bytes that are not ASCII.
    response = api.get(LIST, HTTP_AUTHORIZATION="Bearer hrc_\u00e9t\u00e9")

    refused(response, "the Bearer token is malformed")


def test_the_token_of_an_inactive_user_is_refused(api, acme_request):
    user = UserFactory(username="leaver")
    _, plaintext = token_of(user)
    user.is_active = False
    user.save(update_fields=["is_active"])

    refused(api.get(LIST, **bearer(plaintext)), "the token's user is inactive")


def test_no_header_and_no_session_is_not_authenticated_with_the_bearer_challenge(api, acme_request):
    response = api.get(LIST)

    error_of(response, 401, "NOT_AUTHENTICATED")
    assert response["WWW-Authenticate"] == CHALLENGE


def test_another_scheme_falls_through_to_the_session(api, dave, acme_request):
    anonymous = api.get(LIST, HTTP_AUTHORIZATION="Basic ZGF2ZTpwYXNzd29yZA==")
    api.force_login(dave)
    signed_in = api.get(LIST, HTTP_AUTHORIZATION="Basic ZGF2ZTpwYXNzd29yZA==")

    error_of(anonymous, 401, "NOT_AUTHENTICATED")
    assert signed_in.status_code == 200, signed_in.content


def test_a_bad_token_is_refused_even_with_a_session(api, dave, acme_request):
    api.force_login(dave)

    refused(api.get(LIST, HTTP_AUTHORIZATION="Bearer hrc_" + "c" * 43), "no such token")


def test_a_token_post_needs_no_csrf_token(dave, acme_request):
    client = APIClient(enforce_csrf_checks=True)
    _, plaintext = token_of(dave)

    response = client.post(
        f"/api/v1/approvals/{acme_request.pk}/decision",
        {"decision": "approve", "notes": "from a script"},
        **bearer(plaintext),
    )

    assert response.status_code == 200, response.content
    assert response.json()["responded_by"] == "dave"
    acme_request.refresh_from_db()
    assert acme_request.status == ApprovalStatus.APPROVED


def test_a_session_post_without_a_csrf_token_is_still_refused(dave, acme_request):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(dave)

    response = client.post(f"/api/v1/approvals/{acme_request.pk}/decision", {"decision": "approve"})

    error_of(response, 403, "CSRF_FAILED")
    acme_request.refresh_from_db()
    assert acme_request.status == ApprovalStatus.PENDING


def test_a_request_notes_when_the_token_was_last_used_at_most_once_a_minute(
    api, dave, acme_request
):
    token, plaintext = token_of(dave)
    assert token.last_used_at is None

    before = timezone.now()
    assert api.get(LIST, **bearer(plaintext)).status_code == 200
    token.refresh_from_db()
    first_use = token.last_used_at
    assert first_use is not None and first_use >= before

    with CaptureQueriesContext(connection) as queries:
        assert api.get(LIST, **bearer(plaintext)).status_code == 200
    token.refresh_from_db()
    assert token.last_used_at == first_use
    assert not [q for q in queries if "governance_apitoken" in q["sql"] and "UPDATE" in q["sql"]]

    # A minute later the next request writes it again.
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first_use - timedelta(seconds=61))
    assert api.get(LIST, **bearer(plaintext)).status_code == 200
    token.refresh_from_db()
    assert token.last_used_at > first_use


def test_the_token_is_found_by_its_hash(dave):
    token, plaintext = token_of(dave)

    assert ApiToken.objects.get(key_hash=token_hash(plaintext)) == token
    assert not ApiToken.objects.filter(key_hash=plaintext).exists()


def test_the_schema_documents_the_bearer_scheme(api, db):
    schema = api.get("/api/v1/schema/", {"format": "json"}).json()

    scheme = schema["components"]["securitySchemes"]["bearerAuth"]
    assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
    operation = schema["paths"]["/api/v1/approvals"]["get"]
    assert {"bearerAuth": []} in operation["security"]
