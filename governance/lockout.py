"""Sign-in lockout (django-axes): after HIERARCH_LOGIN["FAILURE_LIMIT"] failures, a username
and a client (its IP address) are locked out for HIERARCH_LOGIN["COOLOFF_MINUTES"].

Three ways in are counted: the sign-in form (the admin's, which is also the console's:
LOGIN_URL), through axes' authentication backend and middleware, and API bearer tokens, whose
failures `BearerTokenAuthentication` reports here (`bearer_failure_record`). A failed sign-in
counts against the username it named and against the client; a bad token against the client
only (it names no user, and a stale script's token must not lock its owner out of the
console). A locked-out client gets `governance.views.locked_out`: the console's lockout page,
or on the API the seed 001 error object, both 429 with Retry-After.

The client is REMOTE_ADDR unless HIERARCH_TRUSTED_PROXIES says how many proxies in front of
the server append to X-Forwarded-For: a header a client can write itself is trusted only that
far. Unlock with `manage.py axes_reset` (everyone), `axes_reset_username USERNAME` or
`axes_reset_ip IP`.
"""

from __future__ import annotations

import math
from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.http import HttpRequest

LOCKED_OUT = "LOCKED_OUT"


def client_ip(request: HttpRequest) -> str | None:
    """AXES_CLIENT_IP_CALLABLE: the address the outermost trusted proxy saw, or REMOTE_ADDR."""
    proxies = settings.HIERARCH_LOGIN["TRUSTED_PROXIES"]
    if proxies > 0:
        forwarded = [
            hop.strip()
            for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
            if hop.strip()
        ]
        # Each trusted proxy appends the address it received from; anything further left
        # was written by the client.
        if len(forwarded) >= proxies:
            return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR")


def lockout_parameters(request_or_attempt: Any, credentials: dict | None = None) -> list[str]:
    """AXES_LOCKOUT_PARAMETERS: the username and the client, each on its own; the client only
    when there is no username (a bearer token), so the failures of every token without a user
    do not add up across clients."""
    if credentials is not None:
        username = credentials.get("username")
    else:
        username = getattr(request_or_attempt, "username", None)
    return ["username", "ip_address"] if username else ["ip_address"]


def retry_after(request: HttpRequest) -> int:
    cool_off = get_cool_off(request)
    return max(1, math.ceil(cool_off.total_seconds())) if cool_off else 0


def lockout_message(request: HttpRequest) -> str:
    minutes = max(1, math.ceil(retry_after(request) / 60))
    return (
        f"too many failed sign-ins from this client or for this user: locked out for "
        f"{minutes} minutes. Wait, or ask an administrator to unlock it "
        "(manage.py axes_reset_username USERNAME, axes_reset_ip IP)"
    )


def axes_request(request: Any) -> HttpRequest:
    """The request as axes records it for a bearer token: the client's address, agent and
    path, and no body (the token is checked before the body is parsed, and a body that does
    not parse must not keep a failure from being counted)."""
    probe = HttpRequest()
    probe.META = request.META
    probe.method = request.method
    probe.path = probe.path_info = request.path
    return probe


def client_locked_out(probe: HttpRequest) -> bool:
    """Whether the client of a bearer-token request is locked out (`probe`: `axes_request`)."""
    return not AxesProxyHandler.is_allowed(probe, {"username": None})


def bearer_failure_record(probe: HttpRequest, *, sender: type) -> bool:
    """Count a bearer token that did not authenticate against its client (through the
    sign-in failure signal every lockout handler listens to); True when that locked the
    client out."""
    user_login_failed.send(sender=sender, credentials={"username": None}, request=probe)
    return bool(getattr(probe, "axes_locked_out", False))
