"""Context engineering: parts in priority order within a token budget; large objects stored
once and passed inline, by reference or as a summary."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest

from runs.engine.context import (
    LARGE_OBJECT_BYTES,
    TRUNCATION_MARK,
    ContextPart,
    InMemoryArtifactStore,
    artifact,
    build_context,
    canonical_text,
    default_summary,
    is_large,
    reference,
    truncate_to_tokens,
    with_artifacts,
)

pytestmark = pytest.mark.smoke


def words(text: str) -> int:
    """A token counter: one token per word, as a tokenizer roughly does."""
    return len(text.split())


def chars(text: str) -> int:
    return math.ceil(len(text) / 4)


PRIORITY = ["SYSTEM_PROMPT", "USER_INPUT", "STATIC_PLAN", "DYNAMIC_PLAN", "TOOL_RESULTS", "MEMORY"]


def text(count: int, word: str = "w") -> str:
    return " ".join([word] * count)


def test_everything_fits_in_priority_order() -> None:
    parts = {"MEMORY": text(5), "SYSTEM_PROMPT": text(10), "USER_INPUT": text(3)}
    kept, dropped = build_context(parts, PRIORITY, 100, words)
    assert [(p.kind, p.tokens, p.truncated) for p in kept] == [
        ("SYSTEM_PROMPT", 10, False),
        ("USER_INPUT", 3, False),
        ("MEMORY", 5, False),
    ]
    assert dropped == []


def test_the_lowest_priority_parts_are_dropped_and_the_straddling_one_cut() -> None:
    parts = {
        "SYSTEM_PROMPT": text(10, "sys"),
        "USER_INPUT": text(10, "user"),
        "TOOL_RESULTS": text(30, "tool"),
        "MEMORY": text(10, "mem"),
    }
    kept, dropped = build_context(parts, PRIORITY, 40, words)
    assert [p.kind for p in kept] == ["SYSTEM_PROMPT", "USER_INPUT", "TOOL_RESULTS"]
    cut = kept[-1]
    assert cut.truncated and cut.text.endswith(TRUNCATION_MARK)
    assert cut.tokens <= 20 and cut.text.startswith("tool tool")
    assert sum(p.tokens for p in kept) <= 40
    assert dropped == ["MEMORY"]


def test_a_part_of_exactly_the_remaining_budget_is_kept_whole() -> None:
    kept, dropped = build_context(
        {"SYSTEM_PROMPT": text(5), "MEMORY": text(5)}, PRIORITY, 10, words
    )
    assert [p.truncated for p in kept] == [False, False] and dropped == []


def test_a_part_that_cannot_fit_even_cut_is_dropped() -> None:
    mark_tokens = words("w" + TRUNCATION_MARK)
    parts = {"SYSTEM_PROMPT": text(10), "USER_INPUT": text(50), "MEMORY": text(1)}
    kept, dropped = build_context(parts, PRIORITY, 10 + mark_tokens - 1, words)
    assert [p.kind for p in kept] == ["SYSTEM_PROMPT"]
    assert dropped == ["USER_INPUT", "MEMORY"]


def test_kinds_not_in_the_priority_come_last() -> None:
    parts = {"EXTRA": text(3), "MEMORY": text(3), "SYSTEM_PROMPT": text(3)}
    kept, dropped = build_context(parts, ["SYSTEM_PROMPT", "MEMORY"], 7, words)
    assert [p.kind for p in kept] == ["SYSTEM_PROMPT", "MEMORY"]
    assert dropped == ["EXTRA"]


def test_empty_parts_are_neither_kept_nor_dropped() -> None:
    kept, dropped = build_context({"SYSTEM_PROMPT": "", "MEMORY": "m"}, PRIORITY, 0, words)
    assert kept == [] and dropped == ["MEMORY"]


def test_truncation_keeps_the_longest_start_that_fits() -> None:
    source = "abcdefghij" * 40  # 400 characters, 100 tokens by chars()
    cut = truncate_to_tokens(source, 20, chars)
    assert cut is not None and chars(cut) <= 20
    longer = source[: len(cut) - len(TRUNCATION_MARK) + 1] + TRUNCATION_MARK
    assert chars(longer) > 20
    assert truncate_to_tokens(source, 1, chars) is None


def test_it_uses_the_injected_counter_only() -> None:
    calls: list[str] = []

    def counting(value: str) -> int:
        calls.append(value)
        return len(value)

    kept, _ = build_context({"SYSTEM_PROMPT": "hello"}, PRIORITY, 100, counting)
    assert kept == [ContextPart("SYSTEM_PROMPT", "hello", 5)] and calls == ["hello"]


# -- artifacts -----------------------------------------------------------------------------


SMALL = {"title": "Engineer"}
LARGE = {"resume": "x" * (LARGE_OBJECT_BYTES + 1)}


def test_objects_up_to_10_kb_pass_as_they_are() -> None:
    store = InMemoryArtifactStore()
    at_limit = "y" * LARGE_OBJECT_BYTES
    for value in (SMALL, at_limit, 3, None):
        for mode in ("INLINE", "REFERENCE", "SUMMARY"):
            assert artifact(value, mode, store_large_objects=True, store=store) == value
    assert store.items == {}


def test_size_is_measured_in_utf8_bytes_of_the_canonical_text() -> None:
    assert not is_large("é" * (LARGE_OBJECT_BYTES // 2))
    assert is_large("é" * (LARGE_OBJECT_BYTES // 2 + 1))
    assert canonical_text({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'


def test_reference_mode_stores_once_and_passes_a_stable_reference_with_a_preview() -> None:
    store = InMemoryArtifactStore()
    first = artifact(LARGE, "REFERENCE", store_large_objects=True, store=store)
    again = artifact(dict(LARGE), "REFERENCE", store_large_objects=True, store=store)
    digest = hashlib.sha256(canonical_text(LARGE).encode()).hexdigest()
    assert first == again
    assert first["artifact"] == f"artifact://sha256/{digest}" == reference(canonical_text(LARGE))
    assert first["bytes"] == len(canonical_text(LARGE))
    assert first["preview"].startswith('{"resume":"xxx') and len(first["preview"]) <= 280
    assert store.puts == 1 and json.loads(store.get(digest) or "") == LARGE


def test_inline_mode_stores_the_object_and_passes_it_whole() -> None:
    store = InMemoryArtifactStore()
    assert artifact(LARGE, "INLINE", store_large_objects=True, store=store) == LARGE
    assert store.puts == 1


def test_summary_mode_passes_a_summary_with_the_reference() -> None:
    store = InMemoryArtifactStore()
    seen: list[str] = []

    def summarize(value: str) -> str:
        seen.append(value)
        return "a long resume"

    passed = artifact(LARGE, "SUMMARY", store_large_objects=True, summarize=summarize, store=store)
    assert passed == {
        "artifact": reference(canonical_text(LARGE)),
        "bytes": len(canonical_text(LARGE)),
        "summary": "a long resume",
    }
    assert seen == [canonical_text(LARGE)]


def test_the_default_summary_describes_the_shape() -> None:
    assert default_summary(canonical_text(LARGE)).startswith("an object with 1 keys (resume)")
    assert default_summary(json.dumps(list(range(5)))).startswith("a list of 5 items")
    assert default_summary("plain words").startswith("a text of 11 characters")


def test_without_storing_a_reference_has_nothing_to_point_at() -> None:
    store = InMemoryArtifactStore()
    assert artifact(LARGE, "REFERENCE", store_large_objects=False, store=store) == LARGE
    summary = artifact(LARGE, "SUMMARY", store_large_objects=False, store=store)
    assert "artifact" not in summary and summary["summary"]
    assert artifact(LARGE, "REFERENCE", store_large_objects=True, store=None) == LARGE
    assert store.items == {}


def test_with_artifacts_applies_the_entitys_handling_to_each_value() -> None:
    store = InMemoryArtifactStore()
    data: dict[str, Any] = {"job": SMALL, "resume": LARGE["resume"]}
    passed = with_artifacts(data, {}, store=store)  # the defaults: store, REFERENCE
    assert passed["job"] == SMALL
    assert passed["resume"]["artifact"].startswith("artifact://sha256/")
    inline = with_artifacts(data, {"artifact_reference_mode": "INLINE"}, store=store)
    assert inline == data and store.puts == 1
