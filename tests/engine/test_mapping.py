"""Input mappings: JSONLogic operations are evaluated wherever they stand in the mapping."""

from __future__ import annotations

from runs.engine.plan import map_input

DATA = {"message": "hi", "channel": "#releases", "n": 2, "input": {"message": "hi"}}


def test_an_operation_is_evaluated_and_a_literal_kept():
    mapped = map_input({"text": {"var": "message"}, "table": "leads", "limit": 3}, {}, DATA)
    assert mapped == {"text": "hi", "table": "leads", "limit": 3}


def test_operations_nested_in_an_object_are_evaluated_too():
    mapping = {
        "table": "announcements",
        "data": {"message": {"var": "message"}, "channel": {"var": "channel"}, "kind": "note"},
    }
    assert map_input(mapping, {}, DATA) == {
        "table": "announcements",
        "data": {"message": "hi", "channel": "#releases", "kind": "note"},
    }


def test_operations_in_a_list_are_evaluated_and_an_object_with_an_unknown_key_is_literal():
    mapping = {"items": [{"var": "message"}, {"+": [{"var": "n"}, 1]}], "meta": {"note": "x"}}
    assert map_input(mapping, {}, DATA) == {"items": ["hi", 3], "meta": {"note": "x"}}


def test_without_a_mapping_the_schemas_properties_are_taken_from_the_data():
    schema = {"properties": {"message": {}, "missing": {}}}
    assert map_input({}, schema, DATA) == {"message": "hi"}
