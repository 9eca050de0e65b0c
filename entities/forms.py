"""Forms of the designer: JSON sections shown formatted, and the definition they add up to."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.formsets import DELETION_FIELD_NAME
from django.utils.html import format_html

from config.json_input import CheckedJSONField
from entities.definition import Problem
from entities.models import JSON_SECTIONS, ChildLink, Entity, PlanStep


class PrettyJSONField(CheckedJSONField):
    """A JSON field shown indented, in a monospace textarea sized to its content."""

    def __init__(self, *args: Any, rows: int | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.Textarea(attrs={"class": "json-editor"}))
        super().__init__(*args, **kwargs)
        self.fixed_rows = rows

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        text = json.dumps(value, indent=2, ensure_ascii=False, cls=self.encoder)
        self.widget.attrs["rows"] = self.fixed_rows or min(max(text.count("\n") + 2, 4), 40)
        return text


class ServiceValidatedForm(forms.ModelForm):
    """A model form whose rows are validated by the services against the whole workspace,
    with messages at the field; the model's own unique and constraint checks would only
    repeat those problems less clearly, so they are skipped."""

    def validate_unique(self) -> None:
        return None


class EntityForm(ServiceValidatedForm):
    tags = forms.CharField(
        required=False,
        help_text="Comma-separated, at most 20; searchable.",
        widget=forms.TextInput(attrs={"size": 60}),
    )

    class Meta:
        model = Entity
        fields = [
            "workspace",
            "type",
            "name",
            "display_name",
            "description",
            "status",
            "tags",
            "icon",
            "color",
            "parent",
            *JSON_SECTIONS,
        ]
        field_classes = dict.fromkeys(JSON_SECTIONS, PrettyJSONField)
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.is_bound:
            self.initial["tags"] = ", ".join(self.instance.tags)
        for name in self.Meta.field_classes:
            if name in self.fields:
                self.fields[name].required = False
        if "description" in self.fields:
            self.fields["description"].required = True  # every entity says what it does

    def clean_tags(self) -> list[str]:
        raw = self.cleaned_data.get("tags") or ""
        if isinstance(raw, list):
            return raw
        return [tag.strip() for tag in raw.split(",") if tag.strip()]


class ChildLinkForm(ServiceValidatedForm):
    class Meta:
        model = ChildLink
        fields = ["order", "child", "relationship", "version", "condition", "input_mapping"]
        field_classes = {"condition": PrettyJSONField, "input_mapping": PrettyJSONField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("condition", "input_mapping"):
            self.fields[name].required = False
            self.fields[name].fixed_rows = 3
        self.fields["order"].widget.attrs["style"] = "width: 4em"
        self.fields["version"].widget.attrs.update({"placeholder": "newest", "size": 10})
        self.fields["version"].help_text = "Empty: the newest; or 1.2.0, ^1.2.0, ~1.2, 1.x"


class PlanStepForm(ServiceValidatedForm):
    class Meta:
        model = PlanStep
        fields = [
            "order",
            "step_id",
            "name",
            "type",
            "required",
            "target_entity",
            "target_tool_id",
            "prompt_template",
            "description",
            "exit_conditions",
            "input_mapping",
        ]
        field_classes = {"exit_conditions": PrettyJSONField, "input_mapping": PrettyJSONField}
        widgets = {
            "prompt_template": forms.Textarea(attrs={"rows": 3}),
            "description": forms.Textarea(attrs={"rows": 2}),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("exit_conditions", "input_mapping"):
            self.fields[name].required = False
        self.fields["step_id"].required = False
        self.fields["step_id"].help_text = "Left blank, it becomes step-1, step-2… after the order."


def _kept(formset: Any) -> list[Any]:
    """The forms that will become rows, in their `order`."""
    forms_kept = [
        form
        for form in formset.forms
        if form.has_changed() or form.instance.pk
        if not (formset.can_delete and form.cleaned_data.get(DELETION_FIELD_NAME))
        if form.cleaned_data
    ]
    position = {id(form): index for index, form in enumerate(formset.forms)}
    return sorted(forms_kept, key=lambda f: (f.cleaned_data.get("order") or 0, position[id(f)]))


def definition_from_forms(
    form: EntityForm, link_formset: Any, step_formset: Any, entity: Entity | None
) -> tuple[dict, list[Any], list[Any]]:
    """The definition the admin form describes, with the inline forms behind each list item."""
    data = form.cleaned_data
    link_forms, step_forms = _kept(link_formset), _kept(step_formset)
    planning = data.get("planning")
    if planning in (None, ""):
        planning = {}
    if isinstance(planning, dict):
        planning = dict(planning)
        static_plan = planning.get("static_plan") or {}
        if isinstance(static_plan, dict):
            static_plan = dict(static_plan)
            static_plan["steps"] = [_step(f.cleaned_data) for f in step_forms]
        planning["static_plan"] = static_plan
    entity_type = entity.type if entity is not None and entity.pk else data.get("type")
    parent = data.get("parent")

    def section(name: str) -> Any:
        value = data.get(name)
        return {} if value in (None, "") else value

    definition = {
        "metadata": {
            "id": entity.external_id if entity is not None and entity.pk else None,
            "type": entity_type,
            "status": data.get("status"),
            "tags": data.get("tags") or [],
        },
        "identity": {
            "name": data.get("name") or "",
            "display_name": data.get("display_name") or "",
            "description": data.get("description") or "",
            "persona": section("persona"),
            "icon": data.get("icon") or None,
            "color": data.get("color") or None,
        },
        "hierarchy": {
            "parent_id": str(parent.pk) if parent else None,
            "children": [
                {
                    "child_id": _pk(f.cleaned_data.get("child")),
                    "relationship": f.cleaned_data.get("relationship"),
                    "condition": f.cleaned_data.get("condition") or {},
                    "input_mapping": f.cleaned_data.get("input_mapping") or {},
                    "version": f.cleaned_data.get("version") or None,
                }
                for f in link_forms
            ],
        },
        "logic_gate": section("logic_gate"),
        "planning": planning,
        "capabilities": section("capabilities"),
        "governance": section("governance"),
        "io_contract": section("io_contract"),
        "observability": section("observability"),
        "metadata_extensions": section("metadata_extensions"),
    }
    return definition, link_forms, step_forms


def _pk(obj: Any) -> str:
    return str(obj.pk) if obj is not None else ""


def _step(data: dict) -> dict:
    target = data.get("target_entity")
    step = {
        "order": data.get("order"),
        "name": data.get("name") or "",
        "description": data.get("description") or "",
        "type": data.get("type"),
        "target": {
            "entity_id": str(target.pk) if target else None,
            "tool_id": data.get("target_tool_id") or None,
            "prompt_template": data.get("prompt_template") or None,
        },
        "required": bool(data.get("required")),
        "exit_conditions": data.get("exit_conditions") or [],
        "input_mapping": data.get("input_mapping") or {},
    }
    if data.get("step_id"):
        step["step_id"] = data["step_id"]
    return step


# Where a problem's path lands in the admin form: column fields, then the JSON sections.
_COLUMN_FIELDS = {
    "metadata.type": "type",
    "metadata.status": "status",
    "metadata.tags": "tags",
    "metadata.id": None,
    "identity.name": "name",
    "identity.display_name": "display_name",
    "identity.description": "description",
    "identity.icon": "icon",
    "identity.color": "color",
    "identity.persona": "persona",
    "hierarchy.parent_id": "parent",
}
_LINK_FIELDS = {
    "child_id": "child",
    "child_type": "child",
    "relationship": "relationship",
    "condition": "condition",
    "input_mapping": "input_mapping",
    "version": "version",
}
_STEP_FIELDS = {
    "target.entity_id": "target_entity",
    "target.tool_id": "target_tool_id",
    "target.prompt_template": "prompt_template",
    "target": "type",
    "order": "order",
    "step_id": "step_id",
    "name": "name",
    "type": "type",
    "required": "required",
    "description": "description",
    "exit_conditions": "exit_conditions",
    "input_mapping": "input_mapping",
}


def place_problem(
    problem: Problem, form: EntityForm, link_forms: list[Any], step_forms: list[Any]
) -> tuple[Any, str | None, str]:
    """(form, field, message) for a problem: the inline row and field it is about, else the
    column or JSON section it lives in; `field` None means a non-field error of that form."""
    path = problem.path
    for prefix, name in _COLUMN_FIELDS.items():
        if path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "["):
            rest = path[len(prefix) :].lstrip(".")
            message = f"{rest}: {problem.message}" if rest else problem.message
            field = name if name in form.fields else None
            return form, field, message if field else f"{path}: {problem.message}"
    for base, forms_list, fields in (
        ("hierarchy.children", link_forms, _LINK_FIELDS),
        ("planning.static_plan.steps", step_forms, _STEP_FIELDS),
    ):
        if path.startswith(base + "["):
            index_text, _, rest = path[len(base) + 1 :].partition("]")
            rest = rest.lstrip(".")
            index = int(index_text)
            if index < len(forms_list):
                row = forms_list[index]
                for key in sorted(fields, key=len, reverse=True):
                    if rest == key or rest.startswith(key + ".") or rest.startswith(key + "["):
                        extra = rest[len(key) :].lstrip(".")
                        message = f"{extra}: {problem.message}" if extra else problem.message
                        return row, fields[key], message
                return row, None, f"{rest}: {problem.message}" if rest else problem.message
        if path == base:
            return None, None, f"{path}: {problem.message}"
    section = path.split(".")[0].split("[")[0]
    if section in form.fields:
        return form, section, f"{path}: {problem.message}"
    return form, None, f"{path}: {problem.message}" if path else problem.message


# -- the entity picker of the console's filters --------------------------------------------------

SUGGESTIONS = 20  # entities a picker suggests at a time
_LABELLED = re.compile(r"^(?P<name>.+?) \((?P<workspace>[^()]+)\)$")


def entity_label(entity: Entity) -> str:
    """How a picker writes an entity: names are unique within a workspace only."""
    return f"{entity.name} ({entity.workspace.name})"


class EntityPicker(forms.TextInput):
    """A text field that suggests the user's entities as they type: a <datalist> that htmx
    fills from `suggest_url` (the first SUGGESTIONS matches, in the workspace chosen beside
    it). Listing every entity in a <select> made a page of a big workspace weigh megabytes.
    Without JavaScript it is a plain text field: a name, `name (workspace)` or an id."""

    def __init__(self, suggest_url: str = "", attrs: dict[str, Any] | None = None) -> None:
        super().__init__(
            attrs={"autocomplete": "off", "placeholder": "All entities", **(attrs or {})}
        )
        self.suggest_url = suggest_url

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> str:
        attrs = dict(attrs or {})
        listed = f"{attrs.get('id', 'id_' + name)}-suggestions"
        attrs.update(
            {
                "list": listed,
                "hx-get": self.suggest_url,
                "hx-trigger": "input changed delay:250ms, focus once",
                "hx-target": f"#{listed}",
                "hx-swap": "outerHTML",
                "hx-include": "closest form [name=workspace]",
                "hx-vals": json.dumps({"list": listed}),
            }
        )
        field = super().render(name, value, attrs, renderer)
        return format_html('{}<datalist id="{}"></datalist>', field, listed)


class EntityPickField(forms.ModelChoiceField):
    """An entity among `queryset` (the user's visible ones), typed: its name, `name
    (workspace)` as the suggestions write it, or its id. A name found in several workspaces
    asks for the workspace; a name found nowhere says so."""

    def __init__(self, *, suggest_url: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("queryset", Entity.objects.none())
        kwargs.setdefault("widget", EntityPicker(suggest_url))
        super().__init__(required=False, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, Entity):
            return entity_label(value)
        if isinstance(value, str) and _is_uuid(value):
            found = self.queryset.select_related("workspace").filter(pk=value).first()
            return entity_label(found) if found is not None else value
        return value

    def to_python(self, value: Any) -> Entity | None:
        text = str(value or "").strip()
        if not text:
            return None
        if "\x00" in text:
            raise ValidationError("An entity's name has no NUL character.", code="invalid_choice")
        if _is_uuid(text):
            found = self.queryset.filter(pk=text).first()
            if found is None:
                raise ValidationError(
                    "There is no entity with this id among the ones you can see.",
                    code="invalid_choice",
                )
            return found
        matches = self.queryset.select_related("workspace").filter(name=text)
        labelled = _LABELLED.match(text)
        if labelled and not matches.exists():
            matches = self.queryset.select_related("workspace").filter(
                name=labelled["name"], workspace__name=labelled["workspace"]
            )
        found = list(matches[:2])
        if not found:
            raise ValidationError(
                f"No entity is named “{text[:100]}” among the ones you can see; "
                "pick one of the suggestions.",
                code="invalid_choice",
            )
        if len(found) > 1:
            raise ValidationError(
                f"Several of your workspaces have an entity named “{text[:100]}”: choose the "
                "workspace too, or pick one of the suggestions (name (workspace)).",
                code="invalid_choice",
            )
        return found[0]

    def validate(self, value: Any) -> None:
        return None  # to_python answered an entity of the queryset, or None


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
