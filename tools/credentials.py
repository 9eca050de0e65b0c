"""A tool's authentication (seed 000 §3.6.1) from the credential vault, for one call.

    prepared = authenticator.prepare(tool, workspace_id=…, tool_id=…)  # the vault
    credentials = authenticator.credentials(prepared, tool_id=…)         # an OAuth2 token
    ToolContext(…, credentials=credentials)  # http_request sends credentials.headers()

What the secret named by `authentication.credentials_ref` holds, by `authentication.type`:

- NONE: nothing is resolved or sent.
- API_KEY: the key as text, sent as `Authorization: Bearer <key>`; or a JSON object
  `{"key": "…", "header": "X-Api-Key"}` to send the key as it is in that header (the tool
  schema has no field for a header name, so the name travels with the key).
- OAUTH2, the client-credentials grant (RFC 6749 §4.4): a JSON object `{"client_id",
  "client_secret", "token_url", "scope"?}`. A token is fetched from `token_url` (a host of
  HIERARCH_HTTP_ALLOWED_HOSTS, checked like any http_request call), the client authenticated
  by HTTP Basic, and kept in this process until shortly before it expires (`expires_in`; five
  minutes when the server does not say); sent as `Authorization: Bearer <token>`. A 401 from
  the API drops the token, so the next attempt fetches a new one.
- SERVICE_ACCOUNT: a token issued to a service identity (a bot user's access token, a
  long-lived service token), as text or `{"token": "…"}`, sent as `Authorization: Bearer`.
  A key file that needs a signed JWT exchange (a Google service account's `private_key`) is
  refused with an error saying so.

Values travel as `Redacted` (their str and repr are a placeholder, pickling is refused) until
http_request puts them in a header, and the runner replaces any echo of them, in any encoding,
in what the call returns or raises (`governance/secret_redaction.py`). Errors name
the tool, the secret and the field, never a value.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from django.views.decorators.debug import sensitive_variables

from governance.secret_redaction import SecretRedaction
from governance.vault import Redacted, SecretInvalid, VaultError, secret_resolve
from runs.engine.ports import TIMEOUT, VALIDATION_ERROR, ToolError
from tools.builtin import http_request

logger = logging.getLogger(__name__)

NONE, API_KEY, OAUTH2, SERVICE_ACCOUNT = "NONE", "API_KEY", "OAUTH2", "SERVICE_ACCOUNT"
AUTH_TYPES = (NONE, API_KEY, OAUTH2, SERVICE_ACCOUNT)
SECRET_INVALID = SecretInvalid.code  # a secret that holds the wrong shape of value
# A token whose lifetime the server does not give is used this long (a 401 drops it sooner).
DEFAULT_TOKEN_SECONDS = 300.0
MAX_TOKEN_RESPONSE_BYTES = 64 * 1024
# Shorter values are no real credentials; replacing them would garble ordinary text.
SCRUB_MIN_CHARS = 8

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
_OAUTH_ERROR = re.compile(r"^[a-z_]{1,40}$")
_RESERVED_HEADERS = http_request.RESERVED_HEADERS | {"idempotency-key", "user-agent"}


class Credentials:
    """The headers one call sends, and the values an answer must not echo."""

    __slots__ = ("_headers", "_redaction", "_renew")

    def __init__(
        self,
        headers: Mapping[str, Redacted],
        secrets: tuple[Redacted, ...],
        renew: Callable[[], None] | None = None,
    ):
        self._headers = dict(headers)
        self._redaction = SecretRedaction(
            s.reveal() for s in secrets if len(s.reveal()) >= SCRUB_MIN_CHARS
        )
        self._renew = renew

    def headers(self) -> dict[str, str]:
        return {name: value.reveal() for name, value in self._headers.items()}

    def redact(self, value: Any) -> Any:
        """A JSON value (or a text) with every echo of these credentials, in any encoding
        `governance/secret_redaction.py` knows, replaced by `[redacted]`."""
        return self._redaction.value(value)

    def renew(self) -> bool:
        """Drop a cached token the server refused; False when there is none to renew."""
        if self._renew is None:
            return False
        self._renew()
        return True

    def __repr__(self) -> str:
        return f"Credentials(headers={sorted(self._headers)})"

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("credentials cannot be pickled")


@dataclass(frozen=True)
class _Client:
    """OAuth2 client credentials, as the secret gives them."""

    client_id: Redacted = field(repr=False)
    client_secret: Redacted = field(repr=False)
    token_url: str
    scope: str | None


@dataclass(frozen=True)
class Prepared:
    """A tool's secret, read and checked; an OAuth2 token is fetched only when the call goes
    ahead (`Authenticator.credentials`)."""

    ref: str
    workspace_id: int
    headers: Mapping[str, Redacted] = field(default_factory=dict, repr=False)
    secrets: tuple[Redacted, ...] = field(default=(), repr=False)
    client: _Client | None = field(default=None, repr=False)
    # OAuth2: a hash of the secret, so that a new value gets a new token.
    digest: str = field(default="", repr=False)


@dataclass
class _Token:
    value: Redacted
    expires_at: float


class Authenticator:
    """Resolves tools' authentication from the vault; one per process keeps OAuth2 tokens."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = 10.0,
    ):
        self.clock = clock
        self.timeout_s = timeout_s
        self._tokens: dict[tuple[int, str, str], _Token] = {}
        self._locks: dict[tuple[int, str, str], threading.Lock] = {}
        self._lock = threading.Lock()

    @sensitive_variables()
    def prepare(
        self, tool: Mapping[str, Any], *, workspace_id: int, tool_id: str
    ) -> Prepared | None:
        """The tool's secret as a `Prepared`, or None for a tool without authentication.
        Raises a permanent ToolError naming the problem (SECRET_NOT_FOUND, SECRET_INVALID…)."""
        authentication = tool.get("authentication") or {}
        if not isinstance(authentication, Mapping):
            raise ToolError(
                f"tool {tool_id}: authentication must be an object with type and credentials_ref",
                permanent=True,
                code=VALIDATION_ERROR,
            )
        kind = authentication.get("type") or NONE
        if kind == NONE:
            return None
        if kind not in AUTH_TYPES:
            raise ToolError(
                f"tool {tool_id}: authentication.type {kind!r} is not one of "
                f"{', '.join(AUTH_TYPES)}",
                permanent=True,
                code=VALIDATION_ERROR,
            )
        ref = authentication.get("credentials_ref")
        try:
            value = secret_resolve(workspace_id, ref)
        except VaultError as exc:
            # The vault's messages name the secret and never hold its value.
            raise ToolError(
                f"tool {tool_id}: authentication {kind}: {exc}", permanent=True, code=exc.code
            ) from None
        problem = _Problem(tool_id, ref, kind)
        if kind == OAUTH2:
            client = _oauth2_client(value, problem)
            digest = hashlib.sha256(value.encode()).hexdigest()
            return Prepared(ref, workspace_id, client=client, digest=digest)
        header, secret = _api_key(value, problem) if kind == API_KEY else _token(value, problem)
        if header is None:
            headers = {"Authorization": Redacted(f"Bearer {secret.reveal()}", "credential")}
        else:
            headers = {header: secret}
        return Prepared(ref, workspace_id, headers=headers, secrets=(secret,))

    def credentials(self, prepared: Prepared, *, tool_id: str) -> Credentials:
        """What the call sends: the secret's header, or a (cached) OAuth2 token."""
        if prepared.client is None:
            return Credentials(prepared.headers, prepared.secrets)
        key = (prepared.workspace_id, prepared.ref, prepared.digest)
        token = self._token(key, prepared, tool_id)

        def renew() -> None:
            with self._lock:
                if self._tokens.get(key) is token:
                    del self._tokens[key]

        bearer = Redacted(f"Bearer {token.value.reveal()}", "credential")
        return Credentials({"Authorization": bearer}, (token.value,), renew=renew)

    def forget_tokens(self) -> None:
        with self._lock:
            self._tokens.clear()

    def _token(self, key: tuple[int, str, str], prepared: Prepared, tool_id: str) -> _Token:
        token = self._tokens.get(key)
        if token is not None and token.expires_at > self.clock():
            return token
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # one fetch at a time per client: the others take its token
            token = self._tokens.get(key)
            if token is not None and token.expires_at > self.clock():
                return token
            value, lifetime = self._fetch(prepared, tool_id)
            margin = min(60.0, lifetime / 10)
            token = _Token(value, self.clock() + lifetime - margin)
            with self._lock:
                self._tokens[key] = token
            return token

    @sensitive_variables()
    def _fetch(self, prepared: Prepared, tool_id: str) -> tuple[Redacted, float]:
        client = prepared.client
        assert client is not None
        url, host = http_request.checked_url(
            client.token_url, what=f"the token_url of secret {prepared.ref!r}", tool_id=tool_id
        )
        status, body = self._token_response(client, url, host, tool_id)
        token, lifetime = _token_answered(status, _json_or_none(body), prepared, tool_id, host)
        logger.info(
            "tool %s: OAuth2 token from %s for secret %s, valid %.0f s",
            tool_id,
            host,
            prepared.ref,
            lifetime,
        )
        return Redacted(token, "OAuth2 token"), lifetime

    def _token_response(
        self, client: Any, url: httpx.URL, host: str, tool_id: str
    ) -> tuple[int, bytes]:
        """POST the client credentials grant to the checked token_url, at the address it
        was checked at; answers the status and the (capped) body."""
        address = http_request.resolve(url, host)
        # RFC 6749 §2.3.1: the id and secret are form-encoded before they are joined.
        pair = f"{quote(client.client_id.reveal(), safe='')}:"
        pair += quote(client.client_secret.reveal(), safe="")
        form = {"grant_type": "client_credentials"}
        if client.scope:
            form["scope"] = client.scope
        try:
            with httpx.Client(
                trust_env=False, follow_redirects=False, timeout=self.timeout_s
            ) as http:
                request = http.build_request(
                    "POST",
                    url.copy_with(host=address),
                    data=form,
                    headers={
                        "Host": http_request.host_header(url),
                        "Accept": "application/json",
                        "Authorization": "Basic " + base64.b64encode(pair.encode()).decode(),
                        "User-Agent": "Hierarch (OAuth2 client credentials)",
                    },
                    extensions={"sni_hostname": host} if url.scheme == "https" else {},
                )
                response = http.send(request, stream=True)
                try:
                    body = _read_capped(response)
                finally:
                    response.close()
        except httpx.TimeoutException:
            raise ToolError(
                f"tool {tool_id}: the OAuth2 token endpoint {host} did not answer within "
                f"{self.timeout_s:g} s",
                code=TIMEOUT,
            ) from None
        except httpx.HTTPError as exc:
            raise ToolError(
                f"tool {tool_id}: the OAuth2 token request to {host} failed: {type(exc).__name__}"
            ) from None
        return response.status_code, body


def _token_answered(
    status: int, answer: Any, prepared: Prepared, tool_id: str, host: str
) -> tuple[str, float]:
    """The access token and its lifetime from the token endpoint's answer, or the ToolError
    that says what was wrong with it (retryable when the endpoint may answer better later)."""
    problem = _Problem(tool_id, prepared.ref, OAUTH2)
    where = f"the OAuth2 token endpoint {host}"
    if status >= 500 or status in http_request.RETRYABLE_CLIENT_ERRORS:
        raise ToolError(f"tool {tool_id}: {where} answered HTTP {status}")
    if 300 <= status < 400:
        raise problem.server(
            where,
            f"answered with a redirect (HTTP {status}), which is not followed; set "
            "token_url to the address that answers",
        )
    if status >= 400:
        error = answer.get("error") if isinstance(answer, dict) else None
        code = f", {error}" if isinstance(error, str) and _OAUTH_ERROR.match(error) else ""
        raise ToolError(
            f"tool {tool_id}: {where} refused the client credentials of secret "
            f"{prepared.ref!r} (HTTP {status}{code})",
            permanent=True,
        )
    if not isinstance(answer, dict):
        raise problem.server(where, "answered without a JSON object")
    token = answer.get("access_token")
    if not isinstance(token, str) or not token.strip() or _breaks_a_header(token):
        raise problem.server(where, "answered without a usable access_token")
    token_type = answer.get("token_type", "Bearer")
    if not isinstance(token_type, str) or token_type.lower() != "bearer":
        raise problem.server(where, f"gave a token of type {token_type!r}; only Bearer is sent")
    return token.strip(), _lifetime(answer.get("expires_in"))


DEFAULT_AUTHENTICATOR = Authenticator()


@dataclass(frozen=True)
class _Problem:
    """Errors about one tool's secret: they name the secret and the field, never a value."""

    tool_id: str
    ref: str
    kind: str

    def secret(self, why: str) -> ToolError:
        return ToolError(
            f"tool {self.tool_id}: authentication {self.kind}: secret {self.ref!r} {why}",
            permanent=True,
            code=SECRET_INVALID,
        )

    def server(self, where: str, why: str) -> ToolError:
        return ToolError(
            f"tool {self.tool_id}: {where} {why} (secret {self.ref!r})", permanent=True
        )


def _json_object(value: str, problem: _Problem, expected: str) -> dict[str, Any] | None:
    """The secret as a JSON object when it is written as one (starts with "{"), else None."""
    text = value.strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        why = f"starts like a JSON object but is not valid JSON; {expected}"
        raise problem.secret(why) from None
    if not isinstance(data, dict):
        raise problem.secret(f"is not a JSON object; {expected}")
    return data


def _only(data: dict[str, Any], allowed: tuple[str, ...], problem: _Problem) -> None:
    unknown = sorted(str(name) for name in data if name not in allowed)
    if unknown:
        raise problem.secret(
            f"has the unknown field {unknown[0]!r}; its fields are {', '.join(allowed)}"
        )


def _text(data: dict[str, Any], name: str, problem: _Problem) -> Redacted:
    value = data.get(name)
    if value is None:
        raise problem.secret(f"lacks the field {name!r}")
    if not isinstance(value, str) or not value.strip():
        raise problem.secret(f"field {name!r} must be non-empty text")
    if _breaks_a_header(value):
        raise problem.secret(f"field {name!r} contains a line break or a control character")
    return Redacted(value.strip(), name)


def _breaks_a_header(value: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in value.strip())


@sensitive_variables()
def _api_key(value: str, problem: _Problem) -> tuple[str | None, Redacted]:
    expected = 'give the key as text, or {"key": "…", "header": "X-Api-Key"}'
    data = _json_object(value, problem, expected)
    if data is None:
        if _breaks_a_header(value):
            raise problem.secret("contains a line break or a control character")
        return None, Redacted(value.strip(), "API key")
    _only(data, ("key", "header"), problem)
    key = _text(data, "key", problem)
    header = data.get("header")
    if header is None:
        return None, key
    if not isinstance(header, str) or not _HEADER_NAME.match(header):
        raise problem.secret("field 'header' must be an HTTP header name, such as X-Api-Key")
    if header.lower() in _RESERVED_HEADERS:
        raise problem.secret(f"field 'header' names {header}, which the tool sets itself")
    return header, key


@sensitive_variables()
def _token(value: str, problem: _Problem) -> tuple[None, Redacted]:
    expected = 'give the token as text, or {"token": "…"}'
    data = _json_object(value, problem, expected)
    if data is None:
        if _breaks_a_header(value):
            raise problem.secret("contains a line break or a control character")
        return None, Redacted(value.strip(), "service account token")
    if "private_key" in data:
        raise problem.secret(
            "holds a key file (private_key); a SERVICE_ACCOUNT secret holds the account's "
            'bearer token, as text or {"token": "…"}: exchanging a signed key for a token '
            "is not supported"
        )
    _only(data, ("token",), problem)
    return None, _text(data, "token", problem)


@sensitive_variables()
def _oauth2_client(value: str, problem: _Problem) -> _Client:
    expected = 'give {"client_id": …, "client_secret": …, "token_url": …, "scope": …}'
    data = _json_object(value, problem, expected)
    if data is None:
        raise problem.secret(f"must be a JSON object of client credentials; {expected}")
    _only(data, ("client_id", "client_secret", "token_url", "scope"), problem)
    client_id = _text(data, "client_id", problem)
    client_secret = _text(data, "client_secret", problem)
    token_url = _text(data, "token_url", problem).reveal()
    scope = data.get("scope")
    if isinstance(scope, list) and all(isinstance(s, str) for s in scope):
        scope = " ".join(scope)
    if scope is not None and (not isinstance(scope, str) or _breaks_a_header(scope)):
        raise problem.secret("field 'scope' must be text, or a list of texts")
    return _Client(client_id, client_secret, token_url, scope or None)


def _read_capped(response: httpx.Response) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > MAX_TOKEN_RESPONSE_BYTES:
            break
    return bytes(body)


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _lifetime(expires_in: Any) -> float:
    """Seconds the token is good for: `expires_in` (a number, or a numeric text as some
    servers send), else DEFAULT_TOKEN_SECONDS."""
    if isinstance(expires_in, bool):
        return DEFAULT_TOKEN_SECONDS
    try:
        seconds = float(expires_in)
    except (TypeError, ValueError):
        return DEFAULT_TOKEN_SECONDS
    return max(0.0, seconds) if math.isfinite(seconds) else DEFAULT_TOKEN_SECONDS
