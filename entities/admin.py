"""The admin as the first designer: entities with their child links and plan steps, versions
with restore, workspaces and members. Every queryset is scoped to the user's workspaces and
every write goes through the services, so the admin validates exactly as an import does."""

from __future__ import annotations

import json
import weakref
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.forms.formsets import DELETION_FIELD_NAME
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from config.json_input import json_input_problems
from entities.definition import DefinitionInvalid
from entities.exchange import ImportFileError, export_workspace, read_import_bytes, size_text
from entities.forms import (
    ChildLinkForm,
    EntityForm,
    PlanStepForm,
    definition_from_forms,
    place_problem,
)
from entities.models import (
    ChildLink,
    Entity,
    EntityStatus,
    EntityStatusChange,
    EntityVersion,
    Membership,
    PlanStep,
    Role,
    Workspace,
)
from entities.services import (
    entities_delete,
    entities_import,
    entity_delete_problems,
    entity_rollback,
    entity_save,
    entity_set_status,
    entity_validate,
)
from governance.permissions import (
    ADMINISTER,
    DESIGN,
    VIEW,
    has_any_membership,
    has_perm,
    membership_grant,
    membership_revoke,
    scope,
    workspaces_for,
)
from governance.scoped_admin import (
    ReadOnlyAdminMixin,
    ReadOnlyInline,
    ScopedWorkspaceFilter,
    WorkspaceScopedAdmin,
)


class TagFilter(admin.SimpleListFilter):
    title = "tag"
    parameter_name = "tag"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        tags: set[str] = set()
        for row in model_admin.get_queryset(request).values_list("tags", flat=True):
            tags.update(row or [])
        return [(tag, tag) for tag in sorted(tags)[:50]]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if not self.value():
            return queryset
        rows = queryset.values_list("pk", "tags")
        pks = [pk for pk, tags in rows if self.value() in (tags or [])]
        return queryset.filter(pk__in=pks)


class DefinitionCheck:
    """The whole definition an entity change form describes, validated by the services before
    anything is saved, with each problem placed at its field or inline row.

    One per request. The admin's public hooks hand it what it needs: `get_formset_kwargs`
    gives it to the child-link and plan-step formsets (which register themselves), and
    `save_form`, called once the entity form is valid and before the formsets are, gives it
    the form. It runs once, when the first formset validates: the children's formset raises
    its share of problems that belong to no row, the plan steps' formset its own, and both
    report invalid while any problem stands, so nothing is saved."""

    def __init__(self, instance: Entity) -> None:
        self.instance = instance
        self.form: Any = None
        self.links: DefinitionFormSet | None = None
        self.steps: DefinitionFormSet | None = None
        self.definition: dict | None = None
        self.workspace: Workspace | None = None
        self.result: Any = None  # entity_save's answer, for the change message
        self.leftover: dict[str, list[str]] = {"links": [], "steps": []}
        self.passed: bool | None = None

    def run(self) -> bool:
        """Whether the definition may be saved; checks once, on first call."""
        if self.passed is None:
            self.passed = self._check()
        return self.passed

    def _check(self) -> bool:
        form, links, steps = self.form, self.links, self.steps
        if form is None or links is None or steps is None:
            return True  # the entity form has errors of its own: nothing to check yet
        if not all(_rows_valid(formset) for formset in (links, steps)):
            return True  # their own errors are shown; nothing to check the whole against yet
        entity = self.instance if self.instance.pk and not self.instance._state.adding else None
        workspace = entity.workspace if entity else form.cleaned_data.get("workspace")
        if workspace is None:
            return True
        planning = form.cleaned_data.get("planning")
        static_plan = planning.get("static_plan") if isinstance(planning, dict) else None
        if isinstance(static_plan, dict) and static_plan.get("steps"):
            form.add_error(
                "planning",
                "static_plan.steps: edit the plan steps in the table below, not in this JSON",
            )
            return False
        definition, link_forms, step_forms = definition_from_forms(form, links, steps, entity)
        problems = entity_validate(workspace=workspace, definition=definition, entity=entity)
        for problem in problems:
            target, field, message = place_problem(problem, form, link_forms, step_forms)
            if target is None:
                owner = "links" if problem.path.startswith("hierarchy") else "steps"
                self.leftover[owner].append(message)
            else:
                target.add_error(field, message)
        if problems:
            return False
        self.definition, self.workspace = definition, workspace
        return True


def _rows_valid(formset: Any) -> bool:
    """Whether every row of an inline formset that stays is valid on its own (the formset's
    own `is_valid` cannot be asked: the check runs from inside a formset's `clean`)."""
    return formset.management_form.is_valid() and all(
        form.is_valid() or (formset.can_delete and form.cleaned_data.get(DELETION_FIELD_NAME))
        for form in formset.forms
    )


class OrderedInlineFormSet(BaseInlineFormSet):
    """New rows (the empty one, and those "Add another" clones) start after the last order,
    so a row added at the bottom lands at the bottom unless its order is changed."""

    def get_form_kwargs(self, index: int | None) -> dict:
        kwargs = super().get_form_kwargs(index)
        if index is None or index >= self.initial_form_count():
            # Every new row gets the same initial order (the template row is cloned as is),
            # so an untouched new row is unchanged and ignored; several new rows with the
            # same order keep the order they were added in.
            if not hasattr(self, "_next_order"):
                orders = [row.order for row in self.get_queryset()] if self.instance.pk else []
                self._next_order = max(orders, default=0) + 1
            kwargs["initial"] = {"order": self._next_order}
        return kwargs


class DefinitionFormSet(OrderedInlineFormSet):
    """The child links or the plan steps of the entity change form, validated with the rest
    of the definition (`DefinitionCheck`): its rows get the problems found at them, and the
    formset is invalid while the definition has any problem."""

    role = ""  # "links" or "steps": which part of the definition this formset holds

    def __init__(self, *args: Any, definition_check: DefinitionCheck | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.definition_check = definition_check
        if definition_check is not None:
            setattr(definition_check, self.role, self)

    def clean(self) -> None:
        super().clean()
        check = self.definition_check
        if check is not None and not check.run() and check.leftover[self.role]:
            raise ValidationError(check.leftover[self.role])

    def is_valid(self) -> bool:
        valid = super().is_valid()
        return valid and (self.definition_check is None or bool(self.definition_check.run()))


class ChildLinkFormSet(DefinitionFormSet):
    role = "links"


class PlanStepFormSet(DefinitionFormSet):
    role = "steps"


class ChildLinkInline(admin.TabularInline):
    model = ChildLink
    form = ChildLinkForm
    formset = ChildLinkFormSet
    fk_name = "parent"
    extra = 1
    verbose_name = "child"
    verbose_name_plural = "children (hierarchy.children, in order)"
    # A search box, not a list of every entity of the workspace (entities/admin.py
    # EntityAdmin.get_search_results scopes what it finds).
    autocomplete_fields = ["child"]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "child":
            kwargs["queryset"] = _entity_choices(request)
            return _label_choices(
                super().formfield_for_foreignkey(db_field, request, **kwargs), request
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None or has_perm(request.user, DESIGN, obj.workspace)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None or has_perm(request.user, DESIGN, obj.workspace)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_change_permission(request, obj)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return True


class PlanStepInline(admin.StackedInline):
    model = PlanStep
    form = PlanStepForm
    formset = PlanStepFormSet
    fk_name = "entity"
    extra = 0
    verbose_name = "plan step"
    verbose_name_plural = "static plan steps (planning.static_plan.steps, by order)"
    autocomplete_fields = ["target_entity"]
    fieldsets = [
        (None, {"fields": [("order", "step_id", "type", "required"), "name"]}),
        ("Target", {"fields": ["target_entity", "target_tool_id", "prompt_template"]}),
        (
            "More",
            {
                "classes": ["collapse"],
                "fields": ["description", "exit_conditions", "input_mapping"],
            },
        ),
    ]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "target_entity":
            kwargs["queryset"] = _entity_choices(request)
            return _label_choices(
                super().formfield_for_foreignkey(db_field, request, **kwargs), request
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    has_add_permission = ChildLinkInline.has_add_permission
    has_change_permission = ChildLinkInline.has_change_permission
    has_delete_permission = ChildLinkInline.has_delete_permission
    has_view_permission = ChildLinkInline.has_view_permission


class VersionInline(ReadOnlyInline):
    model = EntityVersion
    fields = ["version_link", "change", "summary", "created_at", "created_by"]
    readonly_fields = fields
    ordering = ["-created_at", "-id"]
    verbose_name_plural = "versions"

    @admin.display(description="version")
    def version_link(self, obj: EntityVersion) -> str:
        url = reverse("admin:entities_entityversion_change", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, obj.version)


class StatusChangeInline(ReadOnlyInline):
    model = EntityStatusChange
    fields = ["from_status", "to_status", "changed_at", "changed_by", "reason"]
    readonly_fields = fields
    verbose_name_plural = "status changes"


SECTION_HELP = {
    "persona": "identity.persona: system_prompt, examples, behavioral_constraints.",
    "logic_gate": "reasoning_config, retry_policy, review_mechanism.",
    "planning": "static_plan (enabled, fallback_behavior; its steps are edited below), "
    "dynamic_planning, loop_control.",
    "capabilities": "tools (by tool_id from the registry, or defined in full), memory, "
    "context_engineering.",
    "governance": "cost_controls, execution_limits, human_oversight, safety_rails.",
    "io_contract": "input (schema, validation_rules), output (schema, transformations), "
    "state_contract.",
    "observability": "logging, metrics, tracing.",
    "metadata_extensions": "custom_fields, ui_hints.",
}


def _label_choices(field: Any, request: HttpRequest) -> Any:
    """Name the workspace in each choice when the user designs in more than one."""
    if field is not None and len(workspaces_for(request.user, DESIGN)[:2]) > 1:
        field.label_from_instance = lambda e: f"{e.workspace.name}: {e.name} ({e.type.lower()})"
    return field


def _picking_an_entity(request: HttpRequest) -> bool:
    """Whether the request is the admin's autocomplete for one of the entity pickers."""
    return request.GET.get("app_label") == "entities" and (
        request.GET.get("model_name"),
        request.GET.get("field_name"),
    ) in {("entity", "parent"), ("childlink", "child"), ("planstep", "target_entity")}


def _entity_choices(request: HttpRequest) -> Any:
    entities = scope(Entity.objects.all(), request.user, DESIGN).select_related("workspace")
    obj = getattr(request, "_admin_entity", None)
    if obj is not None:
        entities = entities.filter(workspace=obj.workspace)
    return entities.order_by("workspace__name", "name")


@admin.register(Entity)
class EntityAdmin(WorkspaceScopedAdmin):
    form = EntityForm
    inlines = [ChildLinkInline, PlanStepInline, VersionInline, StatusChangeInline]
    list_display = [
        "name",
        "type",
        "status",
        "version",
        "workspace",
        "composition_depth",
        "is_atomic",
        "tag_list",
        "updated_at",
    ]
    list_filter = ["type", "status", ScopedWorkspaceFilter, TagFilter]
    search_fields = ["name", "display_name", "description", "tags", "external_id"]
    # Pickers of entities search (the admin's autocomplete): a workspace of a thousand
    # entities would otherwise send them all in every select of the change form.
    autocomplete_fields = ["parent"]
    list_select_related = ["workspace"]
    ordering = ["workspace__name", "composition_depth", "name"]
    readonly_fields = [
        "external_id",
        "version",
        "is_atomic",
        "composition_depth",
        "used_by",
        "created_at",
        "updated_at",
        "created_by",
        "export_link",
    ]
    actions = ["activate", "deprecate", "archive"]
    change_list_template = "admin/entities/entity/change_list.html"

    fieldsets = [
        (
            "Identity",
            {
                "fields": [
                    ("workspace", "type", "status"),
                    ("name", "display_name"),
                    "description",
                    "tags",
                    ("icon", "color"),
                ]
            },
        ),
        (
            "Hierarchy",
            {"fields": ["parent", ("is_atomic", "composition_depth"), "used_by"]},
        ),
        *(
            (
                f"{section.replace('_', ' ').capitalize()} (JSON)",
                {"classes": ["collapse"], "fields": [section], "description": help_text},
            )
            for section, help_text in SECTION_HELP.items()
        ),
        (
            "Metadata",
            {
                "fields": [
                    ("version", "external_id"),
                    ("created_at", "updated_at", "created_by"),
                    "export_link",
                ]
            },
        ),
    ]

    def __init__(self, model: type, admin_site: Any) -> None:
        super().__init__(model, admin_site)
        # The definition check of each request being answered, where its form and its
        # formsets meet (the admin is one object for every request); weak, so each goes with
        # its request.
        self.definition_checks: weakref.WeakKeyDictionary[HttpRequest, DefinitionCheck] = (
            weakref.WeakKeyDictionary()
        )

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        obj = super().get_object(request, object_id, from_field)
        request._admin_entity = obj
        return obj

    def get_search_results(self, request: HttpRequest, queryset: Any, search_term: str) -> Any:
        """The admin's searches; an entity picker's (the autocomplete of a parent, a child or
        a plan step's target) finds only entities the user designs in, as the picker's
        choices are (`_entity_choices`): an entity of a workspace the user only views is
        no choice."""
        if _picking_an_entity(request):
            queryset = scope(queryset, request.user, DESIGN)
        if json_input_problems(search_term):  # a NUL no name holds (PostgreSQL refuses it)
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None:
            fields += ["workspace", "type"]
        return fields

    def get_changeform_initial_data(self, request: HttpRequest) -> dict:
        initial = super().get_changeform_initial_data(request)
        workspaces = list(workspaces_for(request.user, DESIGN)[:2])
        if len(workspaces) == 1:
            initial.setdefault("workspace", workspaces[0].pk)
        return initial

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "workspace":
            kwargs["queryset"] = workspaces_for(request.user, DESIGN)
        if db_field.name == "parent":
            kwargs["queryset"] = _entity_choices(request)
            return _label_choices(
                super().formfield_for_foreignkey(db_field, request, **kwargs), request
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_formset_kwargs(
        self, request: HttpRequest, obj: Any, inline: Any, prefix: str
    ) -> dict[str, Any]:
        """The children's and the plan steps' formsets of a POST share one `DefinitionCheck`,
        so the whole definition is validated before anything is saved."""
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        if request.method == "POST" and isinstance(inline, ChildLinkInline | PlanStepInline):
            check = self.definition_checks.get(request)
            if check is None:
                check = self.definition_checks[request] = DefinitionCheck(obj)
            kwargs["definition_check"] = check
        return kwargs

    def save_form(self, request: HttpRequest, form: Any, change: bool) -> Any:
        # Called once the entity form is valid, before the inline formsets are validated:
        # the definition check needs the form's cleaned data and places problems on it.
        check = self.definition_checks.get(request)
        if check is not None:
            check.form = form
        return super().save_form(request, form, change)

    def save_model(self, request: HttpRequest, obj: Entity, form: Any, change: bool) -> None:
        check = self.definition_checks[request]
        check.result = entity_save(
            workspace=check.workspace,
            definition=check.definition,
            user=request.user,
            entity=obj if change else None,
        )
        obj.pk = check.result.entity.pk
        obj._state.adding = False

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        return None  # entity_save wrote the links and steps with the entity

    def construct_change_message(self, request: HttpRequest, form: Any, formsets: Any, add: bool):
        check = self.definition_checks.get(request)
        result = check.result if check is not None else None
        if result is None or result.version is None:
            return "No change to the definition." if not add else "Created."
        version = result.version
        return f"Version {version.version} ({version.change.lower()}): {version.summary}"

    def response_change(self, request: HttpRequest, obj: Entity) -> HttpResponse:
        check = self.definition_checks.get(request)
        result = check.result if check is not None else None
        if result is not None and result.version is None:
            self.message_user(request, "No change to the definition; the version stays.")
        elif result is not None:
            self.message_user(
                request,
                f"Saved as version {result.version.version} ({result.version.change.lower()}).",
            )
        return super().response_change(request, obj)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple:
        # Versions, links, steps and status history are part of the entity: deleting it takes
        # them along whatever their own admins allow; what blocks a delete is another entity
        # still using it.
        deleted, counts, _perms_needed, _protected = super().get_deleted_objects(objs, request)
        problems = entity_delete_problems(list(objs))
        return deleted, counts, set(), [problem.message for problem in problems]

    def delete_model(self, request: HttpRequest, obj: Entity) -> None:
        entities_delete(workspace=obj.workspace, entities=[obj], user=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        by_workspace: dict[Any, list[Entity]] = {}
        for entity in queryset.select_related("workspace"):
            by_workspace.setdefault(entity.workspace, []).append(entity)
        for workspace, entities in by_workspace.items():
            entities_delete(workspace=workspace, entities=entities, user=request.user)

    @admin.display(description="tags")
    def tag_list(self, obj: Entity) -> str:
        return ", ".join(obj.tags)

    @admin.display(description="used by")
    def used_by(self, obj: Entity) -> str:
        parents = (
            Entity.objects.filter(child_links__child=obj).distinct().order_by("name")
            if obj.pk
            else []
        )
        if not parents:
            return "no parent (a root)"
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            (
                (reverse("admin:entities_entity_change", args=[parent.pk]), parent.name)
                for parent in parents
            ),
        )

    @admin.display(description="export")
    def export_link(self, obj: Entity) -> str:
        if not obj.pk:
            return "-"
        url = reverse("admin:entities_entity_export", args=[obj.pk])
        return format_html('<a href="{}">Download this entity and its descendants as JSON</a>', url)

    def get_urls(self) -> list:
        urls = [
            path(
                "import/",
                self.admin_site.admin_view(self.import_view),
                name="entities_entity_import",
            ),
            path(
                "<uuid:pk>/export/",
                self.admin_site.admin_view(self.export_view),
                name="entities_entity_export",
            ),
        ]
        return urls + super().get_urls()

    def export_view(self, request: HttpRequest, pk: Any) -> HttpResponse:
        entity = get_object_or_404(self.get_queryset(request), pk=pk)
        document = export_workspace(entity.workspace, root=entity)
        response = HttpResponse(
            json.dumps(document, indent=2, ensure_ascii=False), content_type="application/json"
        )
        response["Content-Disposition"] = f'attachment; filename="{entity.name}.json"'
        return response

    def import_view(self, request: HttpRequest) -> HttpResponse:
        workspaces = workspaces_for(request.user, DESIGN)
        if not workspaces.exists():
            raise PermissionDenied
        problems: list[str] = []
        if request.method == "POST":
            workspace = workspaces.filter(pk=request.POST.get("workspace") or 0).first()
            upload = request.FILES.get("file")
            if workspace is None:
                problems.append("Choose a workspace you design in.")
            if upload is None:
                problems.append("Choose a JSON file to import.")
            if not problems:
                try:
                    limit = settings.HIERARCH_IMPORT_MAX_BYTES
                    if upload.size > limit:
                        raise ImportFileError(
                            f"{upload.name} is {size_text(upload.size)}; imports are limited "
                            f"to {size_text(limit)}"
                        )
                    definitions = read_import_bytes(upload.read(), name=upload.name)
                    results = entities_import(
                        workspace=workspace, definitions=definitions, user=request.user
                    )
                except ImportFileError as exc:
                    problems.append(str(exc))
                except DefinitionInvalid as exc:
                    problems.extend(str(p) for p in exc.problems)
                else:
                    created = sum(1 for r in results if r.created)
                    updated = sum(1 for r in results if not r.created and r.version)
                    self.message_user(
                        request,
                        f"Imported {len(results)} entities into {workspace.name}: {created} "
                        f"created, {updated} updated, {len(results) - created - updated} "
                        "unchanged.",
                        messages.SUCCESS,
                    )
                    return HttpResponseRedirect(reverse("admin:entities_entity_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Import entities",
            "workspaces": workspaces,
            "problems": problems,
            "limit": size_text(settings.HIERARCH_IMPORT_MAX_BYTES),
        }
        return render(request, "admin/entities/entity/import.html", context)

    def _set_status(self, request: HttpRequest, queryset: Any, status: str) -> None:
        done = 0
        for entity in queryset:
            if not has_perm(request.user, DESIGN, entity.workspace):
                message = f"{entity.name}: you cannot design in {entity.workspace}"
                self.message_user(request, message, messages.ERROR)
                continue
            try:
                entity_set_status(entity=entity, status=status, user=request.user, reason="admin")
                done += 1
            except DefinitionInvalid as exc:
                self.message_user(
                    request, f"{entity.name}: {exc.problems[0].message}", messages.ERROR
                )
        if done:
            noun = "entity is" if done == 1 else "entities are"
            self.message_user(request, f"{done} {noun} now {status}.", messages.SUCCESS)

    @admin.action(description="Activate the selected entities", permissions=["change"])
    def activate(self, request: HttpRequest, queryset: Any) -> None:
        self._set_status(request, queryset, EntityStatus.ACTIVE)

    @admin.action(description="Deprecate the selected entities", permissions=["change"])
    def deprecate(self, request: HttpRequest, queryset: Any) -> None:
        self._set_status(request, queryset, EntityStatus.DEPRECATED)

    @admin.action(description="Archive the selected entities", permissions=["change"])
    def archive(self, request: HttpRequest, queryset: Any) -> None:
        self._set_status(request, queryset, EntityStatus.ARCHIVED)


@admin.register(EntityVersion)
class EntityVersionAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    workspace_path = "entity__workspace"
    ordering = ["-created_at", "-id"]
    list_display = ["entity", "version", "change", "summary", "created_at", "created_by"]
    list_filter = ["change"]
    search_fields = ["entity__name", "version", "summary"]
    list_select_related = ["entity", "entity__workspace", "created_by"]
    fields = ["entity", "version", "change", "summary", "created_at", "created_by", "snapshot"]
    readonly_fields = fields
    actions = ["restore"]
    change_form_template = "admin/entities/entityversion/change_form.html"

    def get_actions(self, request: HttpRequest) -> dict:
        actions = super().get_actions(request)
        if not workspaces_for(request.user, DESIGN).exists():
            actions.pop("restore", None)
        return actions

    @admin.display(description="definition")
    def snapshot(self, obj: EntityVersion) -> str:
        return format_html(
            '<pre class="json-snapshot">{}</pre>',
            json.dumps(obj.definition, indent=2, ensure_ascii=False),
        )

    def get_urls(self) -> list:
        return [
            path(
                "<int:pk>/restore/",
                self.admin_site.admin_view(self.restore_view),
                name="entities_entityversion_restore",
            )
        ] + super().get_urls()

    def restore_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseRedirect(reverse("admin:entities_entityversion_change", args=[pk]))
        version = get_object_or_404(self.get_queryset(request), pk=pk)
        self._restore(request, version)
        return HttpResponseRedirect(
            reverse("admin:entities_entity_change", args=[version.entity_id])
        )

    def _restore(self, request: HttpRequest, version: EntityVersion) -> bool:
        if not has_perm(request.user, DESIGN, version.entity.workspace):
            raise PermissionDenied
        try:
            result = entity_rollback(version=version, user=request.user)
        except DefinitionInvalid as exc:
            self.message_user(
                request,
                f"Cannot restore {version.entity.name} {version.version}: "
                + "; ".join(str(p) for p in exc.problems),
                messages.ERROR,
            )
            return False
        if result.version is None:
            self.message_user(
                request,
                f"{version.entity.name} already matches version {version.version}.",
                messages.INFO,
            )
        else:
            self.message_user(
                request,
                f"Restored {version.entity.name} {version.version} as version "
                f"{result.version.version}.",
                messages.SUCCESS,
            )
        return True

    @admin.action(description="Restore this version (as a new version)")
    def restore(self, request: HttpRequest, queryset: Any) -> None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one version to restore.", messages.WARNING)
            return
        self._restore(request, queryset.get())


@admin.register(EntityStatusChange)
class EntityStatusChangeAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    workspace_path = "entity__workspace"
    list_display = ["entity", "from_status", "to_status", "changed_at", "changed_by", "reason"]
    list_filter = ["to_status"]
    search_fields = ["entity__name"]
    list_select_related = ["entity", "changed_by"]


@admin.register(ChildLink)
class ChildLinkAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin):
    """Links are edited on their parent's page; this list answers "where is X used?"."""

    workspace_path = "parent__workspace"
    list_display = ["parent", "child", "relationship", "order"]
    list_filter = ["relationship"]
    search_fields = ["parent__name", "child__name"]
    list_select_related = ["parent", "child"]


@admin.register(PlanStep)
class PlanStepAdmin(ChildLinkAdmin):
    workspace_path = "entity__workspace"
    list_display = ["entity", "order", "name", "type", "target_entity", "target_tool_id"]
    list_filter = ["type"]
    search_fields = ["entity__name", "name", "step_id"]
    list_select_related = ["entity", "target_entity"]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    fields = ["user", "role", "created_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    def get_queryset(self, request: HttpRequest) -> Any:
        return scope(super().get_queryset(request), request.user, VIEW, field="")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return has_any_membership(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return has_any_membership(request.user)
        return has_perm(request.user, VIEW, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return workspaces_for(request.user, ADMINISTER).exists()
        return has_perm(request.user, ADMINISTER, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["slug", "created_at"] if obj is not None else ["created_at"]

    def get_prepopulated_fields(self, request: HttpRequest, obj: Any = None) -> dict:
        return {} if obj is not None else self.prepopulated_fields

    def save_model(self, request: HttpRequest, obj: Workspace, form: Any, change: bool) -> None:
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            if not change:
                membership_grant(
                    workspace=obj, user=request.user, role=Role.ADMIN, actor=request.user
                )


class MembershipForm(forms.ModelForm):
    username = forms.CharField(help_text="The user must exist; create users with add_member.")

    class Meta:
        model = Membership
        fields = ["workspace", "username", "role"]

    def clean_username(self) -> Any:
        username = self.cleaned_data["username"]
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise ValidationError(f"There is no user {username!r}.")
        return user


@admin.register(Membership)
class MembershipAdmin(WorkspaceScopedAdmin):
    write_perm = ADMINISTER
    form = MembershipForm
    list_display = ["user", "workspace", "role", "created_at"]
    list_filter = ["role", ScopedWorkspaceFilter]
    search_fields = ["user__username", "workspace__name"]
    list_select_related = ["user", "workspace"]

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, **kwargs)
        form.base_fields["workspace"].queryset = workspaces_for(request.user, ADMINISTER)
        return form

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        membership = membership_grant(
            workspace=form.cleaned_data["workspace"],
            user=form.cleaned_data["username"],
            role=form.cleaned_data["role"],
            actor=request.user,
        )
        obj.pk, obj.user, obj.workspace = membership.pk, membership.user, membership.workspace
        obj.created_at = membership.created_at

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        membership_revoke(membership=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for membership in queryset:
            membership_revoke(membership=membership, actor=request.user)
