"""Tool arguments as form fields, generated from the tool's JSON Schema.

An approver who edits a tool call should not have to write JSON: each top-level property of
a simple kind (string, number, integer, boolean, an enum, an array of those) becomes a field
with its description and a required mark. Everything else (nested objects, arrays of
objects, unions, `$ref`) stays in the raw JSON box beside it, which the edit form keeps in
step. Only the shape of the fields comes from here; the values are checked against the
whole schema by `approvals.services.edit_problems`, as the engine checks them.

The schema was written by a designer and the values typed by a person: nothing here
trusts either (a bounded number of fields, numbers bounded before they are parsed).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from runs.forms import field_order

Kind = Literal["string", "number", "integer", "boolean", "enum", "array"]
SCALARS = ("string", "number", "integer", "boolean")

MAX_FIELDS = 40  # a schema with more properties is edited as raw JSON past these
MAX_ENUM = 200  # choices in one select; a longer enum is typed as text
NUMBER_TEXT_MAX = 40  # characters of a typed number: "huge" is refused before parsing
SAFE_INTEGER = 2**53 - 1  # the largest whole number every JSON reader keeps exactly
INTEGER = re.compile(r"[+-]?[0-9]+")
NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class Missing:
    """A field left empty that is not required: the property is left out of the payload."""


MISSING = Missing()


@dataclass(frozen=True)
class ArgumentField:
    """One property edited as a field."""

    name: str
    kind: Kind
    required: bool
    description: str = ""
    title: str = ""
    choices: tuple[Any, ...] = ()  # an enum's values, in the schema's order
    item_kind: Kind | None = None  # an array's items


def _kind(schema: Any) -> Kind | None:
    """The field kind of a property's schema, None when it needs the raw JSON box."""
    if not isinstance(schema, dict) or "$ref" in schema:
        return None
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and len(enum) <= MAX_ENUM:
        if all(v is None or isinstance(v, str | int | float | bool) for v in enum):
            return "enum"
        return None
    kind = schema.get("type")
    if kind in SCALARS:
        return kind  # type: ignore[return-value]
    if kind == "array" and _kind(schema.get("items")) in (*SCALARS, "enum"):
        return "array"
    return None


def argument_fields(schema: Any) -> tuple[list[ArgumentField], list[str]]:
    """The fields of an object schema's properties, and the names of the properties left to
    the raw JSON box (in the schema's order)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return [], []
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    fields: list[ArgumentField] = []
    raw: list[str] = []
    properties = schema["properties"]
    # In a stable order: PostgreSQL's jsonb does not keep the order the keys were written in.
    for name in field_order(schema, properties):
        prop = properties[name]
        kind = _kind(prop)
        if kind is None or not isinstance(name, str) or len(fields) >= MAX_FIELDS:
            raw.append(str(name))
            continue
        item_kind = _kind(prop.get("items")) if kind == "array" else None
        choices = prop["enum"] if kind == "enum" else ()
        if item_kind == "enum":
            choices = prop["items"]["enum"]
        fields.append(
            ArgumentField(
                name=name,
                kind=kind,
                required=name in required,
                description=str(prop.get("description") or "")[:500],
                title=str(prop.get("title") or "")[:200],
                choices=tuple(choices),
                item_kind=item_kind,
            )
        )
    return fields, raw


# -- typed text to JSON values, and back ---------------------------------------------------------


def parse_number(text: str, *, integer: bool) -> int | float:
    """A typed number, or ValueError saying what to type."""
    text = text.strip()
    if len(text) > NUMBER_TEXT_MAX:
        raise ValueError(f"This number is too long: at most {NUMBER_TEXT_MAX} characters.")
    if integer:
        if not INTEGER.fullmatch(text):
            raise ValueError("Enter a whole number, such as 42.")
        value = int(text)
        if abs(value) > SAFE_INTEGER:
            raise ValueError(
                f"Enter a whole number between -{SAFE_INTEGER:,} and {SAFE_INTEGER:,}."
            )
        return value
    if not NUMBER.fullmatch(text):
        raise ValueError("Enter a number, such as 3 or 2.5.")
    if INTEGER.fullmatch(text):
        value = int(text)
        if abs(value) > SAFE_INTEGER:
            raise ValueError(f"Enter a number between -{SAFE_INTEGER:,} and {SAFE_INTEGER:,}.")
        return value
    number = float(text)
    if not math.isfinite(number):
        raise ValueError("This number is too large (at most about ±1.8e308).")
    return number


def parse_scalar(kind: Kind | None, text: str, choices: tuple[Any, ...] = ()) -> Any:
    """One array item typed on a line."""
    if kind in ("number", "integer"):
        return parse_number(text, integer=kind == "integer")
    if kind == "boolean":
        word = text.strip().lower()
        if word in ("true", "yes"):
            return True
        if word in ("false", "no"):
            return False
        raise ValueError("Write true or false.")
    if kind == "enum":
        for choice in choices:
            if text == as_text(choice):
                return choice
        raise ValueError(f"{text[:80]!r} is not one of the choices.")
    return text


def parse_value(field: ArgumentField, text: str, *, present: bool) -> Any:
    """The JSON value of a field as typed, MISSING to leave the property out, or ValueError.
    `present`: the payload being edited has the property (an emptied list stays a list)."""
    if field.kind == "string":
        return text if text or field.required else MISSING
    if field.kind == "array":
        lines = [line.rstrip("\r") for line in text.split("\n")]
        lines = [line for line in lines if line.strip()]
        if not lines:
            return [] if field.required or present else MISSING
        items = []
        for number, line in enumerate(lines, start=1):
            try:
                items.append(parse_scalar(field.item_kind, line, field.choices))
            except ValueError as exc:
                raise ValueError(f"Line {number}: {exc}") from None
        return items
    if not text.strip():
        if field.required:
            raise ValueError("This field is required.")
        return MISSING
    if field.kind == "boolean":
        return text == "true"
    if field.kind == "enum":
        try:
            return field.choices[int(text)]
        except (ValueError, IndexError):
            raise ValueError("Pick one of the choices.") from None
    return parse_number(text, integer=field.kind == "integer")


def as_text(value: Any) -> str:
    """A value as a field shows it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def initial_text(field: ArgumentField, payload: Any) -> str:
    """What a field shows for the payload being edited ("" when it lacks the property or its
    value does not fit the field: the raw JSON box still has it)."""
    if not isinstance(payload, dict) or field.name not in payload:
        return ""
    value = payload[field.name]
    if field.kind == "enum":
        for index, choice in enumerate(field.choices):
            if choice == value and type(choice) is type(value):
                return str(index)
        return ""
    if field.kind == "array":
        if isinstance(value, list) and all(
            isinstance(v, str | int | float | bool) and "\n" not in as_text(v) for v in value
        ):
            return "\n".join(as_text(v) for v in value)
        return ""
    if field.kind == "boolean":
        return as_text(value) if isinstance(value, bool) else ""
    if field.kind in ("number", "integer"):
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else ""
    return value if isinstance(value, str) else ""
