"""Runs in the admin, read-only: what ran, what each step did, every model and tool call,
the event log, its requests to people and its webhook deliveries. The console's live trace
page (`/runs/{id}/`) is the operators' view; "View on site" leads there."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from governance.safety import pii_shown as shown
from governance.scoped_admin import (
    ReadOnlyAdminMixin,
    ReadOnlyInline,
    ScopedWorkspaceFilter,
    WorkspaceScopedAdmin,
)
from runs.models import (
    TERMINAL,
    Artifact,
    LLMCall,
    MemoryItem,
    Run,
    RunEvent,
    StepRun,
    ToolCall,
    WebhookDelivery,
)
from runs.services import RunRefused, run_raise_budget


def _pretty(value: Any) -> str:
    """JSON a model or a tool produced, indented and escaped."""
    if value is None:
        return "-"
    return format_html(
        '<pre class="json-snapshot">{}</pre>',
        json.dumps(shown(value), indent=2, ensure_ascii=False, default=str),
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


class WebhookDeliveryInline(ReadOnlyInline):
    """Every attempt to tell the run's `webhook_url` that it ended."""

    model = WebhookDelivery
    fields = [
        "event",
        "attempt",
        "status",
        "status_code",
        "error",
        "latency_ms",
        "receiver",
        "attempted_at",
        "delivered_at",
        "next_attempt_at",
    ]
    readonly_fields = fields
    ordering = ["created_at", "id"]
    verbose_name_plural = "webhook deliveries"

    @admin.display(description="to")
    def receiver(self, obj: WebhookDelivery) -> str:
        # The address without its query: a client may carry a token there.
        parts = urlsplit(obj.url)
        return f"{parts.scheme}://{parts.hostname or ''}{parts.path}"


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
    inlines = [StepInline, ChildRunInline, WebhookDeliveryInline]
    # What apps above runs keep about a run, shown after its steps: approvals adds the run's
    # requests to people (approvals/admin.py). Runs never imports those apps.
    inlines_after_steps: list[type[admin.options.InlineModelAdmin]] = []

    def get_inlines(self, request: HttpRequest, obj: Run | None) -> list[Any]:
        return [StepInline, *self.inlines_after_steps, ChildRunInline, WebhookDeliveryInline]

    def view_on_site(self, obj: Run) -> str:  # "View on site": the live trace page
        return obj.get_absolute_url()

    fields = [
        ("entity", "entity_version", "status"),
        ("parent", "trace_id", "depth"),
        ("error_code", "error_message"),
        "input_json",
        "output_json",
        "plan_steps",
        "state_json",
        ("total_cost_usd", "total_tokens", "llm_calls", "tool_calls"),
        ("budget_usd", "reserved_usd", "budget_link", "cost_alert_usd"),
        ("deadline_at", "max_llm_calls", "max_tool_calls"),
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

    @admin.display(description="budget")
    def budget_link(self, obj: Run) -> str:
        if obj.budget_usd is None or str(obj.budget_anchor) != str(obj.pk):
            return "drawn from an ancestor's budget" if obj.budget_anchor else "no budget"
        if obj.status in TERMINAL:
            return "-"
        url = reverse("admin:runs_run_raise_budget", args=[obj.pk])
        return format_html('<a href="{}">Raise the budget and resume</a>', url)

    def get_urls(self) -> list:
        return [
            path(
                "<uuid:pk>/raise-budget/",
                self.admin_site.admin_view(self.raise_budget_view),
                name="runs_run_raise_budget",
            ),
            *super().get_urls(),
        ]

    def raise_budget_view(self, request: HttpRequest, pk: Any) -> HttpResponse:
        run = get_object_or_404(self.get_queryset(request), pk=pk)
        problem, value = "", request.POST.get("budget_usd", "")
        if request.method == "POST":
            try:
                resumed = run_raise_budget(run=run, budget_usd=value.strip(), user=request.user)
            except RunRefused as refused:
                problem = str(refused)
            else:
                self.message_user(
                    request,
                    f"The budget is ${value.strip()} now; {len(resumed)} run(s) resumed.",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(reverse("admin:runs_run_change", args=[run.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Raise the budget",
            "run": run,
            "problem": problem,
            "value": value,
        }
        return render(request, "admin/runs/run/raise_budget.html", context)

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
