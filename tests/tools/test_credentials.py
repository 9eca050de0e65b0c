"""A tool's authentication from the credential vault, sent by http_request to a loopback API
and an OAuth2 token endpoint (tests/tools/auth_server.py): what arrives, what is cached, and
errors that name the secret and never show a value."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator

import pytest

from governance.vault import secret_set
from runs.engine.ports import (
    PERMISSION_DENIED,
    TIMEOUT,
    TOOL_FAILURE,
    VALIDATION_ERROR,
    ToolError,
)
from tests.tools.auth_server import AuthServer
from tests.tools.conftest import context_for, invocation
from tools.credentials import DEFAULT_TOKEN_SECONDS, Authenticator
from tools.runner import RegistryToolRunner

pytestmark = pytest.mark.smoke

API_KEY = "sk-live-4b1d2c3e5f60718293a4b5c6"
TOKEN = "svc-token-9a8b7c6d5e4f3a2b1c0d"
CLIENT_SECRET = "oauth-client-secret-0f1e2d3c4b5a"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server(settings) -> Iterator[AuthServer]:
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True
    with AuthServer(client_secret=CLIENT_SECRET) as running:
        yield running


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def runner(clock) -> RegistryToolRunner:
    return RegistryToolRunner(authenticator=Authenticator(clock=clock))


def api_tool(kind: str, ref: str | None = "crm_credentials", **overrides) -> dict:
    return {
        "tool_id": "crm",
        "name": "CRM",
        "implementation": "http_request",
        "permissions": "READ",
        "authentication": {"type": kind, "credentials_ref": ref},
        "function_schema": {"name": "crm", "parameters": {"type": "object"}},
        **overrides,
    }


def store(acme, value: str, name: str = "crm_credentials") -> None:
    secret_set(workspace=acme, name=name, value=value)


def oauth_secret(server: AuthServer, **changes) -> str:
    data = {
        "client_id": server.client_id,
        "client_secret": CLIENT_SECRET,
        "token_url": server.url("/token"),
        "scope": "crm.read",
        **changes,
    }
    return json.dumps({k: v for k, v in data.items() if v is not None})


def call(runner, acme, tool: dict, url: str, **arguments):
    return runner.invoke(invocation(tool, {"url": url, **arguments}, workspace_id=acme.pk))


def refusal(runner, acme, tool: dict, url: str, **arguments) -> ToolError:
    with pytest.raises(ToolError) as caught:
        call(runner, acme, tool, url, **arguments)
    return caught.value


def nothing_leaks(error: ToolError, *values: str) -> None:
    for value in values:
        assert value not in str(error)
        assert value not in repr(error.args)


# NONE and API_KEY


def test_a_tool_without_authentication_sends_no_credentials(runner, acme, server):
    call(runner, acme, api_tool("NONE", None), server.url("/api/things"))
    assert "authorization" not in server.api_requests()[0].headers


def test_an_api_key_is_sent_as_a_bearer_token(runner, acme, server):
    store(acme, API_KEY)
    result = call(runner, acme, api_tool("API_KEY"), server.url("/api/things"))

    assert result.output["status"] == 200
    assert server.api_requests()[0].headers["authorization"] == f"Bearer {API_KEY}"


def test_an_api_key_with_a_header_name_is_sent_as_it_is_in_that_header(runner, acme, server):
    store(acme, json.dumps({"key": API_KEY, "header": "X-Api-Key"}))
    call(runner, acme, api_tool("API_KEY"), server.url("/api/things"))

    headers = server.api_requests()[0].headers
    assert headers["x-api-key"] == API_KEY
    assert "authorization" not in headers


def test_the_tools_credentials_win_over_a_header_the_model_sets(runner, acme, server):
    store(acme, API_KEY)
    call(
        runner,
        acme,
        api_tool("API_KEY"),
        server.url("/api/things"),
        headers={"authorization": "Bearer forged", "X-Trace": "t-1"},
    )
    headers = server.api_requests()[0].headers
    assert headers["authorization"] == f"Bearer {API_KEY}"
    assert headers["x-trace"] == "t-1"


def test_an_answer_that_echoes_the_key_comes_back_redacted(runner, acme, server):
    store(acme, API_KEY)
    result = call(runner, acme, api_tool("API_KEY"), server.url("/api/headers"))

    assert result.output["body"]["headers"]["authorization"] == "Bearer [redacted]"
    assert API_KEY not in json.dumps(result.output)


def test_a_missing_secret_is_a_permanent_error_naming_it_and_nothing_is_sent(runner, acme, server):
    error = refusal(runner, acme, api_tool("API_KEY", "crm_kee"), server.url("/api/things"))

    assert error.code == "SECRET_NOT_FOUND" and error.permanent
    assert "tool crm: authentication API_KEY: there is no secret 'crm_kee'" in str(error)
    assert "workspace 'acme'" in str(error)
    assert server.requests == []


def test_an_api_key_tool_without_a_credentials_ref_says_so(runner, acme, server):
    error = refusal(runner, acme, api_tool("API_KEY", None), server.url("/api/things"))
    assert error.code == "SECRET_NOT_FOUND" and error.permanent
    assert "credentials_ref is None" in str(error)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"key": "abc', "starts like a JSON object but is not valid JSON"),
        ('{"header": "X-Key"}', "lacks the field 'key'"),
        ('{"key": "k", "headers": "X"}', "has the unknown field 'headers'"),
        ('{"key": "k", "header": "Bad Header"}', "field 'header' must be an HTTP header name"),
        ('{"key": "k", "header": "Host"}', "field 'header' names Host, which the tool sets"),
        ("line\nbreak-in-the-key", "contains a line break or a control character"),
    ],
)
def test_a_malformed_api_key_secret_is_refused_naming_the_problem(
    runner, acme, server, value, message
):
    store(acme, value)
    error = refusal(runner, acme, api_tool("API_KEY"), server.url("/api/things"))

    assert error.code == "SECRET_INVALID" and error.permanent
    assert "secret 'crm_credentials'" in str(error)
    assert message in str(error)
    assert server.requests == []


def test_an_unknown_authentication_type_is_refused(runner, acme, server):
    error = refusal(runner, acme, api_tool("KERBEROS"), server.url("/api/things"))
    assert error.code == VALIDATION_ERROR and error.permanent
    assert "authentication.type 'KERBEROS' is not one of NONE, API_KEY, OAUTH2" in str(error)


# SERVICE_ACCOUNT


@pytest.mark.parametrize("value", [TOKEN, json.dumps({"token": TOKEN})])
def test_a_service_account_token_is_sent_as_a_bearer_token(runner, acme, server, value):
    store(acme, value)
    call(runner, acme, api_tool("SERVICE_ACCOUNT"), server.url("/api/things"))
    assert server.api_requests()[0].headers["authorization"] == f"Bearer {TOKEN}"


def test_a_service_account_key_file_is_refused_saying_what_is_supported(runner, acme, server):
    key_file = {"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----xyz"}
    store(acme, json.dumps(key_file))
    error = refusal(runner, acme, api_tool("SERVICE_ACCOUNT"), server.url("/api/things"))

    assert error.code == "SECRET_INVALID"
    assert "holds a key file (private_key)" in str(error)
    assert "bearer token" in str(error)
    nothing_leaks(error, "BEGIN PRIVATE KEY")


# OAUTH2 client credentials


def test_an_oauth2_tool_fetches_a_token_and_sends_it(runner, acme, server):
    store(acme, oauth_secret(server))
    server.require_bearer = True
    result = call(runner, acme, api_tool("OAUTH2"), server.url("/api/things"))

    assert result.output["status"] == 200
    token_request, api_request = server.requests
    assert token_request.method == "POST" and token_request.path == "/token"
    assert token_request.form == {"grant_type": "client_credentials", "scope": "crm.read"}
    assert token_request.headers["authorization"].startswith("Basic ")
    assert api_request.headers["authorization"] == f"Bearer {server.issued[0]}"


def test_the_token_is_reused_until_shortly_before_it_expires(runner, acme, server, clock):
    store(acme, oauth_secret(server))
    server.expires_in = 600
    tool = api_tool("OAUTH2")
    for _ in range(3):
        call(runner, acme, tool, server.url("/api/things"))
    assert len(server.token_requests()) == 1

    clock.now += 539  # 600 s less a margin of 60: still good
    call(runner, acme, tool, server.url("/api/things"))
    assert len(server.token_requests()) == 1
    clock.now += 2
    call(runner, acme, tool, server.url("/api/things"))
    assert len(server.token_requests()) == 2
    sent = [r.headers["authorization"] for r in server.api_requests()]
    assert sent[-1] == f"Bearer {server.issued[1]}" != sent[0]


def test_a_token_without_expires_in_is_kept_for_the_default_lifetime(runner, acme, server, clock):
    store(acme, oauth_secret(server))
    server.expires_in = None
    tool = api_tool("OAUTH2")
    call(runner, acme, tool, server.url("/api/things"))
    clock.now += DEFAULT_TOKEN_SECONDS * 0.9 - 1
    call(runner, acme, tool, server.url("/api/things"))
    assert len(server.token_requests()) == 1
    clock.now += 2
    call(runner, acme, tool, server.url("/api/things"))
    assert len(server.token_requests()) == 2


def test_a_new_secret_value_gets_a_new_token(runner, acme, server):
    store(acme, oauth_secret(server))
    tool = api_tool("OAUTH2")
    call(runner, acme, tool, server.url("/api/things"))
    server.client_secret = CLIENT_SECRET + "-rotated"
    store(acme, oauth_secret(server, client_secret=CLIENT_SECRET + "-rotated"))
    call(runner, acme, tool, server.url("/api/things"))
    assert len(server.token_requests()) == 2


def test_a_401_drops_the_token_so_the_retry_fetches_a_new_one(runner, acme, server):
    store(acme, oauth_secret(server))
    server.require_bearer = True
    tool = api_tool("OAUTH2")
    call(runner, acme, tool, server.url("/api/things"))
    server.revoke_tokens()

    error = refusal(runner, acme, tool, server.url("/api/things"))
    assert error.code == TOOL_FAILURE and not error.permanent
    assert "HTTP 401" in str(error) and "the next attempt gets a new one" in str(error)

    result = call(runner, acme, tool, server.url("/api/things"))
    assert result.output["status"] == 200
    assert len(server.token_requests()) == 2


def test_a_401_with_an_api_key_is_permanent(runner, acme, server):
    store(acme, API_KEY)
    server.require_bearer = True  # the key is no token it issued
    error = refusal(runner, acme, api_tool("API_KEY"), server.url("/api/things"))
    assert error.permanent and "HTTP 401" in str(error)
    nothing_leaks(error, API_KEY)


def test_refused_client_credentials_are_a_permanent_error_without_the_servers_words(
    runner, acme, server
):
    store(acme, oauth_secret(server, client_secret="wrong-secret-abcdef"))
    error = refusal(runner, acme, api_tool("OAUTH2"), server.url("/api/things"))

    assert error.permanent
    assert str(error) == (
        "tool crm: the OAuth2 token endpoint 127.0.0.1 refused the client credentials of "
        "secret 'crm_credentials' (HTTP 401, invalid_client)"
    )
    assert server.api_requests() == []
    # The server echoed the Basic credentials in error_description; the error does not.
    nothing_leaks(error, "wrong-secret-abcdef", "Basic ")


@pytest.mark.parametrize("status", [503, 429])
def test_a_token_endpoint_that_is_busy_is_retryable(runner, acme, server, status):
    store(acme, oauth_secret(server))
    server.token_status = status
    error = refusal(runner, acme, api_tool("OAUTH2"), server.url("/api/things"))
    assert not error.permanent and error.code == TOOL_FAILURE
    assert f"the OAuth2 token endpoint 127.0.0.1 answered HTTP {status}" in str(error)


def test_a_token_endpoint_that_does_not_answer_in_time_is_a_retryable_timeout(acme, server):
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts, never answers
        port = silent.getsockname()[1]
        store(acme, oauth_secret(server, token_url=f"http://127.0.0.1:{port}/token"))
        runner = RegistryToolRunner(authenticator=Authenticator(timeout_s=0.3))
        error = refusal(runner, acme, api_tool("OAUTH2"), server.url("/api/things"))
    assert error.code == TIMEOUT and not error.permanent
    assert "did not answer within 0.3 s" in str(error)


def test_a_token_url_outside_the_allow_list_is_refused_before_any_request(
    runner, acme, server, settings
):
    store(acme, oauth_secret(server, token_url="http://auth.example.net/token"))
    error = refusal(runner, acme, api_tool("OAUTH2"), server.url("/api/things"))

    assert error.code == PERMISSION_DENIED and error.permanent
    assert "host auth.example.net is not allowed" in str(error)
    assert server.requests == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"token_url": None}, "lacks the field 'token_url'"),
        ({"client_id": ""}, "field 'client_id' must be non-empty text"),
        ({"audience": "x"}, "has the unknown field 'audience'"),
        ({"scope": 7}, "field 'scope' must be text, or a list of texts"),
        ({"token_url": "ftp://127.0.0.1/token"}, "must be an absolute http:// or https:// URL"),
    ],
)
def test_a_malformed_oauth2_secret_is_refused_naming_the_field(
    runner, acme, server, changes, message
):
    store(acme, oauth_secret(server, **changes))
    error = refusal(runner, acme, api_tool("OAUTH2"), server.url("/api/things"))
    assert error.permanent and message in str(error)
    nothing_leaks(error, CLIENT_SECRET)
    assert server.requests == []


def test_an_oauth2_secret_that_is_not_json_says_what_it_must_hold(runner, acme, server):
    store(acme, CLIENT_SECRET)
    error = refusal(runner, acme, api_tool("OAUTH2"), server.url("/api/things"))
    assert error.code == "SECRET_INVALID"
    assert "must be a JSON object of client credentials" in str(error)
    nothing_leaks(error, CLIENT_SECRET)


def test_a_scope_list_is_sent_space_separated(runner, acme, server):
    store(acme, oauth_secret(server, scope=["crm.read", "crm.write"]))
    call(runner, acme, api_tool("OAUTH2"), server.url("/api/things"))
    assert server.token_requests()[0].form["scope"] == "crm.read crm.write"


# Where credentials are not resolved


def test_a_sandboxed_call_resolves_no_secret_and_sends_nothing(runner, acme, server):
    tool = api_tool("API_KEY", "no_such_secret", sandbox_mode=True)
    result = call(runner, acme, tool, server.url("/api/things"))
    assert result.output["body"]["sandbox"] is True
    assert server.requests == []


def test_an_implementation_that_calls_out_nowhere_needs_no_secret(runner, acme):
    tool = api_tool(
        "API_KEY",
        "no_such_secret",
        implementation="simulated",
        output_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    result = runner.invoke(invocation(tool, {}, workspace_id=acme.pk))
    assert isinstance(result.output, dict)


# The values never show


def test_credentials_show_in_no_repr_and_cannot_be_pickled(acme):
    store(acme, API_KEY)
    authenticator = Authenticator()
    tool = api_tool("API_KEY")
    prepared = authenticator.prepare(tool, workspace_id=acme.pk, tool_id="crm")
    credentials = authenticator.credentials(prepared, tool_id="crm")
    context = context_for(tool)
    context = type(context)(**{**context.__dict__, "credentials": credentials})

    for shown in (repr(prepared), repr(credentials), repr(context), str(context)):
        assert API_KEY not in shown
    assert repr(credentials) == "Credentials(headers=['Authorization'])"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(credentials)
    assert credentials.headers() == {"Authorization": f"Bearer {API_KEY}"}
