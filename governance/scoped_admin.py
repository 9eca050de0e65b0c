"""The admin's workspace scoping, shared by every app's admin.py: a user sees only the objects
of their workspaces, writes need the role the admin names there, and records the services
write are read-only. Access control, so it lives with the permissions it checks."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from config.json_input import CheckedJSONField
from entities.models import Workspace
from governance.permissions import DESIGN, VIEW, has_any_membership, has_perm, scope, workspaces_for


class WorkspaceScopedAdmin(admin.ModelAdmin):
    """Shows only the objects of the user's workspaces; writes need `write_perm` there."""

    workspace_path = "workspace"
    write_perm = DESIGN
    # Every JSON a designer types is checked like an API body (config/json_input.py).
    formfield_overrides = {models.JSONField: {"form_class": CheckedJSONField}}

    def workspace_of(self, obj: Any) -> Workspace:
        for part in self.workspace_path.split("__"):
            obj = getattr(obj, part)
        return obj

    def get_queryset(self, request: HttpRequest) -> Any:
        return scope(super().get_queryset(request), request.user, VIEW, field=self.workspace_path)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return has_any_membership(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return has_any_membership(request.user)
        return has_perm(request.user, VIEW, self.workspace_of(obj))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return workspaces_for(request.user, self.write_perm).exists()

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return workspaces_for(request.user, self.write_perm).exists()
        return has_perm(request.user, self.write_perm, self.workspace_of(obj))

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_change_permission(request, obj)


class ReadOnlyAdminMixin:
    """Records written only by the services: listed and shown, never edited here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ScopedWorkspaceFilter(admin.SimpleListFilter):
    """The workspace filter lists only the user's workspaces (never another tenant's name)."""

    title = "workspace"
    parameter_name = "workspace"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(ws.pk), ws.name) for ws in workspaces_for(request.user)]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value():
            return queryset.filter(**{self.field_path: self.value()})
        return queryset

    field_path = "workspace_id"


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return True
