"""JSON the product takes from people and clients, checked once before it goes anywhere: the
API's request bodies (`config.parsers.JSONBodyParser`), the JSON fields of the admin and
console forms, and entity definitions wherever they are validated.

Refused, with where it is named (`input_data.address[2].city`):

- nesting deeper than HIERARCH_JSON_MAX_DEPTH levels (64 by default): every reader of the
  value (the JSON decoder, jsonschema, the engine, the encoder that stores it) walks it
  recursively, and a few thousand levels end in RecursionError;
- text PostgreSQL cannot store, in a value or a key: the NUL character (`\\u0000`) and lone
  surrogates (`\\ud800`, which UTF-8 cannot encode);
- numbers no column or JSON encoder holds: infinities (`1e999` decodes to one).

The walk is iterative, so it is safe on any value however deep, and it stops at the first
few problems.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from django import forms
from django.conf import settings

DEFAULT_MAX_DEPTH = 64
# A value with thousands of bad strings names the first few, not all of them.
MOST_PROBLEMS = 10

NUL = "text may not contain the NUL character (\\u0000)"
SURROGATE = "text may not contain lone surrogates (\\ud800-\\udfff)"
NOT_FINITE = "numbers must be finite (at most about ±1.8e308)"


class JSONInputRefused(ValueError):
    """JSON the product does not take; `problems` is {where: what is wrong}."""

    def __init__(self, problems: Mapping[str, str]):
        self.problems = dict(problems)
        super().__init__("; ".join(f"{where}: {what}" for where, what in self.problems.items()))


def max_depth() -> int:
    return int(getattr(settings, "HIERARCH_JSON_MAX_DEPTH", DEFAULT_MAX_DEPTH))


def too_deep(limit: int) -> str:
    return f"is nested deeper than {limit} levels (HIERARCH_JSON_MAX_DEPTH)"


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return NUL
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return SURROGATE
    return None


def _child(where: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else str(key)


def json_input_problems(value: Any, where: str = "") -> dict[str, str]:
    """What is wrong with a decoded JSON value, by where it is ("" for the value itself, or
    under `where`); {} when nothing is."""
    limit = max_depth()
    found: dict[str, str] = {}
    # (value, where it is, how many containers hold it)
    pending: list[tuple[Any, str, int]] = [(value, where, 0)]
    while pending and len(found) < MOST_PROBLEMS:
        item, at, depth = pending.pop()
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem:
                found.setdefault(at, problem)
        elif isinstance(item, float):
            if not math.isfinite(item):
                found.setdefault(at, NOT_FINITE)
        elif isinstance(item, dict | list | tuple):
            if depth >= limit:
                found.setdefault(at, too_deep(limit))
                continue
            if isinstance(item, dict):
                for key, inner in item.items():
                    if isinstance(key, str):
                        problem = _text_problem(key)
                        if problem:
                            found.setdefault(at or "(key)", f"a key: {problem}")
                            continue
                    pending.append((inner, _child(at, key), depth + 1))
            else:
                pending.extend(
                    (inner, _child(at, index), depth + 1) for index, inner in enumerate(item)
                )
    return found


def json_input_check(value: Any, where: str = "") -> Any:
    """`value`, or JSONInputRefused naming what is wrong in it."""
    found = json_input_problems(value, where)
    if found:
        raise JSONInputRefused(found)
    return value


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (numbers must be finite)")


def json_input_loads(text: str | bytes, where: str = "") -> Any:
    """Decode JSON text and check it; malformed text raises json.JSONDecodeError (a
    ValueError) as json.loads does, anything the product does not take JSONInputRefused."""
    try:
        value = json.loads(text, parse_constant=_not_json)
    except RecursionError:
        # The C decoder stops cleanly at the interpreter's recursion limit; far past ours.
        raise JSONInputRefused({where or "body": too_deep(max_depth())}) from None
    return json_input_check(value, where)


def form_json_loads(text: str) -> Any:
    """JSON typed into a form field, decoded and checked, or the form's ValidationError saying
    what is wrong and where."""
    try:
        return json_input_loads(text)
    except JSONInputRefused as refused:
        raise forms.ValidationError(
            "This JSON is not accepted: %(problems)s.",
            code="invalid_json",
            params={"problems": _where_what(refused.problems)},
        ) from None
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            "This is not valid JSON: %(problem)s at line %(line)s, column %(column)s.",
            code="invalid_json",
            params={"problem": exc.msg, "line": exc.lineno, "column": exc.colno},
        ) from None
    except ValueError as exc:  # NaN, or an integer of thousands of digits
        raise forms.ValidationError(
            "This is not valid JSON: %(problem)s.", code="invalid_json", params={"problem": exc}
        ) from None


def _where_what(problems: Mapping[str, str]) -> str:
    return "; ".join(f"{where}: {what}" if where else what for where, what in problems.items())


class CheckedJSONField(forms.JSONField):
    """Django's JSON form field, taking only JSON the product takes (see the module): its own
    decoding lets RecursionError through, and nothing refuses NUL or lone surrogates."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and not self.disabled and value not in self.empty_values:
            try:
                json_input_loads(value)
            except JSONInputRefused as refused:
                raise forms.ValidationError(
                    "This JSON is not accepted: %(problems)s.",
                    code="invalid_json",
                    params={"problems": _where_what(refused.problems)},
                ) from None
            except ValueError:
                pass  # not JSON at all: Django's own message, below
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        # The form shown again with its errors: the text as typed, however deep.
        try:
            return super().bound_data(data, initial)
        except (RecursionError, ValueError):
            return forms.fields.InvalidJSONInput(data)
