"""The field-by-field difference of two definitions (designer/diff.py): pure, no database."""

from __future__ import annotations

import copy
import time

import pytest

from designer import diff
from designer.diff import definition_diff, path_words, preview, same, text_diff
from tests.factories import definition


def agent() -> dict:
    """A definition as the exchange format writes it, with children, steps and a tool."""
    data = definition(
        "researcher",
        "AGENT",
        children=[
            {"child_id": "search", "relationship": "SEQUENTIAL"},
            {"child_id": "summarise", "relationship": "SEQUENTIAL"},
        ],
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [
                    {"step_id": "step-001", "order": 1, "name": "Search", "required": True},
                    {"step_id": "step-002", "order": 2, "name": "Summarise", "required": True},
                ],
            }
        },
        capabilities={"tools": [{"tool_id": "web_search", "permissions": "READ"}]},
    )
    data["metadata"].update(version="1.0.0", updated_at="2026-01-01T00:00:00Z")
    data["identity"]["persona"]["system_prompt"] = (
        "You are a careful researcher who reads every source twice and cites each one."
    )
    return data


def by_label(result: diff.Diff) -> dict[str, diff.Change]:
    return {change.label: change for change in result.changes}


def test_the_same_definition_has_no_change_and_every_section_collapsed():
    result = definition_diff(agent(), agent())
    assert result.changes == []
    assert result.sections and not any(section.changed for section in result.sections)
    assert result.counts == {"changed": 0, "added": 0, "removed": 0, "other": 0}


def test_lifecycle_fields_are_not_changes():
    new = agent()
    new["metadata"].update(version="1.0.1", updated_at="2026-02-02T00:00:00Z", status="DRAFT")
    assert definition_diff(agent(), new).changes == []


def test_a_changed_field_is_named_by_its_path_in_the_designers_words():
    new = agent()
    new["governance"]["execution_limits"]["max_recursion_depth"] = 3
    new["identity"]["display_name"] = "Researcher"
    changes = by_label(definition_diff(agent(), new))
    depth = changes["Governance › Execution limits › Max recursion depth"]
    assert (depth.kind, depth.before, depth.after) == ("changed", "5", "3")
    assert changes["Identity › Display name"].kind == "added"
    governance = next(s for s in definition_diff(agent(), new).sections if s.key == "governance")
    assert governance.title == "Governance" and governance.changed


def test_children_steps_and_tools_are_matched_by_id_not_position():
    new = agent()
    children = new["hierarchy"]["children"]
    children.reverse()  # summarise first now
    children[0]["relationship"] = "PARALLEL"
    new["planning"]["static_plan"]["steps"][1]["name"] = "Write the summary"
    new["capabilities"]["tools"].insert(0, {"tool_id": "fetch_url", "permissions": "READ"})
    result = definition_diff(agent(), new)
    changes = by_label(result)

    relationship = changes["Children › summarise › Relationship"]
    assert (relationship.before, relationship.after) == ("SEQUENTIAL", "PARALLEL")
    order = changes["Children › Order"]
    assert (order.kind, order.before, order.after) == (
        "reordered",
        "search, summarise",
        "summarise, search",
    )
    assert changes["Plan › step-002 › Name"].after == "Write the summary"
    assert changes["Tools › fetch_url"].kind == "added"
    # Matched by position, the reversal would read as both children changing their id.
    assert not any("Child" in label.split(" › ")[-1] for label in changes)
    assert "Tools › web_search" not in changes
    assert result.counts == {"changed": 2, "added": 1, "removed": 0, "other": 1}


def test_a_removed_child_and_step_are_removed_whole():
    new = agent()
    del new["hierarchy"]["children"][1]
    del new["planning"]["static_plan"]["steps"][0]
    changes = by_label(definition_diff(agent(), new))
    assert changes["Children › summarise"].kind == "removed"
    assert '"relationship": "SEQUENTIAL"' in changes["Children › summarise"].before
    assert changes["Plan › step-001"].kind == "removed"


def test_lists_without_ids_are_compared_by_position_counted_from_one():
    old = {"identity": {"persona": {"behavioral_constraints": ["Be brief", "Cite"]}}}
    new = {"identity": {"persona": {"behavioral_constraints": ["Be brief", "Cite sources", "No"]}}}
    changes = by_label(definition_diff(old, new))
    assert changes["Identity › Persona › Behavioral constraints › 2"].after == "Cite sources"
    assert changes["Identity › Persona › Behavioral constraints › 3"].kind == "added"


def test_an_id_used_twice_is_told_apart_by_its_occurrence():
    old = {"hierarchy": {"children": [{"child_id": "a"}, {"child_id": "a", "order": 1}]}}
    new = copy.deepcopy(old)
    new["hierarchy"]["children"][1]["order"] = 2
    assert [c.label for c in definition_diff(old, new).changes] == ["Children › a #2 › Order"]


def test_a_flag_that_became_a_number_changed():
    # True == 1 in Python; in a definition they mean different things.
    old = {"governance": {"x": True}}
    new = {"governance": {"x": 1}}
    change = definition_diff(old, new).changes[0]
    assert (change.before, change.after) == ("true", "1")


def test_long_text_is_diffed_word_by_word_inline():
    new = agent()
    new["identity"]["persona"]["system_prompt"] = (
        "You are a careful analyst who reads every source twice and cites each one."
    )
    change = by_label(definition_diff(agent(), new))["Identity › Persona › System prompt"]
    assert change.before == change.after == ""  # shown inline instead
    assert [(s.op, s.text) for s in change.segments] == [
        ("equal", "You are a careful "),
        ("delete", "researcher "),
        ("insert", "analyst "),
        ("equal", "who reads every source twice and cites each one."),
    ]


def test_text_with_lines_is_diffed_line_by_line():
    segments, note, _ = text_diff("one\ntwo\nthree\n", "one\n2\nthree\nfour\n")
    assert note == ""
    assert [(s.op, s.text) for s in segments] == [
        ("equal", "one\n"),
        ("delete", "two\n"),
        ("insert", "2\n"),
        ("equal", "three\n"),
        ("insert", "four\n"),
    ]


def test_long_unchanged_text_between_edits_is_cut_to_its_ends():
    middle = " ".join(f"word{n}" for n in range(400)) + " "
    segments, _, _ = text_diff(f"start {middle}end", f"begin {middle}finish")
    ops = [s.op for s in segments]
    assert ops == ["delete", "insert", "equal", "skip", "equal", "delete", "insert"]
    assert "characters unchanged" in segments[3].text
    assert sum(len(s.text) for s in segments) < 600


def test_a_huge_text_is_too_long_to_compare_inline_and_answers_fast():
    huge = "word " * 400_000  # 2 MB
    # An edit in the middle of two different huge texts: nothing shared to set aside.
    old, new = "a" + huge + "a", "b" + huge[::-1] + "b"
    started = time.perf_counter()
    change = definition_diff({"identity": {"p": old}}, {"identity": {"p": new}}).changes[0]
    assert time.perf_counter() - started < 2
    assert change.note.startswith("too long to compare inline")
    assert change.segments == ()
    assert len(change.before) < diff.PREVIEW + 40 and "more characters" in change.before


def test_a_small_edit_of_a_huge_text_is_still_shown_inline():
    huge = "word " * 400_000
    started = time.perf_counter()
    change = definition_diff({"i": {"p": huge}}, {"i": {"p": huge + "more"}}).changes[0]
    assert time.perf_counter() - started < 2
    assert [s.op for s in change.segments] == ["skip", "equal", "insert"]
    assert change.segments[-1].text == "more"


def test_repetitive_text_that_would_take_difflib_minutes_is_refused_in_time():
    # 5,000 words of three kinds: difflib without limits takes minutes on this.
    old = " ".join("ab "[i % 3] for i in range(5_000))
    new = " ".join("ba "[i % 3] for i in range(5_000))
    started = time.perf_counter()
    change = definition_diff({"i": {"p": old}}, {"i": {"p": new}}).changes[0]
    assert time.perf_counter() - started < 2
    assert change.note.startswith("too long to compare inline")


def test_the_text_budget_of_one_comparison_is_shared_by_all_its_fields():
    words = [f"w{i}" for i in range(150)]
    old = " ".join(words[i % 150] for i in range(1_400))
    new = " ".join(words[(i * 7) % 150] for i in range(1_400))
    many = 40
    started = time.perf_counter()
    result = definition_diff(
        {"i": {f"p{k}": old for k in range(many)}}, {"i": {f"p{k}": new for k in range(many)}}
    )
    assert time.perf_counter() - started < 5
    inline = [change for change in result.changes if change.segments]
    refused = [change for change in result.changes if change.note]
    assert 1 <= len(inline) < many and len(inline) + len(refused) == many


def test_a_deep_definition_is_compared_down_to_the_cap_and_no_further():
    def nested(levels: int, leaf: int) -> dict:
        value: dict = {"leaf": leaf}
        for _ in range(levels):
            value = {"n": value}
        return value

    started = time.perf_counter()
    result = definition_diff({"identity": nested(50_000, 1)}, {"identity": nested(50_000, 2)})
    assert time.perf_counter() - started < 5
    [change] = result.changes
    assert change.kind == "not_compared"
    assert f"nested deeper than {diff.MAX_DEPTH} levels" in change.note
    assert len(change.labels) == diff.MAX_DEPTH
    assert len(change.before) < diff.PREVIEW + 10
    # And two equal deep values are the same, without RecursionError.
    assert definition_diff({"i": nested(50_000, 1)}, {"i": nested(50_000, 1)}).changes == []


def test_a_wide_definition_lists_at_most_max_changes_and_says_so():
    old = {"i": {str(n): n for n in range(100_000)}}
    new = {"i": {str(n): n + 1 for n in range(100_000)}}
    started = time.perf_counter()
    result = definition_diff(old, new)
    assert time.perf_counter() - started < 3
    assert result.truncated
    assert result.total == diff.MAX_CHANGES


def test_hostile_text_is_kept_as_text_with_nul_shown():
    old = {"identity": {"name": "a"}}
    new = {"identity": {"name": "<script>alert(1)</script>\x00", "x\x00<b>": 1}}
    changes = by_label(definition_diff(old, new))
    # Escaping is the template's job: the text comes back as it is, NUL made visible.
    assert changes["Identity › Name"].after == "<script>alert(1)</script>\u2400"
    assert "Identity › X\u2400<b>" in changes


@pytest.mark.parametrize(
    ("before", "after"),
    [(None, {"a": 1}), ([1, 2], "text"), ("x", "y"), ({"a": [1]}, {"a": [1, 2]})],
)
def test_definitions_that_are_not_objects_are_compared_as_values(before, after):
    result = definition_diff(before, after)
    assert result.total >= 1


def test_a_preview_is_compact_json_cut_at_its_limit():
    assert preview({"a": [1, None, True], "b": "x"}) == '{"a": [1, null, true], "b": "x"}'
    assert preview(None) == "empty"
    long = preview(list(range(10_000)), limit=50)
    assert len(long) <= 52 and long.endswith("…")


def test_same_is_deep_equality_without_recursion():
    assert same({"a": [1, {"b": "c"}]}, {"a": [1, {"b": "c"}]})
    assert not same({"a": [1, {"b": "c"}]}, {"a": [1, {"b": "d"}]})
    assert not same([1], [1, 2]) and not same({"a": 1}, {"b": 1}) and not same(0, False)


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("hierarchy.children[0].child_id", "Children › 1 › Child"),
        ("planning.static_plan.steps[2].target.tool_id", "Plan › 3 › Target › Tool"),
        ("identity.persona.system_prompt", "Identity › Persona › System prompt"),
        ("governance.cost_controls.max_cost_usd", "Governance › Cost controls › Max cost (USD)"),
        ("", ""),
    ],
)
def test_a_problems_path_reads_as_the_diff_names_the_field(path, words):
    assert path_words(path) == words
