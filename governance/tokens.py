"""Users' API tokens: made, revoked, found by the token a client sends.

A token is `hrc_` followed by 43 URL-safe characters (32 random bytes). Only its SHA-256 is
stored; the token itself is returned once by `api_token_create` and never logged, audited or
shown again. The first characters (`PREFIX_LENGTH`, `hrc_` included) are kept to tell tokens
apart in lists; they give away 48 of the token's 256 random bits.

Tokens belong to a user, not to a workspace, but the audit log is kept per workspace: making
or revoking a token is recorded in every workspace the user is a member of (their own roles
or their groups'), because that is where the token can act. A user who belongs to no
workspace (a superuser with no role, say) leaves no audit record.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q, QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone

from entities.models import Workspace
from governance.audit import audit_record
from governance.models import ApiToken, AuditAction
from governance.permissions import VIEW, allowed_workspace_ids

TOKEN_PREFIX = "hrc_"  # noqa: S105 - the recognisable start of every token, not a secret
PREFIX_LENGTH = len(TOKEN_PREFIX) + 8
# secrets.token_urlsafe(32): 43 characters of the URL-safe base64 alphabet.
TOKEN_PATTERN = re.compile(r"hrc_[A-Za-z0-9_-]{43}")
MAX_DAYS = 3650
# An API call writes `last_used_at` only when the one stored is older than this.
LAST_USED_PRECISION = timedelta(minutes=1)


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()
"""`expires_at` left to settings.HIERARCH_API["TOKEN_DAYS"] (0: never)."""


def token_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def default_expiry(now: datetime | None = None) -> datetime | None:
    days = settings.HIERARCH_API["TOKEN_DAYS"]
    if days <= 0:
        return None
    return (now or timezone.now()) + timedelta(days=days)


def expiry_in(days: int | None, now: datetime | None = None) -> datetime | None:
    """The expiry `days` whole days from now; None (or 0) never expires."""
    if not days:
        return None
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"a token lives 1 to {MAX_DAYS} days, not {days}")
    return (now or timezone.now()) + timedelta(days=days)


# -- writes ------------------------------------------------------------------------------------


def api_token_create(
    *,
    user: Any,
    name: str,
    expires_at: datetime | None = DEFAULT,
    actor: Any = DEFAULT,
) -> tuple[ApiToken, str]:
    """Make a token for `user` and return it with its plaintext, which is shown once.

    `expires_at` None never expires; left out, the token lives settings.HIERARCH_API
    ["TOKEN_DAYS"] days. `actor` is who made it for the audit log (the user themselves when
    left out; None: the system, as `manage.py create_api_token` does)."""
    name = (name or "").strip()
    if not name:
        raise ValueError("a token needs a name")
    if not user.is_active:
        raise ValueError(f"user {user.get_username()!r} is inactive")
    now = timezone.now()
    if expires_at is DEFAULT:
        expires_at = default_expiry(now)
    if expires_at is not None and expires_at <= now:
        raise ValueError("a token's expiry must be in the future")
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name[:100],
            prefix=plaintext[:PREFIX_LENGTH],
            key_hash=token_hash(plaintext),
            created_at=now,
            expires_at=expires_at,
        )
        _audit(
            token,
            AuditAction.API_TOKEN_CREATED,
            actor=user if actor is DEFAULT else actor,
            after=_described(token),
        )
    return token, plaintext


def api_token_revoke(*, token: ApiToken, user: Any) -> ApiToken:
    """Revoke the token: it authenticates nothing from now on. `user` is who revokes it, its
    owner or a superuser. Revoking a revoked token changes nothing."""
    if not (user.pk == token.user_id or (user.is_active and user.is_superuser)):
        raise PermissionDenied("only its owner or a superuser may revoke a token")
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().select_related("user").get(pk=token.pk)
        if token.revoked_at is not None:
            return token
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        _audit(
            token,
            AuditAction.API_TOKEN_REVOKED,
            actor=user,
            before={**_described(token), "revoked_at": None},
            after={**_described(token), "revoked_at": token.revoked_at},
        )
    return token


def api_token_touch(token: ApiToken, now: datetime | None = None) -> None:
    """Note that the token was just used: at most one write a minute per token, and only when
    no other request wrote a newer time meanwhile."""
    now = now or timezone.now()
    stale = now - LAST_USED_PRECISION
    if token.last_used_at is not None and token.last_used_at > stale:
        return
    ApiToken.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale), pk=token.pk
    ).update(last_used_at=now)
    token.last_used_at = now


def _described(token: ApiToken) -> dict[str, Any]:
    # What the audit log keeps of a token: never the token, nor its hash.
    return {
        "user": token.user.get_username(),
        "name": token.name,
        "prefix": token.prefix,
        "expires_at": token.expires_at,
    }


def _audit(token: ApiToken, action: str, *, actor: Any, **change: Any) -> None:
    workspace_ids = sorted(allowed_workspace_ids(token.user, VIEW))
    for workspace_id in Workspace.objects.filter(pk__in=workspace_ids).values_list("pk", flat=True):
        audit_record(
            workspace=workspace_id,
            action=action,
            actor=actor,
            target=token,
            object_label=f"{token.user.get_username()}: {token}",
            **change,
        )


# -- reads -------------------------------------------------------------------------------------


def api_tokens_of(user: Any) -> QuerySet[ApiToken]:
    """The user's own tokens, newest first (a superuser's too: only their own)."""
    return ApiToken.objects.filter(user_id=user.pk)


def api_token_get(user: Any, pk: int) -> ApiToken:
    """One of the user's own tokens; anyone else's is a 404."""
    return get_object_or_404(api_tokens_of(user), pk=pk)


def api_token_find(plaintext: str) -> ApiToken | None:
    """The token with this plaintext, with its user, or None.

    The row is found by the SHA-256 of what the client sent, so the lookup's time says
    nothing about how close a guess came to a real token; the hashes are then compared once
    more in constant time."""
    digest = token_hash(plaintext)
    token = ApiToken.objects.select_related("user").filter(key_hash=digest).first()
    if token is None or not hmac.compare_digest(token.key_hash, digest):
        return None
    return token
