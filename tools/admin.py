"""The tool registry in the admin: definitions validated by the same schema as imports."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from entities.definition import normalize_tool
from entities.forms import PrettyJSONField
from entities.models import Entity
from governance.permissions import ADMINISTER, DESIGN, VIEW, has_perm, workspaces_for
from governance.scoped_admin import ScopedWorkspaceFilter, WorkspaceScopedAdmin
from tools.models import Tool, ToolGrant, ToolPermission
from tools.services import tool_grant_add, tool_grant_revoke


class ToolForm(forms.ModelForm):
    class Meta:
        model = Tool
        fields = [
            "workspace",
            "tool_id",
            "name",
            "description",
            "provider",
            "permissions",
            "sandbox_mode",
            "implementation",
            "authentication",
            "function_schema",
            "output_schema",
            "rate_limit",
        ]
        field_classes = {
            "authentication": PrettyJSONField,
            "function_schema": PrettyJSONField,
            "output_schema": PrettyJSONField,
            "rate_limit": PrettyJSONField,
        }
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}

    _JSON = ("authentication", "function_schema", "rate_limit")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self._JSON:
            self.fields[name].required = False
        self.fields["authentication"].help_text = (
            "type (NONE, API_KEY, OAUTH2, SERVICE_ACCOUNT) and credentials_ref: the name of a "
            "secret in the credential vault, never the secret itself."
        )
        self.fields[
            "function_schema"
        ].help_text = (
            "name, description and parameters (a JSON Schema) the model calls the tool with."
        )
        self.fields["rate_limit"].help_text = "calls_per_minute and calls_per_hour (null: none)."
        self.fields["implementation"].help_text = (
            "The built-in adapter that runs the tool; empty for a tool that cannot run yet. "
            "simulated answers with a value valid against the output schema."
        )
        output_schema = self.fields["output_schema"]
        output_schema.required = False
        output_schema.help_text = (
            "A JSON Schema of the tool's result (empty: none). Required for a simulated tool."
        )

    def clean(self) -> dict:
        data = super().clean()
        if self.errors:
            return data
        definition = {
            "tool_id": data.get("tool_id") or (self.instance.tool_id if self.instance.pk else ""),
            "name": data.get("name"),
            "description": data.get("description") or "",
            "provider": data.get("provider"),
            "permissions": data.get("permissions"),
            "sandbox_mode": bool(data.get("sandbox_mode")),
            "implementation": data.get("implementation") or None,
            "output_schema": data.get("output_schema"),
            **{name: data.get(name) or {} for name in self._JSON},
        }
        normalized, problems = normalize_tool(definition)
        for problem in problems:
            field = problem.path.split(".")[0].split("[")[0]
            message = problem.message if problem.path == field else str(problem)
            self.add_error(field if field in self.fields else None, message)
        if not problems:
            for name in self._JSON:
                data[name] = normalized[name]
            data["implementation"] = normalized["implementation"]
            data["output_schema"] = normalized["output_schema"]
        return data


class ToolGrantFormSet(BaseInlineFormSet):
    def get_form_kwargs(self, index: int | None) -> dict[str, Any]:
        # Every row, the empty "add another" template included, knows its tool.
        return {**super().get_form_kwargs(index), "tool": self.instance}


class ToolGrantForm(forms.ModelForm):
    class Meta:
        model = ToolGrant
        fields = ["user"]

    def __init__(self, *args: Any, tool: Tool | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        user = self.fields["user"]
        # Only the workspace's members: never a list of every account of the installation.
        workspace_id = tool.workspace_id if tool is not None else None
        members = get_user_model().objects.filter(memberships__workspace_id=workspace_id)
        user.queryset = members.distinct().order_by("username")
        user.help_text = "A member of the workspace who may call this EXECUTE tool."
        if self.instance.pk:
            user.disabled = True  # a grant is given or taken back, never moved to someone else


class ToolGrantInline(admin.TabularInline):
    """Grants on an EXECUTE tool: shown to the workspace's members, given and taken back by
    its admins."""

    model = ToolGrant
    form = ToolGrantForm
    formset = ToolGrantFormSet
    extra = 0
    fields = ["user", "granted_by", "created_at"]
    readonly_fields = ["granted_by", "created_at"]
    verbose_name = "tool grant"
    verbose_name_plural = "Tool grants (who may call an EXECUTE tool in the runs they start)"

    def _administers(self, request: HttpRequest, obj: Tool | None) -> bool:
        return obj is not None and has_perm(request.user, ADMINISTER, obj.workspace)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None or has_perm(request.user, VIEW, obj.workspace)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._administers(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._administers(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._administers(request, obj)


@admin.register(Tool)
class ToolAdmin(WorkspaceScopedAdmin):
    form = ToolForm
    inlines = [ToolGrantInline]
    list_display = [
        "tool_id",
        "name",
        "implementation",
        "provider",
        "permissions",
        "sandbox_mode",
        "workspace",
    ]
    list_filter = [
        "permissions",
        "sandbox_mode",
        "implementation",
        "provider",
        ScopedWorkspaceFilter,
    ]
    search_fields = ["tool_id", "name", "description"]
    list_select_related = ["workspace"]
    readonly_fields = ["used_by", "created_at", "updated_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "workspace", "tool_id"] if obj is not None else fields

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "workspace":
            kwargs["queryset"] = workspaces_for(request.user, DESIGN)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_inline_instances(self, request: HttpRequest, obj: Any = None) -> list:
        # Grants are for an EXECUTE tool that exists; READ and WRITE follow the roles.
        if obj is None or obj.permissions != ToolPermission.EXECUTE:
            return []
        return super().get_inline_instances(request, obj)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        if formset.model is not ToolGrant:
            super().save_formset(request, form, formset, change)
            return
        formset.save(commit=False)  # fills new_objects and deleted_objects; writes nothing
        for grant in formset.deleted_objects:
            tool_grant_revoke(grant=grant, revoked_by=request.user)
        for grant in formset.new_objects:
            tool_grant_add(tool=form.instance, user=grant.user, granted_by=request.user)

    @admin.display(description="used by")
    def used_by(self, obj: Tool) -> str:
        names = _users_of(obj)
        return ", ".join(names) if names else "no entity yet"

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple:
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        for tool in objs:
            for name in _users_of(tool):
                protected.append(f"Entity {name} lists tool {tool.tool_id} in its capabilities")
        return deleted, counts, perms_needed, protected


def _users_of(tool: Tool) -> list[str]:
    """Names of the workspace's entities whose capabilities reference the tool."""
    rows = Entity.objects.filter(workspace_id=tool.workspace_id).values_list("name", "capabilities")
    return sorted(
        name
        for name, capabilities in rows
        if any(ref.get("tool_id") == tool.tool_id for ref in capabilities.get("tools", []))
    )
