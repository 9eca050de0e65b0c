"""The workspace's tool registry (seed 000 §3.6.1), and the rows the `record` tool writes.

Entities reference tools by `tool_id`; the registry holds each tool's one definition. A tool
runs through the built-in adapter its `implementation` names (`tools/builtin/`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ToolPermission(models.TextChoices):
    READ = "READ"
    WRITE = "WRITE"
    EXECUTE = "EXECUTE"


def implementation_choices() -> list[tuple[str, str]]:
    """The registered built-ins; a callable so that a new adapter needs no migration."""
    # At call time: the adapters import the models (record's RecordedRow), and a models
    # module is loaded by Django's app registry before any of its app's other modules.
    from tools.builtin import BUILTINS

    return [(name, name) for name in sorted(BUILTINS)]


class Tool(models.Model):
    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.CASCADE, related_name="tools"
    )
    tool_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    provider = models.CharField(max_length=50, default="internal")
    authentication = models.JSONField(default=dict, blank=True)
    function_schema = models.JSONField(default=dict, blank=True)
    rate_limit = models.JSONField(default=dict, blank=True)
    permissions = models.CharField(
        max_length=10, choices=ToolPermission.choices, default=ToolPermission.READ
    )
    sandbox_mode = models.BooleanField(default=False)
    # Null: the tool is declared (the model may plan with it) but cannot run yet.
    implementation = models.CharField(
        max_length=100, null=True, blank=True, default=None, choices=implementation_choices
    )
    output_schema = models.JSONField(null=True, blank=True, default=None)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tool_id"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "tool_id"], name="tool_unique_id"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.tool_id})"

    def as_definition(self) -> dict:
        """The tool in the seed's exchange format."""
        return {
            "tool_id": self.tool_id,
            "name": self.name,
            "description": self.description,
            "provider": self.provider,
            "authentication": self.authentication,
            "function_schema": self.function_schema,
            "rate_limit": self.rate_limit,
            "permissions": self.permissions,
            "sandbox_mode": self.sandbox_mode,
            "implementation": self.implementation,
            "output_schema": self.output_schema,
        }


class RecordedRow(models.Model):
    """A row appended by the `record` tool: the observable side effect of a WRITE call.

    `idempotency_key` is unique, so a replayed call finds the row it wrote instead of writing
    a second one. `run_id` is kept as text, not a foreign key: a row outlives its run's
    retention and may be written by a call outside a run.
    """

    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.CASCADE, related_name="recorded_rows"
    )
    run_id = models.CharField(max_length=100, blank=True, db_index=True)
    idempotency_key = models.CharField(max_length=255, unique=True)
    table = models.CharField(max_length=100)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["workspace", "table", "id"], name="recordedrow_table"),
        ]

    def __str__(self) -> str:
        return f"{self.table} #{self.pk}"


class RateCounter(models.Model):
    """How many calls of one rate-limit key a fixed window has admitted (`tools/ratelimit.py`).

    One row per key, window length and window; `count` only grows, by an atomic upsert that
    refuses to pass the limit. `window_start` is in seconds since the epoch, a multiple of
    `window_seconds`, so every worker computes the same row for the same moment.
    """

    key = models.CharField(max_length=200)
    window_seconds = models.PositiveIntegerField()
    window_start = models.BigIntegerField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["key", "window_start", "window_seconds"], name="ratecounter_unique_window"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} {self.window_seconds}s@{self.window_start}: {self.count}"


class ToolGrant(models.Model):
    """An explicit grant: `user` may call the EXECUTE tool `tool` in runs they start.

    Without one, a run started by the user is refused at the tool call (`tools/access.py`);
    an admin of the tool's workspace adds grants on the tool's admin page.
    """

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="grants")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tool_grants"
    )
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tool", "user"]
        constraints = [
            models.UniqueConstraint(fields=["tool", "user"], name="toolgrant_unique_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user} may execute {self.tool.tool_id}"
