"""POST /api/v1/entities/{id}/execute (seed 000 §7.1), as olive (operator in Acme), bob
(viewer in Acme) and charlie (Globex) call it: the answer, the input checked against the
entity's io_contract before anything starts, every bad request, the waiting call, quotas and
the per-workspace throttle. Its helpers, shared with the other runs API modules, are in
tests/support/runs_api.py."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Run, RunStatus
from tests.api.checks import error_of
from tests.factories import EntityFactory
from tests.support.checkpoints import tool_entity
from tests.support.runs_api import GOOD_INPUT, execute_url, finished_run, greeter, operator


@pytest.fixture
def olive(acme):
    return operator(acme)


@pytest.fixture
def entity(acme):
    return greeter(acme)


# -- the answer ---------------------------------------------------------------------------------


@pytest.mark.smoke
def test_execute_starts_a_run_and_answers_the_seeds_response(api, olive, entity, settings):
    settings.HIERARCH_BASE_URL = "https://hierarch.example.com"
    api.force_login(olive)

    response = api.post(
        execute_url(entity),
        {"input_data": GOOD_INPUT, "context": {"user_id": "user-123", "workspace_id": "ws-456"}},
    )

    assert response.status_code == 202, response.content
    body = response.json()
    assert set(body) == {"run_id", "status", "started_at", "estimated_completion", "trace_url"}
    run = Run.objects.get()
    assert body["run_id"] == str(run.pk)
    assert body["status"] == "PENDING"
    assert body["started_at"] == run.created_at.isoformat().replace("+00:00", "Z")
    assert body["estimated_completion"] is None  # the entity never completed a run
    assert body["trace_url"] == f"https://hierarch.example.com/runs/{run.pk}/"
    assert run.input_data == GOOD_INPUT
    assert run.context == {"user_id": "user-123", "workspace_id": "ws-456"}
    assert run.created_by == olive and run.parent_id is None and run.webhook_url == ""


@pytest.mark.smoke
def test_the_estimate_is_the_median_duration_of_the_entitys_latest_completed_runs(
    api, olive, entity
):
    for ms in (1_000, 3_000, 9_000):
        finished_run(entity, ms=ms)
    finished_run(entity, ms=600_000, status=RunStatus.FAILED)  # not a completion
    api.force_login(olive)

    body = api.post(execute_url(entity), {"input_data": GOOD_INPUT}).json()

    started = timezone.datetime.fromisoformat(body["started_at"])
    estimated = timezone.datetime.fromisoformat(body["estimated_completion"])
    assert estimated - started == timedelta(seconds=3)


@pytest.mark.smoke
def test_input_data_may_be_left_out_when_the_entity_needs_none(api, olive, acme):
    free = EntityFactory(workspace=acme, name="free")
    api.force_login(olive)
    response = api.post(execute_url(free), {}, format="json")
    assert response.status_code == 202, response.content
    assert Run.objects.get().input_data == {}


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.smoke
def test_input_that_breaks_the_schema_is_refused_naming_each_field_and_starts_nothing(
    api, olive, entity
):
    api.force_login(olive)
    response = api.post(
        execute_url(entity), {"input_data": {"job_description": 42, "extra": "fine"}}
    )

    body = error_of(response, 400, "VALIDATION_ERROR")
    assert body["error"]["details"] == {
        "input_data.company_name": "this field is required",
        "input_data.job_description": "42 is not of type 'string'",
    }
    assert "greeter" in body["error"]["message"]
    assert not Run.objects.exists()


@pytest.mark.smoke
def test_input_that_breaks_a_validation_rule_is_refused_naming_the_field(api, olive, entity):
    api.force_login(olive)
    response = api.post(
        execute_url(entity), {"input_data": {"job_description": "short", "company_name": "X"}}
    )
    body = error_of(response, 400, "VALIDATION_ERROR")
    assert list(body["error"]["details"]) == ["input_data.job_description"]
    assert "at least 50 characters" in body["error"]["details"]["input_data.job_description"]
    assert not Run.objects.exists()


@pytest.mark.smoke
@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"input_data": GOOD_INPUT, "inputs": {}}, "inputs"),
        ({"input_data": GOOD_INPUT, "execution_options": {"wait": True}}, "execution_options.wait"),
        ({"input_data": ["not", "an", "object"]}, "input_data"),
        ({"input_data": GOOD_INPUT, "context": "ws-456"}, "context"),
        (
            {"input_data": GOOD_INPUT, "execution_options": {"async": "soon"}},
            "execution_options.async",
        ),
    ],
)
def test_a_body_with_unknown_or_wrong_fields_is_refused_naming_them(
    api, olive, entity, body, where
):
    api.force_login(olive)
    details = error_of(api.post(execute_url(entity), body), 400, "VALIDATION_ERROR")["error"][
        "details"
    ]
    assert where in details, details
    assert not Run.objects.exists()


@pytest.mark.smoke
def test_malformed_json_is_refused_and_starts_nothing(api, olive, entity):
    api.force_login(olive)
    response = api.post(execute_url(entity), '{"input_data": {', content_type="application/json")
    error_of(response, 400, "MALFORMED_JSON")
    assert not Run.objects.exists()


@pytest.mark.smoke
def test_an_entity_of_another_workspace_is_not_found(api, globex, entity):
    charlie_operates = operator(globex, "chuck")
    api.force_login(charlie_operates)
    error_of(api.post(execute_url(entity), {"input_data": GOOD_INPUT}), 404, "NOT_FOUND")
    error_of(api.post(execute_url(uuid.uuid4()), {"input_data": GOOD_INPUT}), 404, "NOT_FOUND")
    assert not Run.objects.exists()


@pytest.mark.smoke
def test_a_viewer_may_not_execute_and_is_told_the_role_that_is_needed(api, bob, entity):
    api.force_login(bob)
    body = error_of(
        api.post(execute_url(entity), {"input_data": GOOD_INPUT}), 403, "PERMISSION_DENIED"
    )
    assert "operator" in body["error"]["message"]
    assert not Run.objects.exists()


@pytest.mark.smoke
def test_an_anonymous_caller_is_asked_to_authenticate(api, entity):
    response = api.post(execute_url(entity), {"input_data": GOOD_INPUT})
    assert response.status_code == 401
    assert not Run.objects.exists()


@pytest.mark.smoke
def test_a_used_up_quota_is_refused_as_limit_exceeded(api, olive, entity, acme):
    acme.user_monthly_run_quota = 1
    acme.save()
    api.force_login(olive)
    assert api.post(execute_url(entity), {"input_data": GOOD_INPUT}).status_code == 202

    body = error_of(
        api.post(execute_url(entity), {"input_data": GOOD_INPUT}), 403, "LIMIT_EXCEEDED"
    )
    assert body["retryable"] is False
    assert "quota" in body["error"]["message"]
    assert Run.objects.count() == 1


# -- webhook URLs -------------------------------------------------------------------------------


@pytest.mark.smoke
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://hooks.example.com/end", "http:// or https://"),
        ("not a url", "http:// or https://"),
        ("https://user:secret@93.184.215.14/hook", "user name or password"),
        ("http://127.0.0.1:9000/hook", "loopback"),
        ("http://localhost/hook", "loopback"),
        ("http://10.1.2.3/hook", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[::1]/hook", "loopback"),
        ("http://93.184.215.14:0/hook", "port 0"),
        ("http://a..b/hook", "does not resolve"),
    ],
)
def test_a_webhook_url_that_is_not_http_or_points_inside_is_refused(
    api, olive, entity, settings, url, says
):
    settings.HIERARCH_WEBHOOKS = {**settings.HIERARCH_WEBHOOKS, "ALLOW_PRIVATE": False}
    api.force_login(olive)
    body = error_of(
        api.post(
            execute_url(entity),
            {"input_data": GOOD_INPUT, "execution_options": {"webhook_url": url}},
        ),
        400,
        "VALIDATION_ERROR",
    )
    problem = body["error"]["details"]["execution_options.webhook_url"]
    assert says in problem, problem
    assert "secret" not in problem  # the password is never repeated back
    assert not Run.objects.exists()


@pytest.mark.smoke
def test_a_private_webhook_url_is_kept_when_settings_allow_it(api, olive, entity, settings):
    settings.HIERARCH_WEBHOOKS = {**settings.HIERARCH_WEBHOOKS, "ALLOW_PRIVATE": True}
    api.force_login(olive)
    response = api.post(
        execute_url(entity),
        {"input_data": GOOD_INPUT, "execution_options": {"webhook_url": "http://127.0.0.1:9/x"}},
    )
    assert response.status_code == 202, response.content
    assert Run.objects.get().webhook_url == "http://127.0.0.1:9/x"


@pytest.mark.smoke
def test_a_public_webhook_url_is_kept_with_the_run(api, olive, entity, settings):
    settings.HIERARCH_WEBHOOKS = {**settings.HIERARCH_WEBHOOKS, "ALLOW_PRIVATE": False}
    api.force_login(olive)
    url = "https://93.184.215.14/hooks/run-ended?source=hierarch"
    response = api.post(
        execute_url(entity),
        {"input_data": GOOD_INPUT, "execution_options": {"async": True, "webhook_url": url}},
    )
    assert response.status_code == 202, response.content
    assert Run.objects.get().webhook_url == url


# -- the per-workspace throttle -----------------------------------------------------------------


@pytest.mark.smoke
def test_starts_are_throttled_per_workspace_whoever_starts_them(
    api, olive, entity, acme, globex, settings
):
    settings.HIERARCH_API = {**settings.HIERARCH_API, "WORKSPACE_RATE": "2/minute"}
    pat = operator(acme, "pat")
    api.force_login(olive)
    assert api.post(execute_url(entity), {"input_data": GOOD_INPUT}).status_code == 202
    first = Run.objects.get()
    api.force_login(pat)
    rerun = api.post(f"/api/v1/runs/{first.pk}/rerun")
    assert rerun.status_code == 202, rerun.content  # a re-run counts too

    refused = api.post(execute_url(entity), {"input_data": GOOD_INPUT})

    body = error_of(refused, 429, "RATE_LIMITED")
    assert body["retryable"] is True and body["backoffSec"] >= 1
    assert int(refused["Retry-After"]) >= 1
    assert Run.objects.count() == 2
    # Another workspace has its own count.
    elsewhere = greeter(globex, "globex_greeter")
    api.force_login(operator(globex, "gus"))
    assert api.post(execute_url(elsewhere), {"input_data": GOOD_INPUT}).status_code == 202


# -- waiting for the end (real commits: the inline executor runs the engine) --------------------


@pytest.mark.django_db(transaction=True)
def test_a_waiting_call_answers_the_ended_run_document(api, acme, settings):
    settings.HIERARCH_EXECUTOR = "inline"
    olive = operator(acme)
    entity = greeter(acme)
    api.force_login(olive)

    response = api.post(
        execute_url(entity), {"input_data": GOOD_INPUT, "execution_options": {"async": False}}
    )

    assert response.status_code == 200, response.content
    body = response.json()
    run = Run.objects.get()
    assert body["run_id"] == str(run.pk)
    assert body["status"] == "COMPLETED", body
    assert body["output_data"] == run.output_data and "text" in body["output_data"]
    assert body["metrics"]["llm_calls"] == 1
    assert body["completed_at"] is not None


@pytest.mark.django_db(transaction=True)
def test_a_waiting_call_answers_202_when_the_run_has_not_ended_in_time(api, acme, settings):
    settings.HIERARCH_EXECUTOR = "inline"
    settings.HIERARCH_API = {**settings.HIERARCH_API, "SYNC_WAIT_SECONDS": 1}
    olive = operator(acme)
    careful = tool_entity(acme, {"trigger": "BEFORE_TOOL_CALL"})  # waits on a person
    api.force_login(olive)

    response = api.post(execute_url(careful), {"execution_options": {"async": False}})

    assert response.status_code == 202, response.content
    assert response.json()["status"] == "PAUSED"
