"""Governance records: the credential vault's secrets, users' API tokens and the
tamper-evident audit log.

Every write goes through a service: `governance/vault.py` for secrets (which encrypts),
`governance/tokens.py` for API tokens (which hashes) and `governance/audit.py` for audit
records (which chains). The models hold data and the few
invariants the database itself can enforce.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

# What a tool's `authentication.credentials_ref` names: letters, digits, `_`, `-` and `.`,
# starting with a letter or digit (the schema allows a reference of up to 200 characters).
VAULT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$"
VAULT_NAME_HELP = (
    "What a tool's authentication.credentials_ref names: up to 200 letters, digits, '_', '-' "
    "and '.', starting with a letter or digit."
)


class SecretKind(models.TextChoices):
    API_KEY = "API_KEY", "API key"
    OAUTH2_CLIENT = "OAUTH2_CLIENT", "OAuth2 client credentials"
    SERVICE_ACCOUNT = "SERVICE_ACCOUNT", "Service account"
    WEBHOOK_URL = "WEBHOOK_URL", "Webhook URL"
    GENERIC = "GENERIC", "Generic"


class Secret(models.Model):
    """A credential of a workspace, encrypted at rest. Its value is never shown again."""

    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.CASCADE, related_name="secrets"
    )
    name = models.CharField(
        max_length=200,
        validators=[RegexValidator(VAULT_NAME_PATTERN, VAULT_NAME_HELP)],
        help_text=VAULT_NAME_HELP,
    )
    kind = models.CharField(max_length=20, choices=SecretKind.choices, default=SecretKind.GENERIC)
    # A Fernet token (URL-safe base64) of the value bound to its workspace and name.
    ciphertext = models.TextField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    rotated_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        editable=False,
    )

    class Meta:
        ordering = ["workspace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="secret_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<Secret {self.name!r} ({self.kind}) of workspace {self.workspace_id}>"


class AuditAction(models.TextChoices):
    ENTITY_CREATED = "entity.created"
    ENTITY_UPDATED = "entity.updated"
    ENTITY_STATUS_CHANGED = "entity.status_changed"
    ENTITY_ROLLED_BACK = "entity.rolled_back"
    ENTITY_DELETED = "entity.deleted"
    ENTITY_IMPORTED = "entity.imported"
    RUN_STARTED = "run.started"
    RUN_CANCELLED = "run.cancelled"
    RUN_BUDGET_RAISED = "run.budget_raised"
    RUN_PASSES_GRANTED = "run.passes_granted"
    RUN_HIRED = "run.hired"  # a hirer started a subordinate (runs/engine/hiring.py)
    RUN_FIRED = "run.fired"  # a subordinate was fired, with the reason
    APPROVAL_DECIDED = "approval.decided"
    MEMBERSHIP_GRANTED = "membership.granted"
    MEMBERSHIP_REVOKED = "membership.revoked"
    TOOL_GRANTED = "tool.granted"
    TOOL_GRANT_REVOKED = "tool.grant_revoked"
    # Audit action names (ruff's S105 takes the word "secret" for a password).
    SECRET_SET = "secret.set"  # noqa: S105
    SECRET_DELETED = "secret.deleted"  # noqa: S105
    SECRET_ROTATED = "secret.rotated"  # noqa: S105
    API_TOKEN_CREATED = "api_token.created", "API token created"  # noqa: S105
    API_TOKEN_REVOKED = "api_token.revoked", "API token revoked"  # noqa: S105
    # The signed record that follows a chain's records from before keyed hashes.
    AUDIT_KEYED = "audit.keyed", "Audit chain keyed"


class ApiToken(models.Model):
    """A user's API token for `Authorization: Bearer …` (governance/api_auth.py).

    Only the SHA-256 of the token is stored: the token itself is shown once, when it is made
    (governance/tokens.py), and cannot be read back. `prefix`, its first characters, tells
    the user's tokens apart in lists. A token acts as its user, in their workspaces."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, help_text="What the token is for, in your words.")
    prefix = models.CharField(max_length=16, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    # Written at most once a minute per token, so an API call costs no write in between.
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["user", "-created_at"], name="apitoken_user_idx")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def __repr__(self) -> str:
        return f"<ApiToken {self.pk} {self.prefix}… of user {self.user_id}>"

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    @property
    def status(self) -> str:
        """One of "active", "expired", "revoked" (revoked wins), for lists."""
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.is_expired() else "active"


class AuditChain(models.Model):
    """The head of a workspace's audit chain: the last sequence number and hash.

    Appending locks this row, so concurrent writers in any number of processes form one
    chain; `verify_audit` compares the newest record with it, so deleting the newest records
    is detected too."""

    workspace = models.OneToOneField(
        "entities.Workspace",
        on_delete=models.PROTECT,
        primary_key=True,
        related_name="audit_chain",
    )
    last_seq = models.PositiveBigIntegerField(default=0)
    last_hash = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return f"audit chain of workspace {self.workspace_id} at {self.last_seq}"


class AuditRecordQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise TypeError("audit records are append-only; they are never updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise TypeError("audit records are append-only; they are never deleted")


class AuditRecord(models.Model):
    """One append-only entry of a workspace's audit log (who, what, when, before/after).

    `hash` is the HMAC-SHA256, under the key `key_id` names, of the record's canonical JSON,
    which includes `prev_hash`, the hash of the record before it in the same workspace
    (`governance/audit.py`); a record from before keyed hashes has no `key_id` and a plain
    SHA-256. On PostgreSQL triggers refuse UPDATE, DELETE and TRUNCATE of these rows."""

    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.PROTECT, related_name="audit_records"
    )
    seq = models.PositiveBigIntegerField()
    created_at = models.DateTimeField()
    # Who did it (null: the system). The record outlives the user: no database constraint,
    # nothing happens to it when the user is deleted, and `actor_name` keeps the username.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=50, choices=AuditAction.choices)
    object_type = models.CharField(max_length=50, blank=True)
    object_id = models.CharField(max_length=100, blank=True)
    object_label = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    # The fingerprint of the key that signed the record (never the key); empty: a plain
    # SHA-256 record from before keyed hashes.
    key_id = models.CharField(max_length=16, blank=True, default="")

    objects = AuditRecordQuerySet.as_manager()

    class Meta:
        ordering = ["workspace", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "seq"], name="auditrecord_unique_seq"),
        ]
        indexes = [
            models.Index(fields=["workspace", "action"], name="auditrecord_action_idx"),
            models.Index(fields=["-created_at"], name="auditrecord_created_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.action} {self.object_label}".rstrip()

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise TypeError("audit records are append-only; they are never updated")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise TypeError("audit records are append-only; they are never deleted")


class AlertKind(models.TextChoices):
    COST_THRESHOLD = "cost_threshold", "Cost alert threshold reached"
    BUDGET_EXHAUSTED = "budget_exhausted", "Budget exhausted"
    QUOTA = "quota", "Quota nearly used"
    COST_SPIKE = "cost_spike", "Cost spike"
    FAILURE_SPIKE = "failure_spike", "Failure spike"
    LATENCY_SPIKE = "latency_spike", "Latency spike"
    STUCK_RUN = "stuck_run", "Stuck execution"


class AlertSeverity(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


class Alert(models.Model):
    """Something operators should look at (seed 000 §11.2), raised once per `key`."""

    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.CASCADE, related_name="alerts"
    )
    kind = models.CharField(max_length=30, choices=AlertKind.choices)
    severity = models.CharField(
        max_length=10, choices=AlertSeverity.choices, default=AlertSeverity.WARNING
    )
    key = models.CharField(max_length=200)  # what makes two raises the same alert
    message = models.TextField()
    entity = models.ForeignKey(
        "entities.Entity", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    run_id = models.UUIDField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    notified = models.BooleanField(default=False)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "key"], name="alert_unique_key")
        ]
        indexes = [models.Index(fields=["workspace", "-created_at"], name="alert_recent_idx")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.message[:60]}"
