"""http_request against a server on loopback: the allow-list, private addresses, status codes,
the idempotency header."""

from __future__ import annotations

import datetime as dt
import json
import socket
import ssl
import threading
from http.server import ThreadingHTTPServer

import pytest

from runs.engine.ports import PERMISSION_DENIED, TIMEOUT, VALIDATION_ERROR, ToolError
from tests.tools.conftest import context_for, handler_for
from tools.builtin import BUILTINS, http_request

pytestmark = pytest.mark.smoke

KEY = "run-9:step-3:1"


def call(arguments, *, tool="http_request", key=KEY, sandbox=False):
    adapter = http_request.sandbox if sandbox else http_request.run
    return adapter(arguments, context_for(tool, key=key))


def refusal(arguments, **kwargs) -> ToolError:
    with pytest.raises(ToolError) as caught:
        call(arguments, **kwargs)
    return caught.value


def test_it_gets_json_and_decodes_it(loopback):
    output = call({"url": loopback.url("/things?page=2")})

    assert output["status"] == 200
    assert output["body"] == {"method": "GET", "path": "/things?page=2", "json": None}
    assert output["truncated"] is False
    assert output["headers"]["content-type"] == "application/json"
    assert output["headers"]["x-request-id"] == "req-42"


def test_it_never_returns_a_cookie(loopback):
    output = call({"url": loopback.url("/echo")})
    assert "set-cookie" not in output["headers"]
    assert "secret-cookie" not in json.dumps(output)


def test_it_posts_a_json_body_with_the_callers_headers(loopback):
    output = call(
        {
            "method": "POST",
            "url": loopback.url("/orders"),
            "json": {"sku": "A-1", "qty": 2},
            "headers": {"X-Trace": "abc"},
        }
    )
    assert output["body"]["json"] == {"sku": "A-1", "qty": 2}
    (seen,) = loopback.requests
    assert seen.method == "POST"
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["x-trace"] == "abc"


def test_it_sends_the_idempotency_key(loopback):
    call({"method": "PUT", "url": loopback.url("/orders/1"), "json": {}}, key="run-9:step-3:2")
    assert loopback.requests[0].headers["idempotency-key"] == "run-9:step-3:2"


def test_the_calls_key_wins_over_one_the_caller_sets(loopback):
    call({"url": loopback.url("/"), "headers": {"idempotency-key": "forged"}})
    assert loopback.requests[0].headers["idempotency-key"] == KEY


def test_it_sends_the_host_it_was_given_while_connecting_to_the_checked_address(loopback):
    call({"url": loopback.url("/", host="localhost")})
    assert loopback.requests[0].headers["host"] == f"localhost:{loopback.port}"


def test_a_text_body_is_returned_as_text(loopback):
    assert call({"url": loopback.url("/text")})["body"] == "héllo wörld"


def test_a_body_over_64_kb_is_truncated(loopback):
    output = call({"url": loopback.url("/big")})
    assert output["truncated"] is True
    assert len(output["body"]) == 64 * 1024


def test_a_truncated_json_body_is_returned_as_text(loopback):
    output = call({"url": loopback.url("/big.json")})
    assert output["truncated"] is True
    assert isinstance(output["body"], str) and output["body"].startswith('["yyy')


def test_a_json_body_with_nan_is_kept_as_text(loopback):
    assert call({"url": loopback.url("/nan.json")})["body"] == '{"value": NaN}'


def test_a_head_request_has_an_empty_body(loopback):
    output = call({"method": "HEAD", "url": loopback.url("/")})
    assert output["status"] == 200 and output["body"] == ""


def test_a_redirect_is_returned_not_followed(loopback):
    output = call({"url": loopback.url("/redirect")})
    assert output["status"] == 302
    assert output["headers"]["location"] == "http://10.0.0.1/internal"
    assert len(loopback.requests) == 1


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_server_error_is_retryable(loopback, status):
    error = refusal({"url": loopback.url(f"/status/{status}")})
    assert not error.permanent
    assert f"answered HTTP {status}" in str(error)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_client_error_is_permanent(loopback, status):
    error = refusal({"url": loopback.url(f"/status/{status}")})
    assert error.permanent
    assert f"answered HTTP {status}" in str(error)


@pytest.mark.parametrize("status", [408, 429])
def test_too_many_requests_and_request_timeout_are_retryable(loopback, status):
    assert not refusal({"url": loopback.url(f"/status/{status}")}).permanent


def test_a_slow_server_is_a_retryable_timeout(loopback):
    error = refusal({"url": loopback.url("/slow"), "timeout": 0.3})
    assert not error.permanent
    assert error.code == TIMEOUT
    assert "did not answer within 0.3 s" in str(error)


def test_a_closed_port_is_a_retryable_failure(loopback):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    error = refusal({"url": f"http://127.0.0.1:{closed}/"})
    assert not error.permanent
    assert "ConnectError" in str(error)


# The allow-list and private addresses


def test_a_host_not_in_the_allow_list_is_refused_before_any_request(loopback, settings):
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["api.example.com"]
    error = refusal({"url": loopback.url("/")})
    assert error.permanent and error.code == PERMISSION_DENIED
    assert "host 127.0.0.1 is not allowed (HIERARCH_HTTP_ALLOWED_HOSTS does not list it)" in str(
        error
    )
    assert loopback.requests == []


def test_with_no_allow_list_every_host_is_refused(loopback, settings):
    del settings.HIERARCH_HTTP_ALLOWED_HOSTS
    error = refusal({"url": loopback.url("/")})
    assert "HIERARCH_HTTP_ALLOWED_HOSTS is empty" in str(error)
    assert loopback.requests == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_loopback_address_is_refused_unless_private_addresses_are_allowed(
    loopback, settings, host
):
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = False
    error = refusal({"url": loopback.url("/", host=host)})
    assert error.permanent and error.code == PERMISSION_DENIED
    assert "a private, loopback or reserved address" in str(error)
    assert "HIERARCH_HTTP_ALLOW_PRIVATE" in str(error)
    assert loopback.requests == []


@pytest.mark.parametrize(
    "address",
    ["10.1.2.3", "192.168.0.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "fd00::1"],  # noqa: S104
)
def test_private_link_local_and_reserved_addresses_are_refused(settings, address):
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = [address]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = False
    host = f"[{address}]" if ":" in address else address
    error = refusal({"url": f"http://{host}/"})
    assert error.code == PERMISSION_DENIED, str(error)


def test_an_ipv4_address_written_as_ipv6_is_still_refused(settings):
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["::ffff:7f00:1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = False
    assert refusal({"url": "http://[::ffff:127.0.0.1]/"}).code == PERMISSION_DENIED


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("api.example.com", True),
        ("API.Example.COM", True),
        ("api.example.com.", True),
        ("eu.api.example.com", False),
        ("cdn.example.org", True),
        ("a.b.example.org", True),
        ("example.org", False),
        ("evil-example.org", False),
        ("example.org.evil.net", False),
        ("other.com", False),
    ],
)
def test_the_allow_list_takes_exact_hosts_and_subdomain_wildcards(host, allowed):
    assert http_request.host_allowed(host, ["api.example.com", "*.example.org"]) is allowed


# Arguments and permissions


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "arguments.url: is required"),
        ({"url": "ftp://127.0.0.1/file"}, "arguments.url: 'ftp://127.0.0.1/file' does not match"),
        ({"url": "http://"}, "arguments.url: must be an absolute http:// or https:// URL"),
        ({"url": "http://user:pw@127.0.0.1/"}, "arguments.url: must not carry a user name"),
        ({"url": "http://127.0.0.1/", "method": "TRACE"}, "arguments.method: 'TRACE' is not"),
        ({"url": "http://127.0.0.1/", "timeout": 0}, "arguments.timeout: must be more than 0"),
        ({"url": "http://127.0.0.1/", "headers": {"Host": "internal"}}, "Host is set by the tool"),
        ({"url": "http://127.0.0.1/", "headers": {"X": "a\r\nB: c"}}, "arguments.headers.X"),
        ({"url": "http://127.0.0.1/", "headers": {"X": 1}}, "arguments.headers.X: must be a"),
    ],
    ids=[
        "no-url",
        "ftp",
        "no-host",
        "userinfo",
        "method",
        "timeout",
        "host-header",
        "header-injection",
        "header-not-text",
    ],
)
def test_bad_arguments_are_refused_before_any_request(loopback, arguments, message):
    error = refusal(arguments)
    assert error.permanent and error.code == VALIDATION_ERROR
    assert message in str(error), str(error)
    assert loopback.requests == []


def test_it_is_an_execute_tool_by_default():
    assert BUILTINS["http_request"].definition["permissions"] == "EXECUTE"


def test_a_read_tool_built_on_it_may_only_read(loopback):
    reader = {**http_request.DEFINITION, "tool_id": "fetch_page", "permissions": "READ"}
    assert call({"url": loopback.url("/")}, tool=reader)["status"] == 200
    error = refusal({"method": "POST", "url": loopback.url("/"), "json": {}}, tool=reader)
    assert error.permanent and error.code == PERMISSION_DENIED
    assert "fetch_page is a READ tool and may only send GET, HEAD, OPTIONS, not POST" in str(error)
    assert len(loopback.requests) == 1


# The sandbox


def test_the_sandbox_answers_without_sending_anything(loopback):
    output = call(
        {"method": "POST", "url": loopback.url("/orders"), "json": {"qty": 1}}, sandbox=True
    )
    assert output == {
        "status": 200,
        "headers": {"content-type": "application/json"},
        "body": {
            "sandbox": True,
            "method": "POST",
            "url": loopback.url("/orders"),
            "json": {"qty": 1},
        },
        "truncated": False,
    }
    assert loopback.requests == []


def test_the_sandbox_still_refuses_what_the_real_call_would(loopback, settings):
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["api.example.com"]
    assert refusal({"url": loopback.url("/")}, sandbox=True).code == PERMISSION_DENIED
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = False
    assert refusal({"url": loopback.url("/")}, sandbox=True).code == PERMISSION_DENIED
    assert loopback.requests == []


# HTTPS: the connection goes to the checked address, the certificate is checked for the name


@pytest.fixture
def tls_loopback(loopback, monkeypatch, tmp_path):
    """The loopback handler behind TLS with a certificate for `localhost` only, trusted by
    the tool's client for the test."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_file, key_file)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(loopback))
    httpd.daemon_threads = True
    httpd.socket = server_context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()

    trusted = ssl.create_default_context(cafile=str(cert_file))
    real_client = http_request.httpx.Client

    def client(**kwargs):
        return real_client(verify=trusted, **kwargs)

    monkeypatch.setattr(http_request.httpx, "Client", client)
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_https_checks_the_certificate_for_the_name_while_connecting_to_the_address(
    loopback, tls_loopback
):
    output = call({"url": f"https://localhost:{tls_loopback}/secure"})
    assert output["status"] == 200
    assert output["body"]["path"] == "/secure"
    assert loopback.requests[0].headers["host"] == f"localhost:{tls_loopback}"


def test_https_refuses_a_certificate_for_another_name(loopback, tls_loopback):
    error = refusal({"url": f"https://127.0.0.1:{tls_loopback}/"})
    assert "ConnectError" in str(error)
    assert loopback.requests == []


@pytest.mark.parametrize(
    "address", ["::127.0.0.1", "64:ff9b::7f00:1", "64:ff9b:1::7f00:1", "2002:7f00:1::"]
)
def test_an_ipv6_address_that_carries_a_loopback_ipv4_address_is_refused(settings, address):
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = [address]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = False
    error = refusal({"url": f"http://[{address}]:9/"})
    assert error.code == PERMISSION_DENIED, str(error)
    assert "a private, loopback or reserved address" in str(error)
