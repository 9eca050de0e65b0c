"""Identity and persona: who the entity is, and how it speaks."""

from __future__ import annotations

from typing import Any

from django import forms

from designer.editor.base import RowForm, Rows, Section, deep, read
from entities.definition import FORM_LAYOUTS

# The input form's layouts as the select offers them; null in a definition is "single".
LAYOUT_CHOICES = [
    ("single", "One form: every field at once"),
    ("wizard", "Wizard: a page per field (or group of fields), then a review"),
]


class LinesField(forms.CharField):
    """A list of short texts, one per line; blank lines are dropped."""

    widget = forms.Textarea(attrs={"rows": 4})

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(str(item) for item in value)
        return value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value)
        return [line.strip() for line in text.splitlines() if line.strip()]


class TagsField(forms.CharField):
    """Tags typed as "video, hiring"; kept in the order given, without repeats."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return ", ".join(str(tag) for tag in value)
        return value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value)
        tags = [tag.strip() for tag in text.replace("\n", ",").split(",") if tag.strip()]
        return list(dict.fromkeys(tags))


class IdentityForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        help_text="Unique in the workspace: letters, digits, '_', '-' and '.'. Other "
        "definitions refer to the entity by it.",
    )
    display_name = forms.CharField(max_length=200, required=False, label="Display name")
    description = forms.CharField(
        max_length=1000, required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    tags = TagsField(required=False, help_text="Comma-separated; the tree's search finds them.")
    icon = forms.CharField(max_length=50, required=False, help_text="A short icon name.")
    color = forms.CharField(
        max_length=7,
        required=False,
        label="Colour",
        widget=forms.TextInput(attrs={"placeholder": "#FF6B6B", "size": 8}),
        help_text="Shown beside the entity in the tree and the traces.",
    )
    system_prompt = forms.CharField(
        required=False,
        label="System prompt",
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text="Given to the model before every call. Agents and processes need one.",
    )
    behavioral_constraints = LinesField(
        required=False,
        label="Behavioural constraints",
        help_text="One per line: rules the entity keeps whatever it is asked.",
    )
    form_layout = forms.ChoiceField(
        choices=LAYOUT_CHOICES,
        label="Input form",
        help_text="How the console's start form and “Try it” ask for a run's input. A wizard "
        "needs an input schema with named fields; otherwise the input is one JSON text.",
    )
    is_template = forms.BooleanField(
        required=False,
        label="Template: designers start new entities from a copy of it (“Use as template”)",
    )

    def __init__(self, *args: Any, layout: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if layout is not None and layout not in FORM_LAYOUTS:
            # A layout saved before the check refused it: shown as it is, so that saving
            # says what is wrong with it at this field instead of changing it unseen.
            field = self.fields["form_layout"]
            field.choices = [*LAYOUT_CHOICES, (str(layout), f"{layout} (not supported)")]


class ExampleForm(RowForm):
    paths = {".scenario": "scenario", ".ideal_response": "ideal_response"}

    scenario = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))
    ideal_response = forms.CharField(
        label="Ideal response", widget=forms.Textarea(attrs={"rows": 2})
    )


UI_HINTS = ("metadata_extensions", "ui_hints")


class IdentitySection(Section):
    key = "identity"
    title = "Identity and persona"
    intro = "Who the entity is and how it speaks to the model."
    form_class = IdentityForm
    rows = {
        "examples": Rows(ExampleForm, "identity.persona.examples", "Examples", 50, "Add an example")
    }
    paths = {
        "identity.name": "name",
        "identity.display_name": "display_name",
        "identity.description": "description",
        "identity.icon": "icon",
        "identity.color": "color",
        "identity.persona.system_prompt": "system_prompt",
        "identity.persona.behavioral_constraints": "behavioral_constraints",
        "metadata.tags": "tags",
        "metadata_extensions.ui_hints.form_layout": "form_layout",
        "metadata_extensions.ui_hints.is_template": "is_template",
    }

    def form_kwargs(self) -> dict[str, Any]:
        return {"layout": read(self.definition, *UI_HINTS, "form_layout")}

    def initial(self, definition: dict) -> dict[str, Any]:
        constraints = read(definition, "identity", "persona", "behavioral_constraints") or []
        return {
            "name": read(definition, "identity", "name", default=""),
            "display_name": read(definition, "identity", "display_name", default=""),
            "description": read(definition, "identity", "description", default=""),
            "tags": read(definition, "metadata", "tags", default=[]),
            "icon": read(definition, "identity", "icon") or "",
            "color": read(definition, "identity", "color") or "",
            "system_prompt": read(definition, "identity", "persona", "system_prompt") or "",
            # Constraints with a rule are edited in the raw view and kept as they are.
            "behavioral_constraints": [c for c in constraints if isinstance(c, str)]
            if isinstance(constraints, list)
            else [],
            "form_layout": read(definition, *UI_HINTS, "form_layout") or "single",
            "is_template": read(definition, *UI_HINTS, "is_template") is True,
        }

    def row_initial(self, name: str, definition: dict) -> list[dict[str, Any]]:
        examples = read(definition, "identity", "persona", "examples") or []
        if not isinstance(examples, list):
            return []
        return [
            {"scenario": e.get("scenario", ""), "ideal_response": e.get("ideal_response", "")}
            for e in examples
            if isinstance(e, dict)
        ]

    @property
    def ruled_constraints(self) -> int:
        """Constraints that carry a rule: edited in the raw view, kept here as they are."""
        constraints = read(self.definition, "identity", "persona", "behavioral_constraints")
        return sum(isinstance(c, dict) for c in constraints or [])

    def write(self, definition: dict, data: dict[str, Any], rows: dict[str, list[dict]]) -> None:
        identity = deep(definition, "identity")
        identity["name"] = data["name"]
        identity["display_name"] = data["display_name"]
        identity["description"] = data["description"]
        identity["icon"] = data["icon"] or None
        identity["color"] = data["color"] or None
        deep(definition, "metadata")["tags"] = data["tags"]
        persona = deep(definition, "identity", "persona")
        persona["system_prompt"] = data["system_prompt"]
        kept = [c for c in persona.get("behavioral_constraints") or [] if isinstance(c, dict)]
        persona["behavioral_constraints"] = [*data["behavioral_constraints"], *kept]
        persona["examples"] = [
            {"scenario": row["scenario"], "ideal_response": row["ideal_response"]}
            for row in rows["examples"]
        ]
        hints = deep(definition, *UI_HINTS)
        # null and "single" are the same form: a definition that says null keeps saying it.
        if not (data["form_layout"] == "single" and hints.get("form_layout") is None):
            hints["form_layout"] = data["form_layout"]
        hints["is_template"] = data["is_template"]
