"""The vault's secrets and the audit log in the admin.

Secrets are for workspace admins only, and their values are write-only: a password input that
never renders a value back, on the add page and on the change page (which replaces the
value). The audit log is read-only, scoped to the user's workspaces like everything else.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.views.decorators.debug import sensitive_post_parameters

from governance.models import Alert, ApiToken, AuditRecord, Secret
from governance.permissions import ADMINISTER, has_perm, scope, workspaces_for
from governance.scoped_admin import ReadOnlyAdminMixin, ScopedWorkspaceFilter, WorkspaceScopedAdmin
from governance.tokens import api_token_revoke
from governance.vault import Redacted, secret_delete, secret_set

_sensitive = method_decorator(sensitive_post_parameters("value"))


class SecretValueField(forms.CharField):
    """A password input whose cleaned value is `Redacted`; it never renders a value back."""

    widget = forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"})

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        return Redacted(text, "secret") if text else text


class SecretForm(forms.ModelForm):
    value = SecretValueField(
        label="Value",
        help_text="Shown never again once saved, not even to you; replace it to change it.",
    )

    class Meta:
        model = Secret
        fields = ["workspace", "name", "kind"]


@admin.register(Secret)
class SecretAdmin(WorkspaceScopedAdmin):
    """Only workspace admins see or change secrets; every write goes through the vault."""

    write_perm = ADMINISTER
    form = SecretForm
    list_display = ["name", "kind", "workspace", "updated_at"]
    list_filter = ["kind", ScopedWorkspaceFilter]
    search_fields = ["name"]
    list_select_related = ["workspace"]
    ordering = ["workspace__name", "name"]

    def get_queryset(self, request: HttpRequest) -> Any:
        queryset = super(WorkspaceScopedAdmin, self).get_queryset(request)
        return scope(queryset, request.user, ADMINISTER)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return workspaces_for(request.user, ADMINISTER).exists()

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return self.has_module_permission(request)
        return has_perm(request.user, ADMINISTER, obj.workspace)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list:
        if obj is None:
            return [(None, {"fields": ["workspace", "name", "kind", "value"]})]
        return [
            (None, {"fields": ["workspace", "name", "kind", "value"]}),
            ("History", {"fields": ["created_at", "created_by", "updated_at", "rotated_at"]}),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        # A secret's name is what tools refer to: a new name is a new secret.
        return ["workspace", "name", "created_at", "created_by", "updated_at", "rotated_at"]

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, **kwargs)
        if "workspace" in form.base_fields:
            form.base_fields["workspace"].queryset = workspaces_for(request.user, ADMINISTER)
        value = form.base_fields["value"]
        if obj is not None:
            value.label = "New value"
            value.help_text = (
                "The saved value is never shown. Type a new value to replace it (the kind "
                "may change with it); the old value is gone once you save."
            )
        return form

    @_sensitive
    def add_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return super().add_view(request, *args, **kwargs)

    @_sensitive
    def change_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return super().change_view(request, *args, **kwargs)

    def save_model(self, request: HttpRequest, obj: Secret, form: Any, change: bool) -> None:
        secret = secret_set(
            workspace=obj.workspace,
            name=obj.name,
            value=form.cleaned_data["value"],
            kind=obj.kind,
            user=request.user,
        )
        obj.pk, obj.created_at, obj.updated_at = secret.pk, secret.created_at, secret.updated_at
        obj._state.adding = False

    def delete_model(self, request: HttpRequest, obj: Secret) -> None:
        secret_delete(secret=obj, user=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for secret in queryset:
            secret_delete(secret=secret, user=request.user)


def _pretty(value: Any) -> str:
    if value is None:
        return "-"
    return format_html(
        '<pre class="json-snapshot">{}</pre>', json.dumps(value, indent=2, ensure_ascii=False)
    )


@admin.register(AuditRecord)
class AuditRecordAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    """The audit log, read-only: records are written by `audit_record` and never change."""

    list_display = [
        "seq",
        "created_at",
        "workspace",
        "actor_label",
        "action",
        "object_type",
        "object_label",
    ]
    list_filter = ["action", ScopedWorkspaceFilter]
    search_fields = ["object_label", "object_id", "actor_name"]
    list_select_related = ["workspace"]
    ordering = ["-created_at", "-id"]
    fields = [
        "workspace",
        "seq",
        "created_at",
        "actor_label",
        "action",
        "object_type",
        "object_id",
        "object_label",
        "before_json",
        "after_json",
        "prev_hash",
        "hash",
    ]
    readonly_fields = fields

    @admin.display(description="actor", ordering="actor_name")
    def actor_label(self, obj: AuditRecord) -> str:
        # The username kept on the record: the user may have been deleted since.
        return obj.actor_name or "system"

    @admin.display(description="before")
    def before_json(self, obj: AuditRecord) -> str:
        return _pretty(obj.before)

    @admin.display(description="after")
    def after_json(self, obj: AuditRecord) -> str:
        return _pretty(obj.after)


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    """Alerts (seed 000 §11.2), newest first; acknowledging one records who and when."""

    list_display = ["created_at", "workspace", "severity", "kind", "message", "acknowledged_at"]
    list_filter = ["kind", "severity", ScopedWorkspaceFilter]
    search_fields = ["message"]
    list_select_related = ["workspace"]
    ordering = ["-created_at", "-id"]
    fields = [
        "workspace",
        "created_at",
        "kind",
        "severity",
        "message",
        "entity",
        "run_id",
        "notified",
        "acknowledged_at",
        "acknowledged_by",
    ]
    readonly_fields = fields
    actions = ["acknowledge"]

    @admin.action(description="Acknowledge the selected alerts")
    def acknowledge(self, request: HttpRequest, queryset: Any) -> None:
        done = queryset.filter(acknowledged_at__isnull=True).update(
            acknowledged_at=timezone.now(), acknowledged_by=request.user
        )
        self.message_user(request, f"{done} alert(s) acknowledged.")


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Every user's API tokens, for superusers: listed, never shown (only the hash is kept),
    and revoked with the action. Users make and revoke their own on /account/tokens/."""

    list_display = ["name", "user", "prefix", "created_at", "expires_at", "last_used_at", "status"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix", "user__username"]
    list_select_related = ["user"]
    fields = ["user", "name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
    readonly_fields = fields
    actions = ["revoke"]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        revoked = 0
        for token in queryset.filter(revoked_at__isnull=True).select_related("user"):
            api_token_revoke(token=token, user=request.user)
            revoked += 1
        self.message_user(request, f"Revoked {revoked} token{'s' if revoked != 1 else ''}.")
