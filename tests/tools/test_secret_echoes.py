"""A vault secret echoed back by the called server, in every encoding servers use, is stored,
logged, shown and answered nowhere: not in any table, log record, event, page or API answer."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from governance.vault import secret_set
from runs.models import ToolCall
from tests.factories import EntityFactory, tool_definition
from tests.support.runs import Driver, static_plan, step
from tests.support.secret_echo import ECHOES, SecretEcho, echoed_forms
from tests.support.stored import places_holding

# `/`, `&`, `+`, `=` and a space: each has an escape of its own in JSON, URLs or base64.
CANARY = "canary/Key&7+Qz=9 xW4"


@pytest.fixture
def echo(settings) -> Iterator[SecretEcho]:
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True
    with SecretEcho() as running:
        yield running


def fetcher(workspace, name: str, urls: list[str]):
    tool = tool_definition(
        "crm",
        implementation="http_request",
        permissions="READ",
        authentication={"type": "API_KEY", "credentials_ref": "crm_key"},
        function_schema={
            "name": "crm",
            "parameters": {
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "required": ["url"],
            },
        },
    )
    steps = []
    for order, url in enumerate(urls, 1):
        fetch = step(order, f"Fetch {order}", "TOOL_CALL", tool_id="crm")
        fetch["input_mapping"] = {"url": url}
        steps.append(fetch)
    return EntityFactory(workspace=workspace, name=name, tools=[tool], planning=static_plan(*steps))


def leaks(text: str) -> list[str]:
    return [form for form in [CANARY, *echoed_forms(CANARY)] if form in text]


def shown_to_a_viewer(client, api, viewer, run) -> str:
    client.force_login(viewer)
    api.force_login(viewer)
    answers = [
        client.get(f"/runs/{run.pk}/"),
        client.get(f"/runs/{run.pk}/nodes/{run.pk}/"),
        api.get(f"/api/v1/runs/{run.pk}"),
        api.get(f"/api/v1/runs/{run.pk}/trace"),
    ]
    assert [a.status_code for a in answers] == [200] * 4
    return "\n".join(a.content.decode() for a in answers)


@pytest.mark.django_db(transaction=True)
def test_a_secret_echoed_in_any_encoding_is_stored_logged_and_shown_nowhere(
    acme, bob, echo, client, caplog
):
    from rest_framework.test import APIClient

    secret_set(workspace=acme, name="crm_key", value=CANARY)
    entity = fetcher(acme, "echoes", [echo.url(path) for path in ECHOES])
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")

    with CaptureQueriesContext(connection):  # every SQL statement, with its values, is logged
        run = Driver().run(entity, {})

    assert run.status == "COMPLETED", run.error_message
    assert echo.paths == list(ECHOES)  # the server was called, and echoed each form
    outputs = list(ToolCall.objects.order_by("timestamp").values_list("output_result", flat=True))
    assert outputs[0]["body"] == {"echo": "[redacted]"}
    assert outputs[0]["headers"]["x-request-id"] == "[redacted]"
    assert places_holding([CANARY, *echoed_forms(CANARY)]) == []
    assert "runs_run" in caplog.text  # the SQL was logged, with its values
    assert leaks(caplog.text) == []
    assert leaks(shown_to_a_viewer(client, APIClient(), bob, run)) == []


@pytest.mark.django_db(transaction=True)
def test_an_error_quoting_the_secret_names_it_nowhere(acme, bob, echo, client, caplog):
    from rest_framework.test import APIClient

    secret_set(workspace=acme, name="crm_key", value=CANARY)
    caplog.set_level(logging.DEBUG)

    run = Driver().run(fetcher(acme, "refused", [echo.url("/refused")]), {})

    assert run.status == "FAILED"
    assert "answered HTTP 400 Bad key [redacted]" in run.error_message
    assert places_holding([CANARY, *echoed_forms(CANARY)]) == []
    assert leaks(caplog.text) == []
    assert leaks(shown_to_a_viewer(client, APIClient(), bob, run)) == []
