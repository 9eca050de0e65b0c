"""Every error of the API answers seed 001's error object, whatever raised it: DRF itself,
Django's routing, the throttle, CSRF, or a bug."""

from __future__ import annotations

import logging

from rest_framework.test import APIClient
from rest_framework.throttling import UserRateThrottle

from approvals import api as approvals_api
from tests.api.checks import error_of


def test_an_anonymous_request_is_refused_with_401(api, acme_request):
    listing = api.get("/api/v1/approvals")
    deciding = api.post(f"/api/v1/approvals/{acme_request.pk}/decision", {"decision": "approve"})

    for response in (listing, deciding):
        body = error_of(response, 401, "NOT_AUTHENTICATED")
        assert response["WWW-Authenticate"] == 'Bearer realm="api"'
        assert body["retryable"] is False
    acme_request.refresh_from_db()
    assert acme_request.status == "PENDING"


def test_an_anonymous_request_for_another_workspace_learns_nothing(api, acme_request):
    known = api.get(f"/api/v1/approvals/{acme_request.pk}")
    unknown = api.get("/api/v1/approvals/999999")

    assert error_of(known, 401, "NOT_AUTHENTICATED") == error_of(unknown, 401, "NOT_AUTHENTICATED")


def test_a_method_the_endpoint_does_not_take_answers_405(api, dave, acme_request):
    api.force_login(dave)

    put = api.put(f"/api/v1/approvals/{acme_request.pk}/decision", {"decision": "approve"})
    delete = api.delete(f"/api/v1/approvals/{acme_request.pk}")

    assert (
        'Method "PUT" not allowed' in error_of(put, 405, "METHOD_NOT_ALLOWED")["error"]["message"]
    )
    assert put["Allow"] == "POST, OPTIONS"
    error_of(delete, 405, "METHOD_NOT_ALLOWED")


def test_a_client_that_accepts_only_html_answers_406_in_json(api, dave, acme_request):
    api.force_login(dave)

    error_of(api.get("/api/v1/approvals", HTTP_ACCEPT="text/html"), 406, "NOT_ACCEPTABLE")


def test_a_body_that_is_not_json_answers_415(api, dave, acme_request):
    api.force_login(dave)
    url = f"/api/v1/approvals/{acme_request.pk}/decision"

    form = api.post(url, {"decision": "approve"}, format="multipart")
    text = api.post(url, data="decision=approve", content_type="text/plain")

    body = error_of(form, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert "multipart/form-data" in body["error"]["message"]
    error_of(text, 415, "UNSUPPORTED_MEDIA_TYPE")


def test_an_unknown_address_under_the_api_answers_404_in_the_error_object(api, dave):
    api.force_login(dave)

    body = error_of(api.get("/api/v1/nothing/here"), 404, "NOT_FOUND")

    assert body["error"]["message"] == (
        "no API endpoint at /api/v1/nothing/here (the endpoints are listed at /api/v1/docs/)"
    )


def test_too_many_requests_answer_429_retryable_with_a_backoff(api, dave, monkeypatch):
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "2/minute")
    api.force_login(dave)

    answers = [api.get("/api/v1/approvals") for _ in range(3)]

    assert [a.status_code for a in answers[:2]] == [200, 200]
    body = error_of(answers[2], 429, "RATE_LIMITED")
    assert body["retryable"] is True
    assert 1 <= body["backoffSec"] <= 60
    assert answers[2]["Retry-After"] == str(body["backoffSec"])
    assert body["error"]["message"] == f"too many requests; try again in {body['backoffSec']} s"


def test_each_user_has_their_own_throttle(api, dave, bob, monkeypatch):
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "1/minute")
    api.force_login(dave)
    assert api.get("/api/v1/approvals").status_code == 200
    assert api.get("/api/v1/approvals").status_code == 429

    api.force_login(bob)
    assert api.get("/api/v1/approvals").status_code == 200


def test_a_post_without_the_csrf_token_is_refused_in_the_error_object(dave, acme_request):
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(dave)

    response = browser.post(
        f"/api/v1/approvals/{acme_request.pk}/decision", {"decision": "approve"}
    )

    body = error_of(response, 403, "CSRF_FAILED")
    assert "CSRF" in body["error"]["message"]
    acme_request.refresh_from_db()
    assert acme_request.status == "PENDING"


def test_an_unexpected_error_answers_500_in_the_error_object_and_is_logged(
    api, dave, monkeypatch, caplog
):
    def broken(user):
        raise RuntimeError("the selector broke")

    monkeypatch.setattr(approvals_api, "approvals_visible_to", broken)
    api.force_login(dave)

    with caplog.at_level(logging.ERROR, logger="config.api_contract"):
        response = api.get("/api/v1/approvals")

    body = error_of(response, 500, "INTERNAL_ERROR")
    assert "the selector broke" not in str(body)  # no internals in the answer
    assert "the selector broke" in caplog.text
