"""http_request: one HTTP request to a host of the allow-list.

Its definition is EXECUTE: a request may be a POST, PUT or DELETE that acts on the outside
world, and the tool cannot know what a given URL does. A workspace that wants a harmless
fetcher defines its own tool with `implementation: http_request`, `permissions: READ` (then
only GET, HEAD and OPTIONS are sent) and, if it likes, a `method` enum of just GET.

Only hosts in `HIERARCH_HTTP_ALLOWED_HOSTS` (an exact host, or `*.example.com` for its
subdomains) are called, and never a private, loopback or link-local address unless
`HIERARCH_HTTP_ALLOW_PRIVATE` is true. The address checked is the address connected to (the
name is resolved once and the connection pinned to it), so a DNS answer that changes between
check and connect cannot reach an internal service. Redirects are returned, not followed.
Every request carries the call's idempotency key as `Idempotency-Key`, and, unless the
entity's `trace_id_propagation` is false, the run's trace as W3C `traceparent` (the trace id
and the step's span id of the OpenTelemetry export, runs/engine/observability.py), in place
of one the arguments set; with it false, the arguments' headers go as they are.

The tool's authentication (API_KEY, OAUTH2, SERVICE_ACCOUNT) arrives resolved in
`context.credentials` (`tools/credentials.py`): its headers are added last, so an argument of
the same name cannot replace them. The runner replaces every occurrence of a credential in
what this returns or raises (a server that echoes its request, in any encoding) by
`[redacted]` (`governance/secret_redaction.py`).
"""

from __future__ import annotations

import ipaddress
import json
import time
from typing import Any

import httpx
from django.conf import settings

from governance.addresses import AddressRefused, is_public_address, public_address
from runs.engine.ports import PERMISSION_DENIED, TIMEOUT, VALIDATION_ERROR, ToolError
from tools.builtin.base import ToolContext, check_arguments

NAME = "http_request"
# The runner resolves the tool's authentication for this adapter (tools/credentials.py).
SENDS_CREDENTIALS = True
# It waits on a server: the runner lets go of the database connection before it.
WAITS_ON_NETWORK = True
MAX_BODY_BYTES = 64 * 1024
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# Headers worth passing on to a model or a later step; never Set-Cookie.
RETURNED_HEADERS = (
    "content-type",
    "content-length",
    "location",
    "retry-after",
    "etag",
    "last-modified",
    "cache-control",
    "x-request-id",
)
# Set by the tool itself: the connection is pinned to a checked address.
RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}
# 408 and 429 are the server saying "not now", not "never": worth a retry like a 5xx.
RETRYABLE_CLIENT_ERRORS = {408, 429}

DEFINITION: dict[str, Any] = {
    "tool_id": NAME,
    "name": "HTTP request",
    "description": (
        "Sends one HTTP request to an allowed host and returns the status, a few headers and "
        "the body (JSON decoded, or text), truncated at 64 KB."
    ),
    "provider": "internal",
    "function_schema": {
        "name": NAME,
        "description": "Send an HTTP request and return the response.",
        "parameters": {
            "type": "object",
            "properties": {
                "method": {
                    "enum": ["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"],
                    "default": "GET",
                },
                "url": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 2048,
                    "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://",
                    "description": "An absolute http:// or https:// URL.",
                },
                "headers": {
                    "type": "object",
                    "propertyNames": {"pattern": "^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$"},
                    # The length by maxLength: RE2, which runs every schema pattern, counts
                    # repetitions only up to 1000.
                    "additionalProperties": {
                        "type": "string",
                        "pattern": "^[^\\r\\n]*$",
                        "maxLength": 8192,
                    },
                    "default": {},
                },
                "json": {"description": "A JSON body to send (sets Content-Type)."},
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": 120,
                    "default": 10,
                    "description": "Seconds to wait for the connection, each read and the body.",
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
    },
    "permissions": "EXECUTE",
    "sandbox_mode": False,
    "implementation": NAME,
    "output_schema": {
        "type": "object",
        "properties": {
            "status": {"type": "integer"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"description": "The JSON value, or the text, of the response body."},
            "truncated": {"type": "boolean"},
        },
        "required": ["status", "headers", "body", "truncated"],
        "additionalProperties": False,
    },
}

PARAMETERS = DEFINITION["function_schema"]["parameters"]


def run(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    method, url, host = _check(arguments, context)
    address = resolve(url, host)
    timeout = float(arguments.get("timeout", 10))
    headers = {
        **(arguments.get("headers") or {}),
        "Host": host_header(url),
        "User-Agent": "Hierarch (tool http_request)",
    }
    if context.idempotency_key:
        headers["Idempotency-Key"] = context.idempotency_key
    if context.traceparent:  # the run's trace goes on in the server's spans, if it keeps any
        headers["traceparent"] = context.traceparent
    credentials = context.credentials
    if credentials is not None:
        headers.update(credentials.headers())
    pinned = url.copy_with(host=address, username=None, password=None)
    deadline = time.monotonic() + timeout
    try:
        with httpx.Client(trust_env=False, follow_redirects=False, timeout=timeout) as client:
            request = client.build_request(
                method,
                pinned,
                headers=_without_duplicates(headers),
                json=arguments.get("json"),
                extensions={"sni_hostname": host} if url.scheme == "https" else {},
            )
            response = client.send(request, stream=True)
            try:
                body, truncated = _read(response, deadline)
            finally:
                response.close()
    except httpx.TimeoutException:
        raise ToolError(
            f"tool {context.tool_id}: {host} did not answer within {timeout:g} s",
            code=TIMEOUT,
        ) from None
    except httpx.HTTPError as exc:
        raise ToolError(
            f"tool {context.tool_id}: request to {host} failed: {type(exc).__name__}"
        ) from None
    _raise_for_status(response, host, context)
    returned = {
        name: response.headers[name] for name in RETURNED_HEADERS if name in response.headers
    }
    return {
        "status": response.status_code,
        "headers": returned,
        "body": _decode(body, response, truncated),
        "truncated": truncated,
    }


def sandbox(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """The answer a typical JSON API gives, after every check that needs no network."""
    method, url, host = _check(arguments, context)
    _refuse_private_literal(host)
    echo = {"sandbox": True, "method": method, "url": str(url)}
    if "json" in arguments:
        echo["json"] = arguments["json"]
    return {
        "status": 200,
        "headers": {"content-type": "application/json"},
        "body": "" if method == "HEAD" else echo,
        "truncated": False,
    }


def host_allowed(host: str, allowed: list[str]) -> bool:
    """An exact host, or `*.example.com` for any subdomain of example.com (not the apex)."""
    host = host.lower().rstrip(".")
    for entry in allowed:
        entry = entry.strip().lower().rstrip(".")
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                return True
        elif entry and host == entry:
            return True
    return False


def _check(arguments: dict[str, Any], context: ToolContext) -> tuple[str, httpx.URL, str]:
    check_arguments(PARAMETERS, arguments, tool_id=context.tool_id)
    method = arguments.get("method", "GET")
    if context.tool.get("permissions") == "READ" and method not in SAFE_METHODS:
        raise ToolError(
            f"tool {context.tool_id} is a READ tool and may only send "
            f"{', '.join(SAFE_METHODS)}, not {method}",
            permanent=True,
            code=PERMISSION_DENIED,
        )
    reserved = sorted(k for k in arguments.get("headers") or {} if k.lower() in RESERVED_HEADERS)
    if reserved:
        raise ToolError(
            f"arguments.headers: {', '.join(reserved)} is set by the tool itself",
            permanent=True,
            code=VALIDATION_ERROR,
        )
    url, host = checked_url(arguments["url"], what="arguments.url", tool_id=context.tool_id)
    return method, url, host


def checked_url(raw: str, *, what: str, tool_id: str) -> tuple[httpx.URL, str]:
    """`raw` as a URL this tool may call, and its host: absolute http(s), no user info, a
    host of the allow-list. `what` names the URL in errors ("arguments.url")."""
    try:
        url = httpx.URL(raw)
        host = url.raw_host.decode("ascii").lower()
    except (httpx.InvalidURL, UnicodeError, TypeError) as exc:
        raise ToolError(
            f"{what}: is not a valid URL: {exc}", permanent=True, code=VALIDATION_ERROR
        ) from None
    if url.scheme not in ("http", "https") or not host:
        raise ToolError(
            f"{what}: must be an absolute http:// or https:// URL",
            permanent=True,
            code=VALIDATION_ERROR,
        )
    if url.userinfo:
        raise ToolError(
            f"{what}: must not carry a user name or password; credentials belong in "
            "the tool's authentication",
            permanent=True,
            code=VALIDATION_ERROR,
        )
    allowed = list(getattr(settings, "HIERARCH_HTTP_ALLOWED_HOSTS", []) or [])
    if not host_allowed(host, allowed):
        why = "is empty" if not allowed else "does not list it"
        raise ToolError(
            f"tool {tool_id}: host {host} is not allowed (HIERARCH_HTTP_ALLOWED_HOSTS {why})",
            permanent=True,
            code=PERMISSION_DENIED,
        )
    return url, host


def resolve(url: httpx.URL, host: str) -> str:
    """The address to connect to, once every address the name resolves to is checked."""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        return public_address(host, port)
    except AddressRefused as exc:
        # A name that does not resolve fails for a moment as often as for good: the retry
        # policy judges; a private address is refused for good.
        if exc.permanent:
            raise ToolError(str(exc), permanent=True, code=PERMISSION_DENIED) from None
        raise ToolError(str(exc)) from None


def _refuse_private_literal(host: str) -> None:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return
    if not getattr(settings, "HIERARCH_HTTP_ALLOW_PRIVATE", False) and not is_public_address(host):
        raise ToolError(
            f"host {host} is a private, loopback or reserved address "
            "(set HIERARCH_HTTP_ALLOW_PRIVATE to call one)",
            permanent=True,
            code=PERMISSION_DENIED,
        )


def host_header(url: httpx.URL) -> str:
    host = url.raw_host.decode("ascii")
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{url.port}" if url.port else host


def _without_duplicates(headers: dict[str, str]) -> dict[str, str]:
    """The tool's own headers win over a caller's of the same name in another case."""
    merged: dict[str, tuple[str, str]] = {}
    for name, value in headers.items():
        merged[name.lower()] = (name, value)
    return dict(merged.values())


def _read(response: httpx.Response, deadline: float) -> tuple[bytes, bool]:
    body = bytearray()
    for chunk in response.iter_bytes():
        if time.monotonic() > deadline:
            # httpx times each read, not the whole; a server dripping bytes ends here.
            raise httpx.ReadTimeout("deadline passed")
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return bytes(body[:MAX_BODY_BYTES]), True
    return bytes(body), False


def _decode(body: bytes, response: httpx.Response, truncated: bool) -> Any:
    text = body.decode(response.encoding or "utf-8", errors="replace")
    content_type = response.headers.get("content-type", "").lower()
    if not truncated and "json" in content_type and text.strip():
        try:
            return json.loads(text, parse_constant=_refuse_constant)
        except ValueError:
            return text
    return text


def _refuse_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; keep such a body as text.
    raise ValueError(name)


def _raise_for_status(response: httpx.Response, host: str, context: ToolContext) -> None:
    status = response.status_code
    if status < 400:
        return
    message = f"tool {context.tool_id}: {host} answered HTTP {status} {response.reason_phrase}"
    if status >= 500 or status in RETRYABLE_CLIENT_ERRORS:
        raise ToolError(message)
    if status == 401 and context.credentials is not None and context.credentials.renew():
        # An OAuth2 token the server no longer takes (revoked, or expired early): dropped
        # from the cache, so the next attempt fetches a new one.
        raise ToolError(message + "; the OAuth2 token was dropped, the next attempt gets a new one")
    raise ToolError(message, permanent=True)
