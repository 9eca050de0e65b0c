"""Sample input for a trial, made from an entity's input schema: what a designer would type
first, ready to edit."""

from __future__ import annotations

from typing import Any

# Deeper than this, a sample is an empty object: enough to start from, never a long walk.
MOST_DEPTH = 4


def sample_input(schema: Any) -> dict[str, Any]:
    """A value for each property of an object schema: its default, first example, first
    choice, or a plain value of its type within its bounds."""
    value = sample_value(schema, "", 0)
    return value if isinstance(value, dict) else {}


def sample_value(schema: Any, name: str, depth: int) -> Any:
    if not isinstance(schema, dict):
        return None
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    choices = schema.get("enum")
    if isinstance(choices, list) and choices:
        return choices[0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or (kind is None and isinstance(schema.get("properties"), dict)):
        if depth >= MOST_DEPTH:
            return {}
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return {}
        return {
            key: sample_value(inner, key, depth + 1)
            for key, inner in properties.items()
            if isinstance(key, str)
        }
    if kind == "array":
        return []
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        return _number(schema, kind)
    if kind == "string":
        return _text(schema, name)
    return None


def _number(schema: dict, kind: str) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    value: int | float = 1
    if isinstance(low, int | float) and not isinstance(low, bool):
        value = low + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
    elif isinstance(high, int | float) and not isinstance(high, bool) and high < 1:
        value = high - 1
    return int(value) if kind == "integer" else value


def _text(schema: dict, name: str) -> str:
    text = f"Sample {name.replace('_', ' ')}".strip() if name else "Sample"
    low = schema.get("minLength")
    high = schema.get("maxLength")
    if isinstance(low, int) and len(text) < low:
        text = text.ljust(min(low, 10_000), ".")
    if isinstance(high, int) and high >= 0:
        text = text[:high]
    fmt = schema.get("format")
    if fmt == "email":
        return "someone@example.com"
    if fmt in ("uri", "url"):
        return "https://example.com/"
    if fmt == "date":
        return "2025-01-15"
    if fmt == "date-time":
        return "2025-01-15T10:30:00Z"
    return text
