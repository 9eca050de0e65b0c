"""Every stored copy of a value: a scan of each text and JSON column of every model's table.

`places_holding(needles)` answers where any of `needles` is stored, as `table.column#pk`, so a
test proves a secret or a piece of personal data is in no row at all, including tables added
after the test was written."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from django.apps import apps
from django.db import models

_TEXT_FIELDS = (models.CharField, models.TextField, models.JSONField)


def _strings(value: Any) -> Iterator[str]:
    """Every string in a column's value: itself, or the keys and values of a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def text_columns() -> Iterator[tuple[type[models.Model], list[str]]]:
    """Each model (many-to-many tables included) with its text and JSON columns."""
    for model in apps.get_models(include_auto_created=True):
        names = [
            field.attname
            for field in model._meta.concrete_fields
            if isinstance(field, _TEXT_FIELDS)
        ]
        if names:
            yield model, names


def places_holding(needles: Iterable[str]) -> list[str]:
    """`table.column#pk` of every stored value that contains one of `needles`."""
    wanted = [n for n in needles if n]
    found = []
    for model, names in text_columns():
        for pk, *values in model._base_manager.values_list("pk", *names).iterator():
            for name, value in zip(names, values, strict=True):
                if any(n in s for s in _strings(value) for n in wanted):
                    found.append(f"{model._meta.db_table}.{name}#{pk}")
    return found
