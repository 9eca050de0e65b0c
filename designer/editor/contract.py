"""Input and output: the contract of what the entity takes and gives, built field by field and
shown as the JSON Schema it makes.

Each of `io_contract.input.schema` and `io_contract.output.schema` is an object schema; each
of its properties that a row can say (a name, one of a few types, required, a description,
choices, bounds) is a row. A property a row cannot say (a nested object with fields of its
own, `$ref`, `oneOf`, a pattern, several types…) is kept exactly as it is, shown as edited in
the JSON view, and so is everything else of the schema: only what the rows say is rewritten.
A row keeps the keywords it does not show but that do not change what it means (`default`,
`title`, `examples`, `format`), following its field through a rename.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.validators import RegexValidator

from designer.editor.base import RowForm, Rows, Section, add_error, deep, read
from designer.editor.identity import TagsField
from entities.definition import Problem
from runs.forms import field_order

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TYPES = [
    ("string", "Text"),
    ("number", "Number"),
    ("integer", "Whole number"),
    ("boolean", "True or false"),
    ("array_text", "List of texts"),
    ("array", "List (of anything)"),
    ("object", "Object (its parts edited in the JSON view)"),
]
TYPE_NAMES = dict(TYPES)
# Keywords a row keeps as they were without showing them: they say nothing a row changes.
PASSIVE = frozenset({"default", "title", "examples", "format", "x-order"})
SHOWN = frozenset({"type", "description", "enum", "items"})
# The bound keywords each type takes: (least, most).
BOUNDS = {
    "string": ("minLength", "maxLength"),
    "number": ("minimum", "maximum"),
    "integer": ("minimum", "maximum"),
    "array_text": ("minItems", "maxItems"),
    "array": ("minItems", "maxItems"),
}
ALL_BOUNDS = frozenset(k for pair in BOUNDS.values() for k in pair)
CHOOSABLE = ("string", "number", "integer")
# Beyond this a number is not kept exactly by JSON readers that use doubles.
LARGEST = 1e15
MOST_CHOICES = 100
PARTS = (("input", "Input"), ("output", "Output"))


class FieldRow(RowForm):
    """One field of the input or the output."""

    paths = {
        ".type": "type",
        ".items": "type",
        ".description": "description",
        ".enum": "enum",
        ".default": "enum",
        **{f".{k}": "minimum" for k in ("minimum", "minLength", "minItems")},
        **{f".{k}": "maximum" for k in ("maximum", "maxLength", "maxItems")},
    }

    name = forms.CharField(
        max_length=64,
        validators=[
            RegexValidator(
                IDENTIFIER,
                "A field's name is letters, digits and '_', and does not start with a digit: "
                "plans and templates refer to it by that name.",
            )
        ],
    )
    type = forms.ChoiceField(choices=TYPES)
    required = forms.BooleanField(required=False, label="Required")
    description = forms.CharField(max_length=1000, required=False)
    enum = forms.CharField(
        max_length=5000,
        required=False,
        label="Choices",
        help_text="Comma-separated; empty for any value.",
    )
    minimum = forms.FloatField(
        required=False,
        min_value=-LARGEST,
        max_value=LARGEST,
        label="At least",
        help_text="A number's value, a text's length, a list's items.",
    )
    maximum = forms.FloatField(
        required=False, min_value=-LARGEST, max_value=LARGEST, label="At most"
    )
    # The name the field had when the page was shown: what it keeps follows a rename.
    was = forms.CharField(required=False, max_length=200, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        kind = data.get("type")
        if kind is None:
            return data
        data["choices"] = self._choices(kind, data.get("enum", ""))
        label = TYPE_NAMES[kind].lower()
        least, most = data.get("minimum"), data.get("maximum")
        if kind not in BOUNDS:
            for name in ("minimum", "maximum"):
                if data.get(name) is not None:
                    self.add_error(name, f"A field of type “{label}” has no bounds.")
            return data
        whole = kind != "number"
        for name in ("minimum", "maximum"):
            value = data.get(name)
            if value is None:
                continue
            if whole and not value.is_integer():
                self.add_error(name, "Must be a whole number.")
            elif kind not in ("number", "integer") and value < 0:
                self.add_error(name, "A length or a count cannot be below 0.")
        if least is not None and most is not None and least > most:
            self.add_error("maximum", "Must not be below “at least”.")
        return data

    def _choices(self, kind: str, text: str) -> list[Any]:
        parts = list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
        if not parts:
            return []
        if kind not in CHOOSABLE:
            label = TYPE_NAMES[kind].lower()
            self.add_error("enum", f"Choices are for text and numbers, not for “{label}”.")
            return []
        if len(parts) > MOST_CHOICES:
            self.add_error("enum", f"At most {MOST_CHOICES} choices.")
            return []
        if kind == "string":
            return parts
        values: list[Any] = []
        for part in parts:
            try:
                value = float(part)
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or abs(value) > LARGEST:
                self.add_error("enum", f"“{part[:50]}” is not a number.")
                return []
            if kind == "integer" and not value.is_integer():
                self.add_error("enum", f"“{part[:50]}” is not a whole number.")
                return []
            values.append(_number(value))
        return values


def _number(value: float) -> int | float:
    """3.0 is written 3: a whole number reads back as the same text it was typed as."""
    return int(value) if float(value).is_integer() else value


def _finite(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and abs(value) <= LARGEST
    )


def row_of(name: Any, prop: Any, required: list) -> dict[str, Any] | None:
    """The row that says `prop`, or None when a row cannot say all of it (it is then kept as
    it is)."""
    if not isinstance(name, str) or not IDENTIFIER.match(name) or len(name) > 64:
        return None
    if not isinstance(prop, dict) or set(prop) - PASSIVE - SHOWN - ALL_BOUNDS:
        return None
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items")
        kind = "array" if items is None else "array_text" if items == {"type": "string"} else None
    elif "items" in prop:
        return None
    if not isinstance(kind, str) or kind not in TYPE_NAMES:
        return None  # several types (["integer", "null"]), or none: kept as it is
    least, most = BOUNDS.get(kind, (None, None))
    if set(prop) & ALL_BOUNDS - {least, most}:
        return None
    bounds = [prop.get(least), prop.get(most)] if least else [None, None]
    if any(b is not None and not _finite(b) for b in bounds):
        return None
    description = prop.get("description", "")
    if not isinstance(description, str) or len(description) > 1000:
        return None
    enum = prop.get("enum")
    if enum is not None and not _says(kind, enum):
        return None
    return {
        "name": name,
        "type": kind,
        "required": name in required,
        "description": description,
        "enum": ", ".join(str(v) for v in enum or []),
        "minimum": bounds[0],
        "maximum": bounds[1],
        "was": name,
    }


def _says(kind: str, enum: Any) -> bool:
    """Whether the choices read back from their comma-separated text as they are."""
    if not isinstance(enum, list) or not enum or kind not in CHOOSABLE:
        return False
    if len(enum) > MOST_CHOICES or len(set(map(json.dumps, enum))) != len(enum):
        return False
    if kind == "string":
        return all(
            isinstance(v, str) and v and v == v.strip() and "," not in v and len(v) <= 200
            for v in enum
        )
    return all(
        _finite(v) and (kind == "number" or isinstance(v, int)) and _number(v) == v for v in enum
    ) and all(not isinstance(v, float) or not v.is_integer() for v in enum)


def property_of(row: dict[str, Any], old: dict | None) -> dict[str, Any]:
    """The JSON Schema of one row, with the passive keywords it had kept."""
    kind = row["type"]
    prop: dict[str, Any]
    if kind == "array_text":
        prop = {"type": "array", "items": {"type": "string"}}
    else:
        prop = {"type": kind}
    if row["description"]:
        prop["description"] = row["description"]
    if row.get("choices"):
        prop["enum"] = row["choices"]
    if kind in BOUNDS:
        least, most = BOUNDS[kind]
        if row["minimum"] is not None:
            prop[least] = _number(row["minimum"])
        if row["maximum"] is not None:
            prop[most] = _number(row["maximum"])
    for key, value in (old or {}).items():
        if key in PASSIVE:
            prop[key] = copy.deepcopy(value)
    return prop


@dataclass(frozen=True)
class Part:
    """The input or the output, as the template shows it."""

    key: str
    title: str
    spec: Rows
    rowset: Any
    kept: list[tuple[str, str]]  # (name, its JSON) of the fields edited in the JSON view
    schema_text: str
    as_last_valid: bool


class ContractForm(forms.Form):
    """The state contract; problems of the schemas as a whole land on it too."""

    reads_from = TagsField(
        required=False,
        label="State it reads",
        help_text="Comma-separated keys of its caller's state it may read (its input is "
        "taken from these only); empty: any.",
    )
    writes_to = TagsField(
        required=False,
        label="State it writes",
        help_text="Comma-separated keys of its output that land at the top of its caller's "
        "state (the whole output stays under the step's name); empty: all of them.",
    )


class ContractSection(Section):
    key = "contract"
    title = "Input and output"
    template = "designer/editor/_contract.html"
    check_template = "designer/editor/_contract_check.html"
    intro = (
        "What the entity is given and what it gives back, field by field. Runs are checked "
        "against these: a missing required field or a value outside its choices or bounds "
        "is refused."
    )
    form_class = ContractForm
    rows = {
        part: Rows(
            FieldRow,
            f"io_contract.{part}.schema.properties",
            f"{title} fields",
            100,
            f"Add an {part} field",
        )
        for part, title in PARTS
    }
    paths = {
        **{f"io_contract.{part}.schema": "" for part, _title in PARTS},
        "io_contract.state_contract.reads_from": "reads_from",
        "io_contract.state_contract.writes_to": "writes_to",
    }

    def initial(self, definition: dict) -> dict[str, Any]:
        state = read(definition, "io_contract", "state_contract") or {}
        return {
            "reads_from": state.get("reads_from") or [],
            "writes_to": state.get("writes_to") or [],
        }

    def row_initial(self, name: str, definition: dict) -> list[dict[str, Any]]:
        schema = read(definition, "io_contract", name, "schema")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(properties, dict):
            return []
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        # In the rows' order as saved (`x-order`): PostgreSQL's jsonb keeps keys its own way.
        found = [row_of(n, properties[n], required) for n in field_order(schema, properties)]
        return [row for row in found if row is not None]

    def kept_properties(self, part: str, definition: dict | None = None) -> dict[str, Any]:
        """The properties of `part`'s schema no row can say, as they are."""
        schema = read(self.definition if definition is None else definition, "io_contract", part)
        schema = schema.get("schema") if isinstance(schema, dict) else None
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(properties, dict):
            return {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        return {
            n: properties[n]
            for n in field_order(schema, properties)
            if row_of(n, properties[n], required) is None
        }

    # -- validation beyond each row: names once, defaults among the choices ---------------

    def is_valid(self) -> bool:
        valid = super().is_valid()
        if getattr(self, "_rows_checked", False):
            return valid and not self._row_problems
        self._rows_checked = True
        self._row_problems = False
        for part, _title in PARTS:
            kept = self.kept_properties(part)
            seen: set[str] = set()
            old = self._old_properties(part)
            for row in self._live_rows(part):
                data = getattr(row, "cleaned_data", {})
                name = data.get("name")
                if not name or "name" in row.errors:
                    continue
                if name in seen:
                    self._row_error(row, "name", f"Another {part} field has this name.")
                elif name in kept:
                    self._row_error(
                        row, "name", f"An {part} field edited in the JSON view has this name."
                    )
                seen.add(name)
                before = old.get(data.get("was") or "")
                if (
                    data.get("choices")
                    and isinstance(before, dict)
                    and "default" in before
                    and before["default"] not in data["choices"]
                ):
                    self._row_error(
                        row,
                        "enum",
                        f"The default, {json.dumps(before['default'])[:60]} (set in the "
                        "JSON view), is not one of the choices.",
                    )
        return valid and not self._row_problems

    def _row_error(self, row: RowForm, field: str, message: str) -> None:
        row.add_error(field, message)
        self._row_problems = True

    def _live_rows(self, part: str) -> list[RowForm]:
        """The rows that will be written, as `Section.apply` picks them."""
        rowset = self.rowsets[part]
        if not rowset.is_bound:
            return list(rowset.forms)
        deleted = set(rowset.deleted_forms) if rowset.is_valid() else set()
        initial = set(rowset.initial_forms)
        return [
            form
            for form in rowset.forms
            if form not in deleted
            and (form in initial or form.has_changed())
            and not getattr(form, "cleaned_data", {}).get("DELETE")
        ]

    def _old_properties(self, part: str) -> dict[str, Any]:
        schema = read(self.definition, "io_contract", part, "schema")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        return properties if isinstance(properties, dict) else {}

    # -- writing --------------------------------------------------------------------------

    def write(self, definition: dict, data: dict[str, Any], rows: dict[str, list[dict]]) -> None:
        state = read(definition, "io_contract", "state_contract")
        if state or data["reads_from"] or data["writes_to"]:
            state = deep(definition, "io_contract", "state_contract")
            state["reads_from"] = data["reads_from"]
            state["writes_to"] = data["writes_to"]
        self.made: dict[str, Any] = {}
        for part, _title in PARTS:
            schema = read(definition, "io_contract", part, "schema")
            if not isinstance(schema, dict):
                if not rows[part]:
                    continue  # not a schema, and no rows: the services say so; kept
                schema = {"type": "object"}
            old = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
            kept = self.kept_properties(part, definition)
            said = set(old) - set(kept)
            properties = {
                row["name"]: property_of(row, old.get(row["was"]) if row["was"] in said else None)
                | {"x-order": index}
                for index, row in enumerate(rows[part], start=1)
            }
            named = set(properties)
            properties.update(kept)
            before = schema.get("required")
            required = [row["name"] for row in rows[part] if row["required"]]
            for name in before if isinstance(before, list) else []:
                # A row says whether its field is required; other entries stay as they are.
                if name not in said and name not in named and name not in required:
                    required.append(name)
            schema["properties"] = properties
            if required or "required" in schema:
                schema["required"] = required
            deep(definition, "io_contract", part)["schema"] = schema
            self.made[part] = schema

    # -- problems at their rows ----------------------------------------------------------

    def place(self, problem: Problem) -> bool:
        path = problem.path
        for part, title in PARTS:
            base = f"io_contract.{part}.schema"
            if not (path == base or path.startswith((base + ".", base + "["))):
                continue
            rest = path[len(base) :]
            if rest.startswith(".properties."):
                tail = rest[len(".properties.") :]
                name = re.split(r"[.\[]", tail, maxsplit=1)[0]
                for row in self._live_rows(part):
                    if row["name"].value() == name:
                        row.place(tail[len(name) :], problem.message)
                        return True
                add_error(self.form, None, f"{title} field {name}: {problem.message}")
                return True
            add_error(self.form, None, f"{title}: {problem.message}")
            return True
        return False

    # -- what the template shows -----------------------------------------------------------

    @property
    def parts(self) -> list[Part]:
        made = getattr(self, "made", None)
        if made is None and self.form.is_bound and self.is_valid():
            scratch = copy.deepcopy(self.definition)
            self.apply(scratch)
            made = self.made
        found = []
        for part, title in PARTS:
            schema = (made or {}).get(part)
            last_valid = schema is None and self.form.is_bound
            if schema is None:
                schema = read(self.definition, "io_contract", part, "schema")
            found.append(
                Part(
                    key=part,
                    title=title,
                    spec=self.rows[part],
                    rowset=self.rowsets[part],
                    kept=[
                        (name, json.dumps(prop, indent=2, ensure_ascii=False))
                        for name, prop in self.kept_properties(part).items()
                    ],
                    schema_text=json.dumps(
                        schema if schema is not None else {}, indent=2, ensure_ascii=False
                    ),
                    as_last_valid=last_valid,
                )
            )
        return found
