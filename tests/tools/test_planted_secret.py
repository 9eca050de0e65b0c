"""Planted secrets through real engine runs: an API key, OAuth2 client credentials and the
tokens they earn reach the loopback API, and show in no ToolCall, StepRun, Run or RunEvent
row, in no log line (SQL with its parameters included), and in no error of a failing call."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from governance.vault import secret_set
from runs.models import LLMCall, Run, RunEvent, StepRun, ToolCall
from tests.factories import EntityFactory, tool_definition
from tests.support.queued_runs import Driver
from tests.support.runs import static_plan, step
from tests.tools.auth_server import AuthServer

pytestmark = pytest.mark.smoke

API_KEY = "sk-planted-api-key-5e7d1c9a3b"
CLIENT_SECRET = "planted-client-secret-8f2a6c4e0d"


@pytest.fixture
def server(settings) -> Iterator[AuthServer]:
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True
    with AuthServer(client_id="hierarch", client_secret=CLIENT_SECRET) as running:
        yield running


def fetch_tool(tool_id: str, kind: str, ref: str) -> dict:
    return tool_definition(
        tool_id,
        implementation="http_request",
        permissions="READ",
        authentication={"type": kind, "credentials_ref": ref},
        function_schema={
            "name": tool_id,
            "parameters": {
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "required": ["url"],
            },
        },
    )


def fetch_step(order: int, tool_id: str, url: str) -> dict:
    plan_step = step(order, f"Fetch {order}", "TOOL_CALL", tool_id=tool_id)
    plan_step["input_mapping"] = {"url": url}
    return plan_step


def fetcher(acme, name: str, *steps: tuple[str, str]) -> object:
    tools = [
        fetch_tool("with_key", "API_KEY", "crm_key"),
        fetch_tool("with_oauth", "OAUTH2", "crm_oauth"),
    ]
    return EntityFactory(
        workspace=acme,
        name=name,
        tools=tools,
        planning=static_plan(*(fetch_step(n, t, u) for n, (t, u) in enumerate(steps, 1))),
    )


def everything_stored() -> str:
    rows = [
        *ToolCall.objects.values(),
        *StepRun.objects.values(),
        *Run.objects.values(),
        *RunEvent.objects.values(),
        *LLMCall.objects.values(),
    ]
    return json.dumps(rows, default=str)


def planted(server: AuthServer) -> list[str]:
    basic = base64.b64encode(f"hierarch:{CLIENT_SECRET}".encode()).decode()
    return [API_KEY, CLIENT_SECRET, basic, *server.issued]


def test_secrets_used_by_a_run_are_stored_and_logged_nowhere(acme, server, caplog):
    secret_set(workspace=acme, name="crm_key", value=API_KEY)
    oauth = {
        "client_id": "hierarch",
        "client_secret": CLIENT_SECRET,
        "token_url": server.url("/token"),
    }
    secret_set(workspace=acme, name="crm_oauth", value=json.dumps(oauth))
    entity = fetcher(
        acme,
        "fetcher",
        ("with_key", server.url("/api/headers")),
        ("with_oauth", server.url("/api/headers")),
    )
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")

    with CaptureQueriesContext(connection):  # every SQL statement, with its values, is logged
        run = Driver().run(entity, {})

    assert run.status == "COMPLETED", run.error_message
    sent = [r.headers.get("authorization") for r in server.api_requests()]
    assert sent == [f"Bearer {API_KEY}", f"Bearer {server.issued[0]}"]
    # The echoed headers are in the run's rows, as the tool returned them: redacted.
    outputs = [call.output_result for call in ToolCall.objects.order_by("timestamp")]
    assert [o["body"]["headers"]["authorization"] for o in outputs] == ["Bearer [redacted]"] * 2
    stored, logged = everything_stored(), caplog.text
    assert "runs_run" in logged  # the SQL was logged, with its values
    for value in planted(server):
        assert value not in stored, "a secret is stored in a run's rows"
        assert value not in logged, "a secret is in the log"


def test_failing_calls_with_credentials_name_no_secret(acme, server, caplog):
    secret_set(workspace=acme, name="crm_key", value=API_KEY)
    wrong = {
        "client_id": "hierarch",
        "client_secret": CLIENT_SECRET + "-old",
        "token_url": server.url("/token"),
    }
    secret_set(workspace=acme, name="crm_oauth", value=json.dumps(wrong))
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    driver = Driver()

    with CaptureQueriesContext(connection):
        refused_key = driver.run(
            fetcher(acme, "bad_key", ("with_key", server.url("/api/status/403"))), {}
        )
        refused_client = driver.run(
            fetcher(acme, "bad_client", ("with_oauth", server.url("/api/things"))), {}
        )

    assert (refused_key.status, refused_client.status) == ("FAILED", "FAILED")
    # (The host's address is personal data under the default pii_handling, REDACT.)
    assert "answered HTTP 403 Forbidden" in refused_key.error_message
    assert "refused the client credentials of secret 'crm_oauth' (HTTP 401, invalid_client)" in (
        refused_client.error_message
    )
    # The token endpoint echoed the Basic credentials it was sent; nothing repeats them.
    echoed = base64.b64encode(f"hierarch:{CLIENT_SECRET}-old".encode()).decode()
    errors = [refused_key.error_message, refused_client.error_message]
    errors += list(ToolCall.objects.values_list("error_message", flat=True))
    stored, logged = everything_stored(), caplog.text
    for value in [API_KEY, CLIENT_SECRET, echoed]:
        assert not any(value in error for error in errors)
        assert value not in stored
        assert value not in logged


def test_a_missing_secret_fails_the_run_naming_the_reference(acme, server):
    run = Driver().run(fetcher(acme, "no_key", ("with_key", server.url("/api/things"))), {})

    assert run.status == "FAILED"
    assert run.error_code == "SECRET_NOT_FOUND"
    assert "there is no secret 'crm_key' in workspace 'acme'" in run.error_message
    assert server.requests == []
