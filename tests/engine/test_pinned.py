"""Pinned definitions kept once per process: equal parts shared between entities' definitions,
each definition still equal to what was stored."""

from __future__ import annotations

import copy
import json

import pytest

from runs.engine import pinned


def definition(name: str, **changes: object) -> dict:
    base = {
        "identity": {"name": name, "type": "ACTION"},
        "governance": {"autonomy": "HIGH", "limits": {"max_llm_calls": 5, "max_cost": 1.5}},
        "planning": {"mode": "STATIC", "steps": [{"key": "a", "type": "THOUGHT"}]},
        "io_contract": {
            "input": {"schema": {"type": "object"}},
            "output": {"schema": {"type": "object", "required": ["answer"]}},
        },
    }
    base.update(changes)
    return base


@pytest.fixture(autouse=True)
def fresh_table(monkeypatch):
    monkeypatch.setattr(pinned, "_SHARED", {})


def test_equal_sections_of_two_definitions_are_one_object_and_each_stays_equal():
    first, second = definition("left"), definition("right")
    kept_first, kept_second = pinned.shared(copy.deepcopy(first)), pinned.shared(second)

    assert kept_first == first
    assert kept_second == definition("right")
    assert kept_first["governance"] is kept_second["governance"]
    assert kept_first["planning"] is kept_second["planning"]
    assert kept_first["identity"] is not kept_second["identity"]  # the names differ
    # A section that differs still shares its equal parts.
    assert kept_first["io_contract"] is kept_second["io_contract"]
    third = pinned.shared(
        definition(
            "third",
            io_contract={
                "input": {"schema": {"type": "object", "required": ["topic"]}},
                "output": {"schema": {"type": "object", "required": ["answer"]}},
            },
        )
    )
    assert third["io_contract"] is not kept_first["io_contract"]
    assert third["io_contract"]["output"] is kept_first["io_contract"]["output"]


def test_values_equal_in_python_but_not_in_json_are_not_shared():
    ones = [pinned.shared(definition("n", limits={"n": value})) for value in (1, 1.0, True)]
    assert [json.dumps(d["limits"]) for d in ones] == ['{"n": 1}', '{"n": 1.0}', '{"n": true}']
    assert len({id(d["limits"]) for d in ones}) == 3


def test_a_definition_that_is_not_json_is_kept_as_it_is():
    odd = {"identity": {"name": "odd", "when": object()}, "governance": {"autonomy": "HIGH"}}
    kept = pinned.shared(odd)
    assert kept["identity"] == odd["identity"]
    assert kept["identity"]["when"] is odd["identity"]["when"]
    assert kept["governance"] == {"autonomy": "HIGH"}
    assert pinned.shared(["not", "a", "definition"]) == ["not", "a", "definition"]


def test_the_table_starts_again_once_full_and_what_was_shared_stays_whole(monkeypatch):
    monkeypatch.setattr(pinned, "SHARED_KEPT", 3)
    kept = [pinned.shared(definition(f"n{index}")) for index in range(6)]
    assert len(pinned._SHARED) <= 3 + 8  # emptied before a definition once past the limit
    assert all(d == definition(f"n{index}") for index, d in enumerate(kept))
