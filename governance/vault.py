"""The credential vault: workspace secrets, encrypted at rest, resolved only inside a tool call.

A tool's `authentication.credentials_ref` names a `Secret` of its workspace; `secret_resolve`
turns the name into the value at the moment of the call. Values are encrypted with Fernet
(AES-128-CBC with HMAC-SHA256) under a `MultiFernet` of the keys in `HIERARCH_VAULT_KEYS`,
newest first: the newest encrypts, every key decrypts, and `vault_rotate`
(`manage.py rotate_vault_key`) re-encrypts every secret with the newest, after which the older
keys can be removed (seed 000 §8.3, API key rotation).

When `HIERARCH_VAULT_KEYS` is empty the vault uses one key derived from `SECRET_KEY` (HKDF
over SHA-256, info "hierarch credential vault"), and older keys derived from
`SECRET_KEY_FALLBACKS`, so the embedded default (`make run`) works with no configuration.
That key, and those of the fallbacks, also stay on as the last decryption keys when
`HIERARCH_VAULT_KEYS` is set, so moving to configured keys is: set them, run
`rotate_vault_key`. They never encrypt anything once a key is configured.

Each ciphertext binds its value to its workspace and name, so a ciphertext copied onto
another secret's row does not decrypt as that secret. A value never appears in a log, an
error, an audit record or a `repr`: errors name the secret, `Redacted` carries a value where
it might be printed, and the audit log records a secret's name and kind only.
"""

from __future__ import annotations

import base64
import functools
import hmac
import json
import logging
import re
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from entities.models import Workspace
from governance.audit import audit_record
from governance.models import (
    VAULT_NAME_HELP,
    VAULT_NAME_PATTERN,
    AuditAction,
    Secret,
    SecretKind,
)

logger = logging.getLogger(__name__)

MAX_VALUE_CHARS = 64 * 1024
_DERIVATION_INFO = b"hierarch credential vault"


class VaultError(Exception):
    """A vault operation that cannot be done; the message names the secret, never its value."""

    code = "VAULT_ERROR"


class SecretInvalid(VaultError, ValueError):
    code = "SECRET_INVALID"


class SecretNotFound(VaultError, LookupError):
    """A `credentials_ref` that names no secret of the workspace."""

    code = "SECRET_NOT_FOUND"

    def __init__(self, message: str, *, ref: Any = None, workspace_id: Any = None):
        super().__init__(message)
        self.ref = ref
        self.workspace_id = workspace_id


class SecretUndecryptable(VaultError):
    """The stored ciphertext does not open with any configured key (or belongs elsewhere)."""

    code = "SECRET_UNDECRYPTABLE"


class Redacted:
    """A secret value on its way somewhere: `str`, `repr` and formatting show a placeholder,
    pickling is refused (so it never lands in a cache, a session or a Celery message), and
    `reveal()` gives the value to the one call that needs it."""

    __slots__ = ("_value", "label")

    def __init__(self, value: str, label: str = "secret"):
        if not isinstance(value, str):
            raise TypeError(f"a {label} value must be text, not {type(value).__name__}")
        self._value = value
        self.label = label

    def reveal(self) -> str:
        return self._value

    def __str__(self) -> str:
        return f"[{self.label}: redacted]"

    def __repr__(self) -> str:
        return f"Redacted({self.label!r})"

    def __format__(self, spec: str) -> str:
        return str(self)

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Redacted):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    __hash__ = None  # type: ignore[assignment]

    def __copy__(self) -> Redacted:
        return self

    def __deepcopy__(self, memo: dict) -> Redacted:
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"a {self.label} value cannot be pickled")


def derived_key(secret_key: str) -> bytes:
    """The Fernet key the vault derives from a Django SECRET_KEY."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_DERIVATION_INFO)
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode()))


def _keys() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The configured keys, and the Django secret keys the derived keys come from."""
    return (
        tuple(settings.HIERARCH_VAULT_KEYS),
        (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])),
    )


@functools.lru_cache(maxsize=8)
def _fernet_for(configured: tuple[str, ...], secret_keys: tuple[str, ...]) -> MultiFernet:
    fernets = []
    for position, key in enumerate(configured, start=1):
        try:
            fernets.append(Fernet(key.encode()))
        except (ValueError, TypeError):
            raise ImproperlyConfigured(
                f"HIERARCH_VAULT_KEYS: key {position} of {len(configured)} is not a Fernet key "
                '(32 bytes, URL-safe base64); make one with `python -c "from '
                'cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`'
            ) from None
    fernets += [Fernet(derived_key(secret_key)) for secret_key in secret_keys]
    return MultiFernet(fernets)


def _fernet() -> MultiFernet:
    return _fernet_for(*_keys())


@sensitive_variables()
def _encrypt(workspace_id: int, name: str, value: str) -> str:
    envelope = json.dumps({"workspace": workspace_id, "name": name, "value": value})
    return _fernet().encrypt(envelope.encode()).decode()


@sensitive_variables()
def _decrypt(secret: Secret) -> str:
    try:
        envelope = json.loads(_fernet().decrypt(secret.ciphertext.encode()))
    except InvalidToken:
        raise SecretUndecryptable(
            f"secret {secret.name!r} cannot be decrypted with the configured vault keys "
            "(HIERARCH_VAULT_KEYS): the key it was saved with is missing or its stored "
            "value was altered; restore that key, or set the secret again"
        ) from None
    if envelope.get("workspace") != secret.workspace_id or envelope.get("name") != secret.name:
        raise SecretUndecryptable(
            f"secret {secret.name!r}: its stored value belongs to another secret (it was "
            "copied from another row); set the secret again"
        )
    return envelope["value"]


class PiiCipher:
    """pii_handling ENCRYPT's cipher for log rows: the vault's keys (rotated with them),
    URL-safe tokens that `governance.safety.pii_reveal` finds again."""

    def encrypt(self, text: str) -> str:
        return _fernet().encrypt(text.encode()).decode()

    def decrypt(self, token: str) -> str:
        try:
            return _fernet().decrypt(token.encode()).decode()
        except InvalidToken:
            raise SecretUndecryptable(
                "a value encrypted under pii_handling ENCRYPT cannot be decrypted with the "
                "configured vault keys (HIERARCH_VAULT_KEYS)"
            ) from None


def _user_or_none(user: Any) -> Any:
    return user if getattr(user, "is_authenticated", False) else None


@sensitive_variables("value", "plain")
def secret_set(
    *,
    workspace: Workspace,
    name: str,
    value: str | Redacted,
    kind: str = SecretKind.GENERIC,
    user: Any = None,
) -> Secret:
    """Create the workspace's secret `name`, or replace its value and kind. Audited by name
    and kind only; the value is never shown again."""
    if not isinstance(name, str) or not re.fullmatch(VAULT_NAME_PATTERN, name):
        raise SecretInvalid(f"{name!r} is not a secret name: {VAULT_NAME_HELP}")
    if kind not in SecretKind.values:
        raise SecretInvalid(
            f"{kind!r} is not a kind of secret; use one of {', '.join(SecretKind.values)}"
        )
    plain = value.reveal() if isinstance(value, Redacted) else value
    if not isinstance(plain, str):
        raise SecretInvalid(f"the value of secret {name!r} must be text")
    if not plain.strip():
        raise SecretInvalid(f"the value of secret {name!r} is empty")
    if len(plain) > MAX_VALUE_CHARS:
        raise SecretInvalid(
            f"the value of secret {name!r} is {len(plain):,} characters; the vault holds "
            f"values of up to {MAX_VALUE_CHARS:,}"
        )
    with transaction.atomic():
        secret = Secret.objects.select_for_update().filter(workspace=workspace, name=name).first()
        replaced = secret is not None
        before = {"name": name, "kind": secret.kind} if replaced else None
        if secret is None:
            secret = Secret(workspace=workspace, name=name, created_by=_user_or_none(user))
        secret.kind = kind
        secret.ciphertext = _encrypt(workspace.pk, name, plain)
        secret.save()
        audit_record(
            workspace=workspace,
            action=AuditAction.SECRET_SET,
            actor=user,
            target=secret,
            before=before,
            after={"name": name, "kind": kind, "replaced": replaced},
        )
    logger.info(
        "secret %s %s in workspace %s", name, "replaced" if replaced else "set", workspace.slug
    )
    return secret


@sensitive_variables()
def secret_resolve(workspace_id: Any, ref: Any) -> str:
    """The value of the workspace's secret named `ref` (a tool's `credentials_ref`), for the
    tool call that needs it and nothing else: never store it, log it or put it in an error."""
    if not isinstance(ref, str) or not ref:
        raise SecretNotFound(
            f"no secret is named: credentials_ref is {ref!r}; name a secret of the workspace",
            ref=ref,
            workspace_id=workspace_id,
        )
    secret = Secret.objects.filter(workspace_id=workspace_id, name=ref).first()
    if secret is None:
        workspace = Workspace.objects.filter(pk=workspace_id).values_list("slug", flat=True)
        where = f"workspace {workspace.first()!r}" if workspace else "this workspace"
        raise SecretNotFound(
            f"there is no secret {ref!r} in {where}; add it in the admin (Governance, "
            "Secrets) or correct the tool's authentication.credentials_ref",
            ref=ref,
            workspace_id=workspace_id,
        )
    return _decrypt(secret)


def secret_delete(*, secret: Secret, user: Any = None) -> None:
    """Delete a secret; tools that name it fail with SecretNotFound from then on."""
    with transaction.atomic():
        audit_record(
            workspace=secret.workspace_id,
            action=AuditAction.SECRET_DELETED,
            actor=user,
            target=secret,
            before={"name": secret.name, "kind": secret.kind},
        )
        Secret.objects.filter(pk=secret.pk).delete()
    logger.info("secret %s deleted from workspace %s", secret.name, secret.workspace_id)


def vault_rotate() -> int:
    """Re-encrypt every secret with the newest vault key, in one transaction; answers how
    many. After it, keys other than the newest may be removed from HIERARCH_VAULT_KEYS."""
    fernet = _fernet()
    now = timezone.now()
    count = 0
    with transaction.atomic():
        secrets = Secret.objects.select_for_update().order_by("workspace_id", "name")
        for secret in secrets:
            try:
                ciphertext = fernet.rotate(secret.ciphertext.encode()).decode()
            except InvalidToken:
                raise SecretUndecryptable(
                    f"secret {secret.name!r} of workspace {secret.workspace_id} cannot be "
                    "decrypted with any configured vault key, so nothing was rotated; add the "
                    "key it was saved with to HIERARCH_VAULT_KEYS (after the new one), or "
                    "delete the secret"
                ) from None
            # `update`, not `save`: updated_at tells when the value was last set.
            Secret.objects.filter(pk=secret.pk).update(ciphertext=ciphertext, rotated_at=now)
            audit_record(
                workspace=secret.workspace_id,
                action=AuditAction.SECRET_ROTATED,
                target=secret,
                after={"name": secret.name, "kind": secret.kind},
            )
            count += 1
    logger.info("vault rotated: %d secrets re-encrypted with the newest key", count)
    return count
