"""The engine's hand-written statements (runs/sql.py) prepare their values on PostgreSQL
without going through each field's `get_db_prep_save`: what they send must be exactly what
the field would have sent, for every field they write and every kind of value they pass."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection

from runs import sql
from runs.models import LLMCall, Run, RunEvent, RunStatus, StepRun, ToolCall, TraceSequence

pytestmark = pytest.mark.smoke

MODELS = (Run, StepRun, LLMCall, ToolCall, RunEvent, TraceSequence)
ONE = uuid.UUID("8c4c23e4-fb2c-4d69-9947-77b58a330644")
SAMPLES = {
    "CharField": ["abc", "", "ünïcødé", RunStatus.RUNNING, 42, None],
    "TextField": ["a longer text\nwith lines", "", None],
    "PositiveIntegerField": [0, 7, 2**31 - 1, None, True],
    "PositiveBigIntegerField": [0, 2**40, None],
    "IntegerField": [-3, 0, None],
    "BigAutoField": [1, 2**40, None],
    "AutoField": [1, None],
    "BooleanField": [True, False],
    "DecimalField": [Decimal("0"), Decimal("1.250000"), Decimal("0.000001"), 3, None],
    "FloatField": [0.5, 1, None],
    "DateTimeField": [
        datetime(2026, 11, 25, 8, 46, 51, 123456, tzinfo=UTC),
        datetime(2026, 11, 25, 9, 0, tzinfo=UTC) + timedelta(hours=1),
        None,
    ],
    "UUIDField": [ONE, str(ONE), ONE.hex, None],
    "JSONField": [{"a": [1, "x", None]}, [], "text", 0, False, None],
}


def fields():
    for model in MODELS:
        for field in model._meta.concrete_fields:
            target = field.target_field if field.is_relation else field
            kind = target.get_internal_type()
            yield pytest.param(model, field, kind, id=f"{model.__name__}.{field.name}")


def sent(value):
    """What a prepared value amounts to on the wire: its type and its content."""
    dumps = getattr(value, "dumps", None)
    if dumps is not None and hasattr(value, "obj"):  # psycopg's Jsonb
        return type(value), dumps(value.obj)
    return type(value), value


@pytest.mark.parametrize(("model", "field", "kind"), list(fields()))
def test_it_sends_what_the_field_itself_would_send(db, model, field, kind):
    samples = SAMPLES.get(kind)
    assert samples is not None, f"no samples for {kind}: add some before the engine writes it"
    for value in samples:
        if value is None and not field.null and kind not in ("JSONField", "CharField"):
            continue
        expected = field.get_db_prep_save(value, connection)
        assert sent(sql.prep(model, field.name, value)) == sent(expected), (field.name, value)


def test_a_value_the_fast_path_does_not_know_still_gets_the_fields_answer(db):
    # Not a UUID: the field's own error, as the ORM would raise it.
    with pytest.raises(Exception) as ours:
        sql.prep(Run, "id", "not-a-uuid")
    with pytest.raises(Exception) as django:
        Run._meta.get_field("id").get_db_prep_save("not-a-uuid", connection)
    assert type(ours.value) is type(django.value)
