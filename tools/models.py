"""The workspace's tool registry (seed 000 §3.6.1).

Entities reference tools by `tool_id`; the registry holds each tool's one definition.
"""

from __future__ import annotations

from django.db import models


class ToolPermission(models.TextChoices):
    READ = "READ"
    WRITE = "WRITE"
    EXECUTE = "EXECUTE"


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
        }
