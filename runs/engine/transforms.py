"""Output transformations (io_contract.output.transformations, seed 000 §3.8).

Each transformation names a field of the output (a key, or a dotted path) and a transform
registered here by name, never an import path taken from a definition. Two families take their
parameter from the name: `round_<digits>` (round_0 … round_10) and `truncate_<characters>`.
A list value is transformed item by item.

Failures are data: an unknown transform or a value a transform cannot take leaves the value as
it was and adds a problem; a field the output does not have is left alone (output schemas have
optional fields).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Transform = Callable[[Any], Any]
TRANSFORMS: dict[str, Transform] = {}

_ROUND = re.compile(r"^round_(\d{1,2})$")
_TRUNCATE = re.compile(r"^truncate_(\d{1,7})$")
_MAX_ROUND_DIGITS = 10
_DATE_FORMATS = ("%Y/%m/%d", "%d %B %Y", "%d %b %Y", "%B %d, %Y", "%b %d, %Y", "%B %d %Y")


class TransformError(ValueError):
    """A value the transform cannot take; the message finishes "cannot <transform> …"."""


def transform(name: str) -> Callable[[Transform], Transform]:
    """Register a transform under `name`."""

    def register(function: Transform) -> Transform:
        TRANSFORMS[name] = function
        return function

    return register


def known_transforms() -> list[str]:
    """Every name a definition may use, the parametric families as patterns."""
    return [*sorted(TRANSFORMS), "round_<digits>", "truncate_<characters>"]


def lookup(name: str) -> Transform | None:
    """The transform called `name`, including the parametric families; None if unknown."""
    if name in TRANSFORMS:
        return TRANSFORMS[name]
    rounding = _ROUND.match(name)
    if rounding and int(rounding.group(1)) <= _MAX_ROUND_DIGITS:
        return _rounder(int(rounding.group(1)))
    cut = _TRUNCATE.match(name)
    if cut and int(cut.group(1)) > 0:
        return _truncator(int(cut.group(1)))
    return None


def unknown_transforms(transformations: Sequence[Mapping[str, Any]]) -> list[str]:
    """The transform names a definition uses that are not registered (for design-time checks)."""
    names = [str(t.get("transform", "")) for t in transformations]
    return [name for name in names if lookup(name) is None]


def apply_transformations(
    output: Any, transformations: Sequence[Mapping[str, Any]]
) -> tuple[Any, list[str]]:
    """The output with each transformation applied in order, and every problem met.

    The output given is not changed; a copy is returned.
    """
    result = copy.deepcopy(output)
    problems: list[str] = []
    for item in transformations:
        field, name = str(item.get("field", "")), str(item.get("transform", ""))
        function = lookup(name)
        if function is None:
            known = ", ".join(known_transforms())
            problems.append(f"{field}: unknown transform {name!r}; known transforms are {known}")
            continue
        problem = _apply_at(result, field, name, function)
        if problem:
            problems.append(problem)
    return result, problems


def _apply_at(output: Any, field: str, name: str, function: Transform) -> str | None:
    parent, key = _locate(output, field)
    if parent is None:
        return None
    try:
        value = parent[key]
        if isinstance(value, list):
            parent[key] = [function(item) for item in value]
        else:
            parent[key] = function(value)
    except TransformError as exc:
        return f"{field}: {exc}"
    return None


def _locate(output: Any, field: str) -> tuple[Any, Any]:
    """The container holding `field` (a key, or a dotted path) and the key in it."""
    if isinstance(output, dict) and field in output:
        return output, field
    container: Any = output
    parts = field.split(".")
    for part in parts[:-1]:
        container = _child(container, part)
        if container is None:
            return None, None
    last = parts[-1]
    if isinstance(container, dict) and last in container:
        return container, last
    if isinstance(container, list) and last.isdigit() and int(last) < len(container):
        return container, int(last)
    return None, None


def _child(container: Any, part: str) -> Any:
    if isinstance(container, dict):
        return container.get(part)
    if isinstance(container, list) and part.isdigit() and int(part) < len(container):
        return container[int(part)]
    return None


# -- the transforms --------------------------------------------------------------------------


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TransformError(f"cannot {name} {_kind(value)}; it applies to text")
    return value


@transform("capitalize")
def capitalize(value: Any) -> Any:
    """First letter upper case, the rest as written ("mcDonald" stays "McDonald")."""
    text = _text(value, "capitalize")
    return text[:1].upper() + text[1:]


@transform("lower")
def lower(value: Any) -> Any:
    return _text(value, "lower").lower()


@transform("upper")
def upper(value: Any) -> Any:
    return _text(value, "upper").upper()


@transform("strip")
def strip(value: Any) -> Any:
    return _text(value, "strip").strip()


@transform("title")
def title(value: Any) -> Any:
    return _text(value, "title").title()


@transform("collapse_whitespace")
def collapse_whitespace(value: Any) -> Any:
    return " ".join(_text(value, "collapse_whitespace").split())


@transform("slug")
def slug(value: Any) -> Any:
    words = re.findall(r"[a-z0-9]+", _text(value, "slug").lower())
    return "-".join(words)


@transform("to_string")
def to_string(value: Any) -> Any:
    """Text for any value: numbers as written, booleans as true/false, objects as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None or isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@transform("to_number")
def to_number(value: Any) -> Any:
    """A number from a number or numeric text ("1,234.50" → 1234.5); integral text → int."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TransformError(f"cannot to_number {_kind(value)}")
    if not isinstance(value, str):
        return value
    cleaned = value.strip().replace(",", "").replace("_", "")
    try:
        return int(cleaned)
    except ValueError:
        pass
    try:
        number = float(cleaned)
    except ValueError:
        raise TransformError(f"cannot to_number {value!r}; it is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise TransformError(f"cannot to_number {value!r}; it is not a finite number")
    return number


@transform("to_integer")
def to_integer(value: Any) -> Any:
    number = to_number(value)
    return int(round(number))


@transform("to_boolean")
def to_boolean(value: Any) -> Any:
    """true/false, yes/no, 1/0, on/off (any case) and booleans."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    if text in ("true", "yes", "1", "on", "y"):
        return True
    if text in ("false", "no", "0", "off", "n"):
        return False
    raise TransformError(f"cannot to_boolean {_kind(value)}")


@transform("iso_date")
def iso_date(value: Any) -> Any:
    """YYYY-MM-DD from an ISO date or date-time, "2025/01/15", "15 January 2025",
    "January 15, 2025", or a Unix timestamp (UTC)."""
    return _parse_moment(value, "iso_date").date().isoformat()


@transform("iso_datetime")
def iso_datetime(value: Any) -> Any:
    """An ISO 8601 date-time; a value without a zone is kept without one, a timestamp is UTC."""
    return _parse_moment(value, "iso_datetime").isoformat()


def _parse_moment(value: Any, name: str) -> dt.datetime:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return dt.datetime.fromtimestamp(value, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise TransformError(f"cannot {name} the timestamp {value}") from None
    text = _text(value, name).strip()
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        pass
    for pattern in _DATE_FORMATS:
        try:
            return dt.datetime.strptime(text, pattern)
        except ValueError:
            continue
    raise TransformError(f"cannot {name} {value!r}; it is not a date this transform reads")


def _rounder(digits: int) -> Transform:
    def rounding(value: Any) -> Any:
        number = to_number(value)
        rounded = round(float(number), digits)
        return int(rounded) if digits == 0 else rounded

    return rounding


def _truncator(limit: int) -> Transform:
    def truncating(value: Any) -> Any:
        text = _text(value, f"truncate_{limit}")
        return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"

    return truncating


# The common ones are listed by name too, so known_transforms() shows them.
TRANSFORMS["round_0"] = _rounder(0)
TRANSFORMS["round_2"] = _rounder(2)
TRANSFORMS["truncate_100"] = _truncator(100)
TRANSFORMS["truncate_1000"] = _truncator(1000)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"
