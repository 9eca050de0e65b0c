"""JSON typed into a form (the designer's JSON fields, a decision's edited payload, a run's
JSON input) is checked like an API body: nesting, NUL, lone surrogates, infinite numbers."""

from __future__ import annotations

import pytest

from approvals.forms import EditForm
from config.json_input import CheckedJSONField, json_input_problems
from runs.forms import JSONField as RunJSONField

pytestmark = pytest.mark.smoke

BAD_TEXTS = {
    "nested thousands deep": "[" * 5000 + "]" * 5000,
    "nested past the limit": "[" * 70 + "]" * 70,
    "a NUL": '{"a": "x\\u0000"}',
    "a NUL in a key": '{"a\\u0000": 1}',
    "a lone surrogate": '["\\ud800"]',
    "an infinite number": '{"a": 1e999}',
}


@pytest.mark.parametrize("text", BAD_TEXTS.values(), ids=list(BAD_TEXTS))
@pytest.mark.parametrize(
    "field", [CheckedJSONField(), RunJSONField()], ids=["designer", "run input"]
)
def test_a_form_json_field_refuses_it_with_a_message(field, text):
    with pytest.raises(Exception) as caught:
        field.clean(text)
    assert type(caught.value).__name__ == "ValidationError"
    assert "not accepted" in str(caught.value) or "nested" in str(caught.value)


@pytest.mark.parametrize("text", BAD_TEXTS.values(), ids=list(BAD_TEXTS))
def test_an_edited_payload_is_refused_at_its_field(text):
    form = EditForm(data={"payload": text, "notes": ""})
    form.is_valid()
    assert "payload" in form.errors


def test_the_problems_name_where_they_are():
    assert json_input_problems({"a": [{"b\x00": 1}, "\ud800", float("inf")]}, "input") == {
        "input.a[0]": "a key: text may not contain the NUL character (\\u0000)",
        "input.a[1]": "text may not contain lone surrogates (\\ud800-\\udfff)",
        "input.a[2]": "numbers must be finite (at most about ±1.8e308)",
    }
