"""Approvals in the admin: a run's requests to people, in place on the run's page (the inbox
at /approvals/ is where people decide)."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from approvals.models import Approval
from approvals.notifications import approval_link
from governance.scoped_admin import ReadOnlyInline
from runs.admin import RunAdmin


class ApprovalInline(ReadOnlyInline):
    """The run's requests to people, and what they decided, in place in the trace."""

    model = Approval
    fields = [
        "request_link",
        "checkpoint_trigger",
        "step_name",
        "status",
        "decision",
        "responded_by",
        "reviewer_notes",
        "requested_at",
        "responded_at",
    ]
    readonly_fields = fields
    ordering = ["requested_at", "id"]
    verbose_name_plural = "requests to people (human in the loop)"

    @admin.display(description="request")
    def request_link(self, obj: Approval) -> str:
        return format_html('<a href="{}">#{}</a>', approval_link(obj), obj.pk)


RunAdmin.inlines_after_steps.append(ApprovalInline)
