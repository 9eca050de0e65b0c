"""runs/engine/storable.py: what a model or a tool produced, with the text PostgreSQL cannot
store (NUL, lone surrogates) replaced by U+FFFD in values and keys; a clean value is handed
back as it is."""

from __future__ import annotations

from runs.engine.storable import storable


def test_nul_and_lone_surrogates_become_the_replacement_character_anywhere():
    value = {"a\x00": ["x\x00y", {"deep": "\udfff"}], "n": 1, "t": ("\x00",)}
    assert storable(value) == {
        "a\ufffd": ["x\ufffdy", {"deep": "\ufffd"}],
        "n": 1,
        "t": ("\ufffd",),
    }


def test_numbers_json_has_not_become_their_names():
    value = {"big": float("inf"), "small": [float("-inf")], "odd": float("nan"), "ok": 1e300}
    assert storable(value) == {"big": "Infinity", "small": ["-Infinity"], "odd": "NaN", "ok": 1e300}


def test_a_clean_value_is_the_same_object():
    value = {"text": "Grüße 👋", "list": [1, 2.5, None, True, {"k": "v"}]}
    assert storable(value) is value
    assert storable("plain") == "plain"
