"""The runs page's filters and the start form generated from an entity's input schema.

The filter form refuses what it cannot read (an unknown status, an entity the user cannot
see, an end before the start) with an error at the field, and the list shows nothing until
it is fixed: a list that quietly ignored a filter would look filtered and not be. The input
form only turns what a person typed into JSON; whether it fits is the schema's say
(jsonschema, the same Draft 2020-12 check the engine runs first), and every problem comes
back at the field it names.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import jsonschema
from django import forms
from django.db.models import QuerySet
from django.urls import reverse_lazy
from django.utils import timezone
from django.utils.html import escape

from config.json_input import form_json_loads
from entities.forms import EntityPickField
from entities.models import Entity, Workspace
from runs.engine import schemas
from runs.engine.validators import rule_problems
from runs.models import Run, RunStatus

# -- the filters -------------------------------------------------------------------------------

PERIODS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
DATETIME_INPUT = "%Y-%m-%dT%H:%M"


class DateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self) -> None:
        super().__init__(format=DATETIME_INPUT)


class RunFilterForm(forms.Form):
    """The GET parameters of the runs list; `filters()` is only called on a valid form."""

    status = forms.MultipleChoiceField(
        choices=RunStatus.choices, required=False, widget=forms.CheckboxSelectMultiple
    )
    workspace = forms.ModelChoiceField(
        queryset=Workspace.objects.none(),
        required=False,
        to_field_name="slug",
        empty_label="All workspaces",
    )
    entity = EntityPickField(suggest_url=reverse_lazy("runs:entity_suggest"))
    period = forms.ChoiceField(
        label="Started",
        choices=[
            ("", "Any time"),
            ("1h", "Last hour"),
            ("24h", "Last 24 hours"),
            ("7d", "Last 7 days"),
            ("custom", "Between…"),
        ],
        required=False,
    )
    start = forms.DateTimeField(
        label="From", required=False, input_formats=[DATETIME_INPUT], widget=DateTimeInput()
    )
    end = forms.DateTimeField(
        label="To", required=False, input_formats=[DATETIME_INPUT], widget=DateTimeInput()
    )
    children = forms.BooleanField(label="Include child runs", required=False)
    trials = forms.BooleanField(
        label="Trial runs (the designer's “Try it”) instead of production runs", required=False
    )

    def __init__(
        self, data: Any, *, workspaces: QuerySet[Workspace], entities: QuerySet[Entity]
    ) -> None:
        super().__init__(data)
        self.fields["workspace"].queryset = workspaces.order_by("name")
        self.fields["entity"].queryset = entities
        self.fields["status"].error_messages["invalid_choice"] = (
            "%(value)s is not a run status; pick among the ones listed."
        )
        self.fields["workspace"].error_messages["invalid_choice"] = (
            "No such workspace among the ones you can see."
        )
        for name in ("start", "end"):
            self.fields[name].error_messages["invalid"] = (
                "Give a date and time as YYYY-MM-DDTHH:MM (for example 2025-01-15T10:30)."
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        period, start, end = cleaned.get("period"), cleaned.get("start"), cleaned.get("end")
        if start or end:
            if period in PERIODS:
                self.add_error(
                    "period",
                    "Choose “Between…” to filter by the dates below, or clear the dates.",
                )
            else:
                cleaned["period"] = "custom"
        elif period == "custom" and not self.has_error("start") and not self.has_error("end"):
            self.add_error("start", "Give a start, an end or both for “Between…”.")
        if start and end and end < start:
            self.add_error("end", "The end is before the start.")
        return cleaned

    def apply(self, queryset: QuerySet[Run]) -> QuerySet[Run]:
        data = self.cleaned_data
        queryset = queryset.filter(trial=bool(data.get("trials")))
        if not data.get("children"):
            queryset = queryset.filter(parent__isnull=True)
        if data.get("status"):
            queryset = queryset.filter(status__in=data["status"])
        if data.get("workspace"):
            queryset = queryset.filter(workspace=data["workspace"])
        if data.get("entity"):
            queryset = queryset.filter(entity=data["entity"])
        if data.get("period") in PERIODS:
            queryset = queryset.filter(created_at__gte=timezone.now() - PERIODS[data["period"]])
        if data.get("start"):
            queryset = queryset.filter(created_at__gte=data["start"])
        if data.get("end"):
            queryset = queryset.filter(created_at__lte=data["end"])
        return queryset.order_by("-created_at", "-pk")

    def query(self, **extra: Any) -> str:
        """The valid filters as a query string, for links that keep them."""
        pairs: list[tuple[str, Any]] = []
        for name, value in self.cleaned_data.items():
            if not value:
                continue
            if name == "status":
                pairs.extend(("status", status) for status in value)
            elif name == "workspace":
                pairs.append((name, value.slug))
            elif name == "entity":
                pairs.append((name, value.pk))
            elif name in ("start", "end"):
                pairs.append((name, timezone.localtime(value).strftime(DATETIME_INPUT)))
            elif name in ("children", "trials"):
                pairs.append((name, "on"))
            else:
                pairs.append((name, value))
        pairs.extend((name, value) for name, value in extra.items() if value)
        return urlencode(pairs)

    def filtered(self) -> bool:
        return any(
            self.cleaned_data.get(name) for name in ("status", "workspace", "entity", "period")
        )


# -- the start form ----------------------------------------------------------------------------

JSON_FIELD = "input_json"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RULE_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)")
# Keywords a generated form cannot honour field by field: the whole input is one JSON text.
_COMBINATORS = ("oneOf", "anyOf", "allOf", "not", "if", "$ref", "dependentSchemas")
_LONG_TEXT = re.compile(r"(description|text|prompt|body|content|message|notes?)$")


class JSONField(forms.CharField):
    """A JSON text; empty means "not given"."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault(
            "widget",
            forms.Textarea(attrs={"rows": 6, "class": "json-editor", "spellcheck": "false"}),
        )
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        return form_json_loads(text)

    def validate(self, value: Any) -> None:
        # {} and [] are values here, not blanks.
        if value is None and self.required:
            raise forms.ValidationError(self.error_messages["required"], code="required")

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, str) or value is None:
            return value
        return json.dumps(value, indent=2, ensure_ascii=False)


class LinesField(JSONField):
    """A list of texts, one per line (blank lines dropped); a JSON list typed in is taken as
    it is. Empty means "not given"."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault(
            "widget",
            forms.Textarea(attrs={"rows": 4, "class": "lines-editor", "spellcheck": "true"}),
        )
        super().__init__(strip=False, **kwargs)

    def to_python(self, value: Any) -> Any:
        text = forms.CharField.to_python(self, value)
        if text in self.empty_values or not text.strip():
            return None
        if text.lstrip().startswith("["):
            return form_json_loads(text)
        return [line.strip() for line in text.splitlines() if line.strip()]

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list) and all(isinstance(v, str) and "\n" not in v for v in value):
            return "\n".join(value)
        return super().prepare_value(value)


class ChoiceOfValues(forms.ChoiceField):
    """An enum: each option is the JSON of one allowed value, so 1 and "1" stay apart."""

    def __init__(self, values: list[Any], **kwargs: Any) -> None:
        self.values = {json.dumps(value): value for value in values}
        choices = [(key, str(value)) for key, value in self.values.items()]
        if not kwargs.get("required", True):
            choices.insert(0, ("", "—"))
        super().__init__(choices=choices, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if value is None or (isinstance(value, str) and value in self.values):
            return value
        return json.dumps(value)

    def clean(self, value: Any) -> Any:
        key = super().clean(value)
        return self.values[key] if key else None


def _single_type(schema: dict) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    return kind if isinstance(kind, str) else None


def input_schema_fields(schema: Any) -> dict[str, dict] | None:
    """The properties a form can offer one field each, or None when the schema needs the
    single JSON text (no properties, combinators, names that are not identifiers)."""
    if not isinstance(schema, dict) or any(key in schema for key in _COMBINATORS):
        return None
    if schema.get("type", "object") != "object":
        return None
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return None
    if not all(_NAME.match(name) and name != JSON_FIELD for name in properties):
        return None
    if not all(isinstance(spec, dict) for spec in properties.values()):
        return None
    return properties


def field_order(schema: dict, properties: dict[str, dict]) -> list[str]:
    """The fields' order. PostgreSQL's jsonb keeps an object's keys in an order of its own
    (shortest first), so the designer's order of `properties` is lost once saved: an
    explicit `x-order` (or `propertyOrder`) wins, then the required properties in the order
    of the `required` list (a list keeps its order), then the others by name."""
    required = [name for name in schema.get("required") or [] if name in properties]

    def key(name: str) -> tuple:
        spec = properties[name]
        explicit = spec.get("x-order", spec.get("propertyOrder"))
        if isinstance(explicit, bool) or not isinstance(explicit, int | float):
            explicit = None
        return (
            explicit is None,
            explicit or 0,
            name not in required,
            required.index(name) if name in required else 0,
            name,
        )

    return sorted(properties, key=key)


def _field_for(name: str, spec: dict, required: bool) -> forms.Field:
    label = str(spec.get("title") or name.replace("_", " ").capitalize())
    # Django renders help text as HTML; a description is the designer's plain text.
    help_text = escape(str(spec.get("description") or ""))
    options: dict[str, Any] = {"label": label, "help_text": help_text, "required": required}
    if "default" in spec:
        options["initial"] = spec["default"]
    values = spec.get("enum", [spec["const"]] if "const" in spec else None)
    kind = _single_type(spec)
    combined = any(key in spec for key in _COMBINATORS)
    scalars = isinstance(values, list) and all(
        value is None or isinstance(value, str | int | float | bool) for value in values
    )
    if values and scalars and not combined:
        return ChoiceOfValues(values, **options)
    if combined or kind is None:
        return JSONField(**options)
    if kind == "boolean":
        # Unticked is false, never "missing": a required boolean may well be false.
        options["required"] = False
        return forms.BooleanField(**options)
    if kind == "integer":
        return forms.IntegerField(
            min_value=spec.get("minimum"), max_value=spec.get("maximum"), **options
        )
    if kind == "number":
        return forms.FloatField(
            min_value=spec.get("minimum"), max_value=spec.get("maximum"), **options
        )
    if kind == "string":
        long = (
            spec.get("format") == "textarea"
            or (spec.get("minLength") or 0) >= 50
            or (spec.get("maxLength") or 0) > 200
            or bool(_LONG_TEXT.search(name.lower()))
        )
        attrs: dict[str, Any] = {}
        if isinstance(spec.get("maxLength"), int):
            attrs["maxlength"] = spec["maxLength"]
        widget = forms.Textarea(attrs={"rows": 4, **attrs}) if long else forms.TextInput(attrs)
        # The schema judges lengths and patterns; the form keeps the text as typed.
        return forms.CharField(widget=widget, strip=False, **options)
    items = spec.get("items")
    if (
        kind == "array"
        and isinstance(items, dict)
        and _single_type(items) == "string"
        and not any(key in items for key in _COMBINATORS)
    ):
        more = "One per line."
        options["help_text"] = f"{options['help_text']} {more}" if options["help_text"] else more
        return LinesField(**options)
    return JSONField(**options)


class RunInputForm(forms.Form):
    """A form generated from an entity's input schema: one field per property (text, number,
    whole number, checkbox, a select for an enum, JSON for arrays and objects), or one JSON
    text for the whole input when the schema is empty or too intricate for fields."""

    required_css_class = "required"

    def __init__(self, data: Any = None, *, schema: Any, rules: list[dict] | None = None):
        super().__init__(data, label_suffix="")
        self.schema = schema if isinstance(schema, dict) else {}
        self.rules = rules or []
        self.properties = input_schema_fields(self.schema)
        self.input_data: Any = None
        if self.properties is None:
            initial = self.schema.get("default")
            if initial is None:
                initial = {
                    name: spec["default"]
                    for name, spec in (self.schema.get("properties") or {}).items()
                    if isinstance(spec, dict) and "default" in spec
                }
            self.fields[JSON_FIELD] = JSONField(
                label="Input (JSON)",
                required=True,
                initial=initial,
                help_text="The whole input as one JSON value; the schema below says what fits.",
                widget=forms.Textarea(
                    attrs={"rows": 12, "class": "json-editor", "spellcheck": "false"}
                ),
                error_messages={"required": "Write the input as JSON ({} for none)."},
            )
            return
        required = set(self.schema.get("required") or [])
        for name in field_order(self.schema, self.properties):
            self.fields[name] = _field_for(name, self.properties[name], name in required)

    @property
    def single_json(self) -> bool:
        return self.properties is None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.single_json:
            if JSON_FIELD in self.errors:
                return cleaned
            data = cleaned.get(JSON_FIELD)
        else:
            # The fields that could be read are checked against the schema too, so every
            # problem shows at once; a field that could not be read keeps its own error.
            data = {}
            for name, field in self.fields.items():
                if name in self.errors:
                    continue
                value = cleaned.get(name)
                if isinstance(field, forms.BooleanField):
                    data[name] = bool(value)
                elif value is not None and not (value == "" and name not in self._required()):
                    data[name] = value
        self._check(data)
        if not self.errors:
            self.input_data = data
        return cleaned

    def _required(self) -> set[str]:
        return set(self.schema.get("required") or [])

    def _field_of(self, path: list[Any]) -> str | None:
        if self.single_json:
            return JSON_FIELD
        if path and isinstance(path[0], str) and path[0] in self.fields:
            return path[0]
        return None

    def _check(self, data: Any) -> None:
        """The schema, then the entity's validation rules, each problem at its field."""
        if not isinstance(data, dict):
            # The engine reads an input as an object of named values (runs/engine/core.py).
            self.add_error(self._field_of([]), "The input must be a JSON object ({…}).")
            return
        try:
            schemas.check_schema(self.schema)
            validator = schemas.user_validator(self.schema)
            errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.path)))
        except jsonschema.exceptions.SchemaError as exc:
            self.add_error(None, f"The entity's input schema is not valid: {exc.message}")
            return
        for error in errors:
            path = list(error.absolute_path)
            if error.validator == "required" and not path and not self.single_json:
                missing = [p for p in error.validator_value if p not in data]
                for name in missing:
                    if name in self.fields:
                        if name not in self.errors:
                            self.add_error(name, "This field is required.")
                    else:
                        self.add_error(None, error.message)
                continue
            field = self._field_of(path)
            if field is None:
                where = ".".join(str(p) for p in path) or "input"
                self.add_error(None, f"{where}: {error.message}")
                continue
            if not self.single_json and field in self.errors:
                continue  # it could not be read: its own error says why
            inner = path if self.single_json else path[1:]
            where = ".".join(str(p) for p in inner)
            self.add_error(field, f"{where}: {error.message}" if where else error.message)
        if errors:
            return
        for rule in self.rules:
            for problem in rule_problems([rule], data):
                match = _RULE_FIELD.match(str(rule.get("rule", "")))
                self.add_error(self._field_of([match.group(1)]) if match else None, problem)
