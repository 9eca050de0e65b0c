"""The field-by-field difference between two entity definitions, in the designer's words.

Pure functions over two definitions in the exchange format (`EntityVersion.definition`), so
the versions page and its tests need no database. Definitions are hostile input (they come
from imports and the API): the walk is iterative, stops at `MAX_DEPTH` levels and after
`MAX_NODES` values, lists at most `MAX_CHANGES` changes, diffs at most `MAX_TEXT` characters
of text inline, and every value shown is cut to a preview. Nothing here escapes HTML: the
templates do, as they do everything else.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

# Bounds of the work one comparison may do; a definition the product saved is far inside
# them (it refuses nesting deeper than 64 levels), an imported or forged one may not be.
MAX_DEPTH = 24
MAX_NODES = 20_000
MAX_CHANGES = 400
# Text is diffed inline by difflib, whose work grows with the cube of the pieces (words or
# lines) on a repetitive text: 500 pieces a side took 4 s, with autojunk off. So pieces are
# compared with autojunk on, at most MAX_PIECES a side (worst found: 0.3 s), at most
# MAX_TEXT characters a side once the start and end both share are set aside, and the pieces
# compared in one whole comparison are capped (their products summed) by TEXT_BUDGET.
# The price of autojunk: a piece making up more than 1 % of a long text never starts a match,
# so a very repetitive text may show as replaced whole rather than edited.
MAX_TEXT = 20_000
MAX_PIECES = 1_500
TEXT_BUDGET = 3 * MAX_PIECES * MAX_PIECES
# A value is shown up to this many characters.
PREVIEW = 600
# Text at least this long, or spanning lines, is diffed inline rather than shown whole twice.
INLINE_FROM = 60
# Unchanged text between two edits is shown up to this many characters.
KEEP_EQUAL = 160

# Lifecycle fields every save changes (or a restore keeps as they are): not the content a
# version covers (entities.versioning.content leaves out the same ones).
LIFECYCLE: frozenset[tuple[str, ...]] = frozenset(
    {
        ("metadata", "id"),
        ("metadata", "version"),
        ("metadata", "created_at"),
        ("metadata", "updated_at"),
        ("metadata", "created_by"),
        ("metadata", "status"),
        ("hierarchy", "is_atomic"),
        ("hierarchy", "composition_depth"),
    }
)

# The sections of a definition, in the designer's words and the editor's order.
SECTIONS: dict[str, str] = {
    "metadata": "Metadata",
    "identity": "Identity",
    "hierarchy": "Hierarchy",
    "logic_gate": "Model and reasoning",
    "planning": "Planning",
    "capabilities": "Capabilities",
    "governance": "Governance",
    "io_contract": "Inputs and outputs",
    "observability": "Observability",
    "metadata_extensions": "Extensions",
}

# Where a path reads better shortened: the children are "Children", not "Hierarchy ›
# Children"; the static plan's steps are "Plan".
_PREFIXES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("hierarchy", "children"): ("Children",),
    ("planning", "static_plan", "steps"): ("Plan",),
    ("capabilities", "tools"): ("Tools",),
}

# Field names whose plain rewording (underscores to spaces, first letter up) reads wrong.
_WORDS: dict[str, str] = {
    "io_contract": "Inputs and outputs",
    "logic_gate": "Model and reasoning",
    "metadata_extensions": "Extensions",
    "child_id": "Child",
    "child_type": "Child type",
    "entity_id": "Target entity",
    "tool_id": "Tool",
    "step_id": "Step id",
    "hitl_checkpoints": "Human checkpoints",
    "max_cost_usd": "Max cost (USD)",
    "cumulative_cost_usd": "Cumulative cost (USD)",
    "alert_threshold_usd": "Alert threshold (USD)",
    "timeout_ms": "Timeout (ms)",
    "ttl_seconds": "Time to live (s)",
    "top_p": "Top p",
    "pii_handling": "PII handling",
    "ui_hints": "UI hints",
    "llm_calls": "LLM calls",
    "max_llm_calls": "Max LLM calls",
}

# Keys that identify the items of a list of objects, tried in this order: children by child,
# plan steps by step, tools by tool (the exchange format's `tool_id`), anything else by `id`.
ID_KEYS = ("child_id", "step_id", "tool_id", "id")

Kind = Literal["changed", "added", "removed", "reordered", "not_compared"]


@dataclass(frozen=True)
class Segment:
    """A run of text that both sides share (`equal`), or that only the old (`delete`) or
    the new (`insert`) has."""

    op: Literal["equal", "insert", "delete", "skip"]
    text: str


@dataclass(frozen=True)
class Change:
    """One difference, at `path` (raw keys and ids) read as `labels`."""

    kind: Kind
    path: tuple[str, ...]
    labels: tuple[str, ...]
    before: str = ""
    after: str = ""
    # An inline diff of long text; empty when the values are shown side by side.
    segments: tuple[Segment, ...] = ()
    # Why the values are not compared in detail (too deep, too long), in words.
    note: str = ""

    @property
    def label(self) -> str:
        return " › ".join(self.labels)

    @property
    def word(self) -> str:
        """The kind as the page says it: `not compared`."""
        return self.kind.replace("_", " ")


@dataclass
class Section:
    """One top-level section of the definition and its changes (empty: unchanged)."""

    key: str
    title: str
    changes: list[Change] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)


@dataclass
class Diff:
    """Every section of either definition, in the editor's order, with the changes found."""

    sections: list[Section]
    # The walk stopped early (too many values or changes): what is listed is not everything.
    truncated: bool = False

    @property
    def changes(self) -> list[Change]:
        return [change for section in self.sections for change in section.changes]

    @property
    def counts(self) -> dict[str, int]:
        found = Counter(change.kind for change in self.changes)
        return {kind: found.get(kind, 0) for kind in ("changed", "added", "removed")} | {
            "other": found.get("reordered", 0) + found.get("not_compared", 0)
        }

    @property
    def total(self) -> int:
        return len(self.changes)

    @property
    def unchanged(self) -> list[str]:
        """The titles of the sections without a change (shown collapsed, as one line)."""
        return [section.title for section in self.sections if not section.changed]


def definition_diff(
    before: Any, after: Any, *, ignore: frozenset[tuple[str, ...]] = LIFECYCLE
) -> Diff:
    """How `after` differs from `before`, section by section. Both are definitions in the
    exchange format, but anything JSON-like is taken: a value that is not an object is
    compared as one section."""
    walk = _Walk(ignore)
    if not isinstance(before, dict) or not isinstance(after, dict):
        section = Section("", "Definition", list(walk.compare(before, after, (), (), 0)))
        return Diff([section], truncated=walk.truncated)
    keys = _ordered_keys(before, after, first=SECTIONS)
    sections = []
    for key in keys:
        section = Section(key, SECTIONS.get(key) or label_of(key))
        if not walk.truncated:
            section.changes = list(
                walk.compare(
                    before.get(key, _MISSING), after.get(key, _MISSING), (key,), (section.title,), 1
                )
            )
        sections.append(section)
    return Diff(sections, truncated=walk.truncated)


class _Missing:
    """The value of a key one side does not have."""

    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


class _Walk:
    """One comparison: carries the budget of values visited and changes listed."""

    def __init__(self, ignore: frozenset[tuple[str, ...]]):
        self.ignore = ignore
        self.nodes = 0
        self.listed = 0
        self.truncated = False
        self.text_budget = TEXT_BUDGET

    def compare(
        self, old: Any, new: Any, path: tuple[str, ...], labels: tuple[str, ...], depth: int
    ) -> Iterator[Change]:
        # Recursion is bounded by MAX_DEPTH (a few dozen frames), so it cannot exhaust the
        # stack whatever the input's depth; beneath it, sameness is decided iteratively.
        if path in self.ignore or self.truncated:
            return
        self.nodes += 1
        if self.nodes > MAX_NODES or self.listed >= MAX_CHANGES:
            self.truncated = True
            return
        labels = _PREFIXES.get(path, labels)
        if old is _MISSING and new is _MISSING:
            return
        if old is _MISSING:
            yield self._listed(Change("added", path, labels, after=preview(new)))
            return
        if new is _MISSING:
            yield self._listed(Change("removed", path, labels, before=preview(old)))
            return
        if type(old) is not type(new) or not isinstance(old, dict | list):
            if not same(old, new):
                yield self._listed(self._value_change(old, new, path, labels))
            return
        if depth >= MAX_DEPTH:
            if not same(old, new):
                yield self._listed(
                    Change(
                        "not_compared",
                        path,
                        labels,
                        before=preview(old),
                        after=preview(new),
                        note=f"nested deeper than {MAX_DEPTH} levels: not compared field by field",
                    )
                )
            return
        if isinstance(old, dict):
            for key in _ordered_keys(old, new):
                if self.truncated:
                    return
                yield from self.compare(
                    old.get(key, _MISSING),
                    new.get(key, _MISSING),
                    (*path, key),
                    (*labels, label_of(key)),
                    depth + 1,
                )
            return
        yield from self._compare_lists(old, new, path, labels, depth)

    def _compare_lists(
        self, old: list, new: list, path: tuple[str, ...], labels: tuple[str, ...], depth: int
    ) -> Iterator[Change]:
        id_key = _id_key(old, new)
        if id_key is None:
            # Positions, counted from 1 as people count.
            for index in range(max(len(old), len(new))):
                if self.truncated:
                    return
                yield from self.compare(
                    old[index] if index < len(old) else _MISSING,
                    new[index] if index < len(new) else _MISSING,
                    (*path, str(index + 1)),
                    (*labels, str(index + 1)),
                    depth + 1,
                )
            return
        old_items, new_items = _keyed(old, id_key), _keyed(new, id_key)
        for key in _ordered_keys(old_items, new_items, first=new_items):
            if self.truncated:
                return
            yield from self.compare(
                old_items.get(key, _MISSING),
                new_items.get(key, _MISSING),
                (*path, key),
                (*labels, short(key, 60)),
                depth + 1,
            )
        kept = set(old_items) & set(new_items)
        old_order = [key for key in old_items if key in kept]
        new_order = [key for key in new_items if key in kept]
        if old_order != new_order and not self.truncated:
            yield self._listed(
                Change(
                    "reordered",
                    (*path, "#order"),
                    (*labels, "Order"),
                    before=short(", ".join(old_order), PREVIEW),
                    after=short(", ".join(new_order), PREVIEW),
                )
            )

    def _value_change(
        self, old: Any, new: Any, path: tuple[str, ...], labels: tuple[str, ...]
    ) -> Change:
        if isinstance(old, str) and isinstance(new, str) and _is_long(old, new):
            segments, note, cost = text_diff(old, new, budget=self.text_budget)
            self.text_budget -= cost
            if segments:
                return Change("changed", path, labels, segments=segments)
            return Change(
                "changed", path, labels, before=preview(old), after=preview(new), note=note
            )
        return Change("changed", path, labels, before=preview(old), after=preview(new))

    def _listed(self, change: Change) -> Change:
        self.listed += 1
        return change


def _is_long(old: str, new: str) -> bool:
    return max(len(old), len(new)) >= INLINE_FROM or "\n" in old or "\n" in new


def _ordered_keys(old: dict, new: dict, *, first: Iterable[str] = ()) -> list[str]:
    """The keys of both, `first`'s known ones first, then the new side's order, then keys
    only the old side has."""
    seen: dict[str, None] = {}
    for key in first:
        if key in old or key in new:
            seen[key] = None
    for key in (*new, *old):
        seen.setdefault(key, None)
    return [key for key in seen if isinstance(key, str)]


def _id_key(old: list, new: list) -> str | None:
    """The id key every item of both lists carries as text or a number, if there is one."""
    items = [*old, *new]
    if not items or not all(isinstance(item, dict) for item in items):
        return None
    for key in ID_KEYS:
        if all(isinstance(item.get(key), str | int) for item in items):
            return key
    return None


def _keyed(items: list[dict], id_key: str) -> dict[str, Any]:
    """The items by their id; an id used twice is told apart by its occurrence (`a #2`)."""
    seen: Counter[str] = Counter()
    keyed: dict[str, Any] = {}
    for item in items:
        ident = str(item[id_key])
        seen[ident] += 1
        keyed[ident if seen[ident] == 1 else f"{ident} #{seen[ident]}"] = item
    return keyed


_PATH_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def path_words(path: str) -> str:
    """A validation problem's path (`hierarchy.children[0].child_id`) in the designer's
    words, as the diff names the same field (`Children › 1 › Child`)."""
    parts: list[str | int] = [
        int(index) if index else key for index, key in _PATH_PART.findall(path[:500])
    ]
    keys = tuple(part for part in parts if isinstance(part, str))
    labels: list[str] = []
    rest = parts
    for prefix, words in _PREFIXES.items():
        if keys[: len(prefix)] == prefix and parts[: len(prefix)] == list(prefix):
            labels, rest = list(words), parts[len(prefix) :]
            break
    else:
        if parts and isinstance(parts[0], str):
            labels, rest = [SECTIONS.get(parts[0]) or label_of(parts[0])], parts[1:]
    labels += [str(part + 1) if isinstance(part, int) else label_of(part) for part in rest]
    return " › ".join(labels)


def label_of(key: Any) -> str:
    """A field name in the designer's words: `system_prompt` → `System prompt`."""
    key = str(key)
    if key in _WORDS:
        return _WORDS[key]
    words = short(key.replace("_", " ").strip(), 60)
    return words[:1].upper() + words[1:] if words else "(empty name)"


def same(old: Any, new: Any) -> bool:
    """Deep equality without recursion, so any depth is safe (`==` on nested containers
    recurses in C and ends in RecursionError a few thousand levels down). `True == 1` is
    not sameness here: a flag that became a number changed."""
    pending = [(old, new)]
    while pending:
        a, b = pending.pop()
        if type(a) is not type(b):
            return False
        if isinstance(a, dict):
            if a.keys() != b.keys():
                return False
            pending.extend((a[key], b[key]) for key in a)
        elif isinstance(a, list):
            if len(a) != len(b):
                return False
            pending.extend(zip(a, b, strict=True))
        elif a != b:
            return False
    return True


def visible(text: str) -> str:
    """Text as it can be shown: the NUL character as the symbol for it (browsers drop it)."""
    return text.replace("\x00", "\u2400")


def short(text: str, limit: int) -> str:
    """Text cut to `limit` characters, saying how much was left out."""
    text = visible(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def preview(value: Any, limit: int = PREVIEW) -> str:
    """A compact JSON-like rendering of any value, cut at about `limit` characters, built
    iteratively so a value nested ten thousand levels deep costs `limit` characters of work
    (json.dumps recurses, and would render all of a huge value before it could be cut)."""
    if value is None:
        return "empty"
    if isinstance(value, str):
        return short(value, limit)
    out: list[str] = []
    size = 0
    # A stack of what is left to write: values, and literal text (wrapped in a tuple).
    pending: list[Any] = [value]
    while pending:
        if size > limit:
            return "".join(out)[:limit] + " …"
        item = pending.pop()
        if isinstance(item, tuple):
            piece = item[0]
        elif isinstance(item, dict):
            parts: list[Any] = [("}",)]
            for index, (key, sub) in enumerate(reversed(item.items())):
                parts.append(sub)
                parts.append((f"{_quoted(key)}: ",))
                if index < len(item) - 1:
                    parts.append((", ",))
            pending.extend(parts)
            piece = "{"
        elif isinstance(item, list):
            parts = [("]",)]
            for index, sub in enumerate(reversed(item)):
                parts.append(sub)
                if index < len(item) - 1:
                    parts.append((", ",))
            pending.extend(parts)
            piece = "["
        else:
            piece = _scalar(item)
        out.append(piece)
        size += len(piece)
    text = "".join(out)
    return text if len(text) <= limit else text[:limit] + " …"


def _quoted(text: Any) -> str:
    return '"' + short(str(text), 80).replace('"', '\\"') + '"'


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _quoted(value)
    return short(str(value), 80)


# A word with the spaces after it (one piece, not two: fewer pieces for difflib), and any
# spaces the text starts with.
_WORD = re.compile(r"^\s+|\S+\s*")


def text_diff(
    old: str, new: str, *, budget: int = TEXT_BUDGET
) -> tuple[tuple[Segment, ...], str, int]:
    """An inline diff of two texts: by line when either spans lines, else by word. Empty
    segments and a note in words when the texts are too long to compare inline (or the
    middle would cost more than `budget`); the last value is what the diff cost.

    Only the middle is diffed: the start and end both texts share are set aside first (in
    C, by slicing), widened to whole lines or words, so a one-word edit of a long prompt
    costs little, and a middle longer than MAX_TEXT is refused rather than handed to
    difflib, which is quadratic in the worst case."""
    by_line = "\n" in old or "\n" in new
    cut = "\n" if by_line else " "
    start = _common_prefix(old, new)
    end = _common_suffix(old[start:], new[start:])
    start = old.rfind(cut, 0, start) + 1
    tail = old.find(cut, len(old) - end) if end else -1
    # The texts are the same after `tail` in `old`, and as far from the end in `new`; the
    # line break (or space) itself stays with the line (or word) it ends.
    shared_end = 0 if tail == -1 else len(old) - tail - 1
    old_mid = old[start : len(old) - shared_end]
    new_mid = new[start : len(new) - shared_end]
    too_long = (
        f"too long to compare inline ({len(old):,} and {len(new):,} characters); "
        "the start of each is shown"
    )
    if max(len(old_mid), len(new_mid)) > MAX_TEXT:
        return (), too_long, 0
    old_tokens, new_tokens = _tokens(old_mid, by_line), _tokens(new_mid, by_line)
    cost = len(old_tokens) * len(new_tokens)
    if max(len(old_tokens), len(new_tokens)) > MAX_PIECES or cost > budget:
        return (), too_long, 0
    segments = [Segment("equal", old[:start])]
    matcher = difflib.SequenceMatcher(None, old_tokens, new_tokens, autojunk=True)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            segments.append(Segment("equal", "".join(old_tokens[i1:i2])))
            continue
        segments.append(Segment("delete", "".join(old_tokens[i1:i2])))
        segments.append(Segment("insert", "".join(new_tokens[j1:j2])))
    segments.append(Segment("equal", old[len(old) - shared_end :]))
    return tuple(_shown(_merged(segments))), "", cost


def _tokens(text: str, by_line: bool) -> list[str]:
    return text.splitlines(keepends=True) if by_line else _WORD.findall(text)


def _common_prefix(a: str, b: str) -> int:
    """How many characters `a` and `b` share from the start. Block by block, then a binary
    search in the first block that differs: slice comparisons run in C, and each character
    is copied about once (a loop per character is slow on a megabyte of text)."""
    limit = min(len(a), len(b))
    low = 0
    while low < limit and a[low : low + _BLOCK] == b[low : low + _BLOCK]:
        low += _BLOCK
    if low >= limit:
        return limit
    high = min(low + _BLOCK, limit)
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _common_suffix(a: str, b: str) -> int:
    """How many characters `a` and `b` share at the end (as `_common_prefix`)."""

    def tail(text: str, start: int, stop: int) -> str:
        # The characters `start` to `stop` counted from the end (never wrapping around).
        return text[max(len(text) - stop, 0) : len(text) - start]

    limit = min(len(a), len(b))
    low = 0
    while low < limit and tail(a, low, low + _BLOCK) == tail(b, low, low + _BLOCK):
        low += _BLOCK
    if low >= limit:
        return limit
    high = min(low + _BLOCK, limit)
    while low < high:
        middle = (low + high + 1) // 2
        if tail(a, low, middle) == tail(b, low, middle):
            low = middle
        else:
            high = middle - 1
    return low


_BLOCK = 1 << 16


def _merged(segments: list[Segment]) -> list[Segment]:
    merged: list[Segment] = []
    for segment in segments:
        if not segment.text:
            continue
        if merged and merged[-1].op == segment.op:
            merged[-1] = Segment(segment.op, merged[-1].text + segment.text)
        else:
            merged.append(segment)
    return merged


def _shown(segments: list[Segment]) -> Iterator[Segment]:
    """The segments as shown: long unchanged text between edits cut to its ends; every
    piece cut to MAX_TEXT characters and NUL made visible."""
    for index, segment in enumerate(segments):
        text = visible(segment.text)
        if segment.op != "equal" or len(text) <= KEEP_EQUAL * 2:
            yield Segment(segment.op, text[:MAX_TEXT])
            continue
        head = text[:KEEP_EQUAL] if index > 0 else ""
        tail = text[-KEEP_EQUAL:] if index < len(segments) - 1 else ""
        if head:
            yield Segment("equal", head)
        yield Segment("skip", f"… {len(text) - len(head) - len(tail):,} characters unchanged …")
        if tail:
            yield Segment("equal", tail)
