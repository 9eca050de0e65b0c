"""Runs in the admin, read-only, until the console's run and trace pages arrive: what ran,
what each step did, every model and tool call, and the event log."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from entities.admin import (
    ReadOnlyAdminMixin,
    ReadOnlyInline,
    ScopedWorkspaceFilter,
    WorkspaceScopedAdmin,
)
from runs.models import Artifact, LLMCall, MemoryItem, Run, RunEvent, StepRun, ToolCall


def _pretty(value: Any) -> str:
    """JSON a model or a tool produced, indented and escaped."""
    if value is None:
        return "-"
    return format_html(
        '<pre class="json-snapshot">{}</pre>',
        json.dumps(value, indent=2, ensure_ascii=False, default=str),
    )


class StepInline(ReadOnlyInline):
    model = StepRun
    fields = [
        "position",
        "name",
        "type",
        "iteration",
        "attempt",
        "status",
        "error_code",
        "started_at",
        "finished_at",
    ]
    readonly_fields = fields
    ordering = ["started_at", "id"]


class ChildRunInline(ReadOnlyInline):
    model = Run
    fk_name = "parent"
    fields = ["child_link", "status", "error_code", "total_cost_usd", "total_tokens"]
    readonly_fields = fields
    verbose_name_plural = "child runs"

    @admin.display(description="run")
    def child_link(self, obj: Run) -> str:
        url = reverse("admin:runs_run_change", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, obj.entity.name)


@admin.register(Run)
class RunAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    list_display = [
        "entity",
        "status",
        "error_code",
        "total_cost_usd",
        "total_tokens",
        "llm_calls",
        "tool_calls",
        "created_at",
        "workspace",
    ]
    list_filter = ["status", ScopedWorkspaceFilter]
    search_fields = ["entity__name", "id", "trace_id", "error_code"]
    list_select_related = ["entity", "workspace"]
    inlines = [StepInline, ChildRunInline]
    fields = [
        ("entity", "entity_version", "status"),
        ("parent", "trace_id", "depth"),
        ("error_code", "error_message"),
        "input_json",
        "output_json",
        "plan_steps",
        "state_json",
        ("total_cost_usd", "total_tokens", "llm_calls", "tool_calls"),
        ("created_at", "started_at", "completed_at", "execution_time_ms"),
    ]
    readonly_fields = [f for row in fields for f in (row if isinstance(row, tuple) else (row,))]

    @admin.display(description="input")
    def input_json(self, obj: Run) -> str:
        return _pretty(obj.input_data)

    @admin.display(description="output")
    def output_json(self, obj: Run) -> str:
        return _pretty(obj.output_data)

    @admin.display(description="state")
    def state_json(self, obj: Run) -> str:
        return _pretty(obj.state)

    @admin.display(description="plan (as run)")
    def plan_steps(self, obj: Run) -> str:
        steps = obj.dynamic_plan or []
        return (
            format_html_join(
                "",
                "<div>{}. {} <small>({})</small></div>",
                ((i, s["name"], s["type"]) for i, s in enumerate(steps, 1)),
            )
            or "-"
        )

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).select_related("entity", "entity_version", "parent")


@admin.register(LLMCall)
class LLMCallAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    workspace_path = "run__workspace"
    list_display = [
        "timestamp",
        "run",
        "purpose",
        "model_provider",
        "model_name",
        "total_tokens",
        "cost_usd",
        "latency_ms",
    ]
    list_filter = ["purpose", "model_provider"]
    search_fields = ["run__id", "model_name"]
    list_select_related = ["run"]


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    workspace_path = "run__workspace"
    list_display = ["timestamp", "run", "tool_id", "success", "latency_ms"]
    list_filter = ["success", "tool_id"]
    search_fields = ["run__id", "tool_id", "idempotency_key"]
    list_select_related = ["run"]


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    workspace_path = "run__workspace"
    list_display = ["trace_id", "seq", "type", "run", "created_at"]
    list_filter = ["type"]
    search_fields = ["trace_id"]
    list_select_related = ["run"]


@admin.register(MemoryItem)
class MemoryItemAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    list_display = ["created_at", "scope", "entity", "expires_at", "workspace"]
    list_filter = ["scope", ScopedWorkspaceFilter]
    list_select_related = ["entity", "workspace"]


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    list_display = ["digest", "size", "created_at", "workspace"]
    search_fields = ["digest"]
    list_filter = [ScopedWorkspaceFilter]
    exclude = ["content"]
