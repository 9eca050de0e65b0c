"""`Authorization: Bearer hrc_…`: the API's token authentication (first in
REST_FRAMEWORK's DEFAULT_AUTHENTICATION_CLASSES, before the browser session).

A request without a Bearer header falls through to the session. A Bearer header that does
not authenticate is refused outright (401, AUTHENTICATION_FAILED, with a `Bearer` challenge)
even when a session cookie came along: a client that sends a token means that token. A
request authenticated by a token needs no CSRF token, since no browser adds the header by
itself; DRF checks CSRF only for the session.

The messages say what is wrong and what to do, never the token that was sent.

Every Bearer header that does not authenticate counts as a failed sign-in of its client
(governance/lockout.py): past HIERARCH_LOGIN["FAILURE_LIMIT"] the client is locked out, and
every request of it with a Bearer header is answered 429 LOCKED_OUT until the cool-off ends.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.urls import reverse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import APIException, AuthenticationFailed
from rest_framework.request import Request

from governance.lockout import (
    LOCKED_OUT,
    axes_request,
    bearer_failure_record,
    client_locked_out,
    lockout_message,
    retry_after,
)
from governance.models import ApiToken
from governance.tokens import TOKEN_PATTERN, api_token_find, api_token_touch

KEYWORD = b"bearer"
CHALLENGE = 'Bearer realm="api"'


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _where() -> str:
    return reverse("account:tokens")


class ClientLockedOut(APIException):
    """429 LOCKED_OUT: too many failed sign-ins or bad tokens from this client."""

    status_code = 429
    default_code = LOCKED_OUT.lower()

    def __init__(self, detail: str, wait: int) -> None:
        super().__init__(detail)
        self.wait = wait  # DRF's handler turns it into Retry-After


class BearerTokenAuthentication(BaseAuthentication):
    """The user of a valid, unrevoked, unexpired API token (`request.auth` is the ApiToken)."""

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        scheme, _, credentials = get_authorization_header(request).partition(b" ")
        if scheme.lower() != KEYWORD:
            return None  # no header, or another scheme: the session decides
        probe = axes_request(request)
        if client_locked_out(probe):
            raise ClientLockedOut(lockout_message(probe), retry_after(probe))
        try:
            return self._token_user(credentials)
        except AuthenticationFailed:
            if bearer_failure_record(probe, sender=type(self)):
                raise ClientLockedOut(lockout_message(probe), retry_after(probe)) from None
            raise

    def _token_user(self, credentials: bytes) -> tuple[Any, ApiToken]:
        # Latin-1 reads any bytes; a token is ASCII, so the pattern below refuses the rest.
        plaintext = credentials.decode("latin-1").strip()
        if not plaintext:
            raise AuthenticationFailed(
                "the Authorization header has no token after Bearer; "
                "send Authorization: Bearer hrc_…"
            )
        if not TOKEN_PATTERN.fullmatch(plaintext):
            raise AuthenticationFailed(
                "the Bearer token is malformed: an API token is hrc_ followed by 43 letters, "
                f"digits, '-' and '_'; create one at {_where()}"
            )
        token = api_token_find(plaintext)
        if token is None:
            raise AuthenticationFailed(f"no such token; create one at {_where()}")
        if token.revoked_at is not None:
            raise AuthenticationFailed(
                f"the token was revoked on {_when(token.revoked_at)}; "
                f"create a new one at {_where()}"
            )
        if token.is_expired():
            raise AuthenticationFailed(
                f"the token has expired on {_when(token.expires_at)}; "
                f"create a new one at {_where()}"
            )
        if not token.user.is_active:
            raise AuthenticationFailed("the token's user is inactive")
        api_token_touch(token)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return CHALLENGE


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """The token scheme in the OpenAPI schema."""

    target_class = "governance.api_auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "A personal API token (hrc_…), made on /account/tokens/ or with "
                "`manage.py create_api_token USERNAME`."
            ),
        }
