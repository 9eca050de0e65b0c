"""The syntax of a user's regular expression, parsed into a tree (never matched here).

The offline model builds a string for a JSON Schema `pattern` from this tree
(`synthesis.py`); matching is RE2's alone (`patterns.py`), and only a pattern RE2 accepted
reaches `parse`. The syntax is RE2's, with ECMA-262's `\\uXXXX` (JSON Schema's dialect):

- literals (any code point), `.`, the anchors `^ $ \\A \\z \\b \\B` (they match no text);
- escapes: `\\a \\f \\t \\n \\r \\v`, `\\xHH`, `\\x{H…}`, `\\uHHHH`, octal `\\0`, `\\12`, `\\123`,
  any escaped punctuation, and `\\Q…\\E` (literal text);
- classes `[…]` and `[^…]` with ranges, escapes, Perl classes `\\d \\s \\w` (ASCII, as RE2's)
  and their negations, POSIX classes `[:alpha:]` / `[:^alpha:]`, and Unicode classes
  `\\pL`, `\\p{Lu}`, `\\PN`, `\\p{^Greek}` (general categories, `Any` and a few scripts);
- groups `(…)`, `(?:…)`, `(?P<name>…)`, `(?<name>…)`, flags `(?i)` and `(?i:…)` (flags change
  how RE2 matches, not which strings a builder may write, so they are read and dropped);
- alternation `|`, repetition `* + ?`, `{n}`, `{n,}`, `{n,m}`, each optionally lazy (`?`).

Anything else raises `RegexSyntaxError` (a ValueError): the offline model then writes text
another way. Pure Python.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "MAX_CODE_POINT",
    "Alternation",
    "Anchor",
    "AnyChar",
    "Category",
    "CharClass",
    "ClassItem",
    "Group",
    "Literal",
    "Node",
    "Range",
    "RegexSyntaxError",
    "Repeat",
    "Sequence",
    "class_contains",
    "parse",
]

MAX_CODE_POINT = 0x10FFFF
_MAX_DEPTH = 200  # nested groups; RE2's own limit is 1000, a designer's pattern far below


class RegexSyntaxError(ValueError):
    """A pattern this parser does not read; `position` is where in it (0-based)."""

    def __init__(self, pattern: str, position: int, reason: str):
        self.pattern = pattern
        self.position = position
        self.reason = reason
        super().__init__(f"{reason} at {position} in {pattern!r}")


@dataclass(frozen=True, slots=True)
class Literal:
    char: str


@dataclass(frozen=True, slots=True)
class AnyChar:
    """`.`: any character but a newline (any at all under the `s` flag)."""


@dataclass(frozen=True, slots=True)
class Anchor:
    """A position, not a character: `^`, `$`, `\\A`, `\\z`, `\\b` or `\\B`."""

    kind: str


@dataclass(frozen=True, slots=True)
class Range:
    """The code points `low` to `high`, both included."""

    low: int
    high: int


@dataclass(frozen=True, slots=True)
class Category:
    """A Unicode general category (`L`, `Lu`, `Nd`, …), or every character outside it."""

    name: str
    negated: bool = False


ClassItem = Range | Category


@dataclass(frozen=True, slots=True)
class CharClass:
    """One character among `items` (outside all of them when `negated`)."""

    items: tuple[ClassItem, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Repeat:
    """`node` `low` to `high` times (`high` None: no upper bound)."""

    node: Node
    low: int
    high: int | None
    greedy: bool = True


@dataclass(frozen=True, slots=True)
class Group:
    node: Node
    capturing: bool
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Alternation:
    branches: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Sequence:
    """The nodes one after another; the empty sequence matches the empty string."""

    items: tuple[Node, ...]


Node = Literal | AnyChar | Anchor | CharClass | Repeat | Group | Alternation | Sequence


def class_contains(items: tuple[ClassItem, ...], char: str) -> bool:
    """Whether `char` is one of `items` (the class not negated)."""
    code = ord(char)
    for item in items:
        if isinstance(item, Range):
            if item.low <= code <= item.high:
                return True
        elif unicodedata.category(char).startswith(item.name) != item.negated:
            return True
    return False


@lru_cache(maxsize=512)
def parse(pattern: str) -> Node:
    """The tree of `pattern`; raises RegexSyntaxError for what it does not read."""
    return _Parser(pattern).parse()


# --- named classes ---------------------------------------------------------------------------

_DIGIT = (Range(0x30, 0x39),)
_SPACE = (Range(0x09, 0x0A), Range(0x0C, 0x0D), Range(0x20, 0x20))  # RE2's \s: no \v
_WORD = (Range(0x30, 0x39), Range(0x41, 0x5A), Range(0x5F, 0x5F), Range(0x61, 0x7A))
_PERL = {"d": _DIGIT, "s": _SPACE, "w": _WORD}

_POSIX: dict[str, tuple[Range, ...]] = {
    "alnum": (Range(0x30, 0x39), Range(0x41, 0x5A), Range(0x61, 0x7A)),
    "alpha": (Range(0x41, 0x5A), Range(0x61, 0x7A)),
    "ascii": (Range(0x00, 0x7F),),
    "blank": (Range(0x09, 0x09), Range(0x20, 0x20)),
    "cntrl": (Range(0x00, 0x1F), Range(0x7F, 0x7F)),
    "digit": _DIGIT,
    "graph": (Range(0x21, 0x7E),),
    "lower": (Range(0x61, 0x7A),),
    "print": (Range(0x20, 0x7E),),
    "punct": (Range(0x21, 0x2F), Range(0x3A, 0x40), Range(0x5B, 0x60), Range(0x7B, 0x7E)),
    "space": (Range(0x09, 0x0D), Range(0x20, 0x20)),
    "upper": (Range(0x41, 0x5A),),
    "word": _WORD,
    "xdigit": (Range(0x30, 0x39), Range(0x41, 0x46), Range(0x61, 0x66)),
}

_SUBCATEGORIES = {
    "C": ("c", "f", "o", "s"),
    "L": ("l", "m", "o", "t", "u"),
    "M": ("c", "e", "n"),
    "N": ("d", "l", "o"),
    "P": ("c", "d", "e", "f", "i", "o", "s"),
    "S": ("c", "k", "m", "o"),
    "Z": ("l", "p", "s"),
}
# RE2's general categories: the seven classes and their subcategories (Cn is not one).
_CATEGORIES = frozenset(
    major + minor for major, minors in _SUBCATEGORIES.items() for minor in ("", *minors)
)

# Scripts by their main letters only (Python has no script property): enough to write a
# character of the script, and RE2 checks whatever is written.
_SCRIPTS: dict[str, tuple[Range, ...]] = {
    "Latin": (Range(0x41, 0x5A), Range(0x61, 0x7A), Range(0xC0, 0xD6), Range(0xD8, 0xF6)),
    "Greek": (Range(0x391, 0x3A1), Range(0x3A3, 0x3A9), Range(0x3B1, 0x3C9)),
    "Cyrillic": (Range(0x410, 0x44F),),
    "Armenian": (Range(0x531, 0x556), Range(0x561, 0x586)),
    "Hebrew": (Range(0x5D0, 0x5EA),),
    "Arabic": (Range(0x621, 0x63A), Range(0x641, 0x64A)),
    "Devanagari": (Range(0x905, 0x939),),
    "Thai": (Range(0xE01, 0xE30),),
    "Georgian": (Range(0x10D0, 0x10FA),),
    "Hiragana": (Range(0x3041, 0x3096),),
    "Katakana": (Range(0x30A1, 0x30FA),),
    "Hangul": (Range(0xAC00, 0xD7A3),),
    "Han": (Range(0x4E00, 0x9FFF),),
}


def _complement(ranges: tuple[Range, ...]) -> tuple[Range, ...]:
    out: list[Range] = []
    start = 0
    for item in sorted(ranges, key=lambda r: r.low):
        if item.low > start:
            out.append(Range(start, item.low - 1))
        start = max(start, item.high + 1)
    if start <= MAX_CODE_POINT:
        out.append(Range(start, MAX_CODE_POINT))
    return tuple(out)


# --- the parser ------------------------------------------------------------------------------

_SIMPLE_ESCAPES = {"a": "\a", "f": "\f", "t": "\t", "n": "\n", "r": "\r", "v": "\v"}
_HEX = frozenset("0123456789abcdefABCDEF")
_OCTAL = frozenset("01234567")
_REPEAT_CHARS = frozenset("*+?")


class _Parser:
    def __init__(self, pattern: str):
        self.text = pattern
        self.pos = 0
        self.depth = 0

    # -- reading ------------------------------------------------------------------------------

    def fail(self, reason: str, position: int | None = None) -> RegexSyntaxError:
        return RegexSyntaxError(self.text, self.pos if position is None else position, reason)

    def peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def eat(self, expected: str) -> bool:
        if self.text.startswith(expected, self.pos):
            self.pos += len(expected)
            return True
        return False

    def take(self) -> str:
        char = self.peek()
        if not char:
            raise self.fail("unexpected end of pattern")
        self.pos += 1
        return char

    # -- structure ----------------------------------------------------------------------------

    def parse(self) -> Node:
        node = self.alternation()
        if self.pos < len(self.text):
            raise self.fail("unmatched )")
        return node

    def alternation(self) -> Node:
        branches = [self.sequence()]
        while self.eat("|"):
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else Alternation(tuple(branches))

    def sequence(self) -> Node:
        items: list[Node] = []
        while self.peek() not in ("", "|", ")"):
            atom = self.atom()
            if atom is None:  # a flags group: nothing to write, nothing to repeat
                continue
            if isinstance(atom, Sequence):  # \Q…\E: a repetition after it takes its last
                if not atom.items:
                    continue
                items.extend(atom.items[:-1])
                atom = atom.items[-1]
            items.append(self.repeated(atom))
        return items[0] if len(items) == 1 else Sequence(tuple(items))

    def repeated(self, atom: Node) -> Node:
        bounds = self.repetition()
        if bounds is None:
            return atom
        low, high = bounds
        greedy = not self.eat("?")
        if self.peek() in _REPEAT_CHARS or self.bounds_ahead() is not None:
            raise self.fail("a repetition of a repetition")
        return Repeat(atom, low, high, greedy)

    def repetition(self) -> tuple[int, int | None] | None:
        char = self.peek()
        if char in _REPEAT_CHARS:
            self.pos += 1
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        found = self.bounds_ahead()
        if found is None:
            return None
        low, high, end = found
        if high is not None and high < low:
            raise self.fail("a repetition's maximum below its minimum")
        self.pos = end
        return low, high

    def bounds_ahead(self) -> tuple[int, int | None, int] | None:
        """`{n}`, `{n,}` or `{n,m}` at the position: (n, m or None, the index after it).
        Anything else after `{` makes the `{` a literal, as in RE2."""
        text, index = self.text, self.pos
        if not text.startswith("{", index):
            return None
        index += 1
        start = index
        while index < len(text) and text[index].isascii() and text[index].isdigit():
            index += 1
        if index == start:
            return None
        low = int(text[start:index])
        if text.startswith("}", index):
            return low, low, index + 1
        if not text.startswith(",", index):
            return None
        index += 1
        if text.startswith("}", index):
            return low, None, index + 1
        start = index
        while index < len(text) and text[index].isascii() and text[index].isdigit():
            index += 1
        if index == start or not text.startswith("}", index):
            return None
        return low, int(text[start:index]), index + 1

    def atom(self) -> Node | None:
        start = self.pos
        char = self.take()
        if char == "(":
            return self.group(start)
        if char == "[":
            return self.char_class()
        if char == ".":
            return AnyChar()
        if char in "^$":
            return Anchor(char)
        if char in _REPEAT_CHARS:
            raise self.fail("nothing to repeat", start)
        if char == "{" and self.bounds_ahead_at(start) is not None:
            raise self.fail("nothing to repeat", start)
        if char == "\\":
            return self.escape()
        return Literal(char)

    def bounds_ahead_at(self, position: int) -> tuple[int, int | None, int] | None:
        saved, self.pos = self.pos, position
        try:
            return self.bounds_ahead()
        finally:
            self.pos = saved

    def group(self, start: int) -> Node | None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.fail("groups nested too deep", start)
        name: str | None = None
        capturing = True
        if self.eat("?"):
            lookbehind = self.peek(1) in ("=", "!")
            if self.eat("P<") or (not lookbehind and self.eat("<")):
                name = self.group_name()
            else:
                capturing = False
                if self.flags():  # (?i): flags for the rest, no group
                    self.depth -= 1
                    return None
        body = self.alternation()
        if not self.eat(")"):
            raise self.fail("missing )", start)
        self.depth -= 1
        return Group(body, capturing, name)

    def group_name(self) -> str:
        end = self.text.find(">", self.pos)
        name = self.text[self.pos : end] if end >= 0 else ""
        if not name or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
            raise self.fail("a group name must be letters, digits and _")
        self.pos = end + 1
        return name

    def flags(self) -> bool:
        """Reads `i m s U` and `-` after `(?`; True when `)` ends it (flags only), False when
        `:` opens a group."""
        start = self.pos
        while self.peek() and self.peek() in "imsU-":
            self.pos += 1
        if self.eat(")"):
            if self.pos - 1 == start:
                raise self.fail("empty flags", start)
            return True
        if self.eat(":"):
            return False
        raise self.fail("an unknown group construct", start)

    # -- escapes ------------------------------------------------------------------------------

    def escape(self) -> Node:
        """After a `\\` outside a class."""
        char = self.peek()
        if char in ("A", "z", "b", "B"):
            self.pos += 1
            return Anchor("\\" + char)
        if char and char in "dDsSwW":
            self.pos += 1
            return CharClass(_PERL[char.lower()], negated=char.isupper())
        if char in ("p", "P"):
            return CharClass(self.unicode_class())
        if char == "Q":
            self.pos += 1
            end = self.text.find("\\E", self.pos)
            end = len(self.text) if end < 0 else end
            literal = self.text[self.pos : end]
            self.pos = min(end + 2, len(self.text))
            return Sequence(tuple(Literal(c) for c in literal))
        return Literal(self.char_escape())

    def char_escape(self) -> str:
        """A character written as an escape, after its `\\` (inside a class or out)."""
        start = self.pos - 1
        char = self.take()
        if char in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[char]
        if char == "x":
            if self.eat("{"):
                end = self.text.find("}", self.pos)
                digits = self.text[self.pos : end] if end >= 0 else ""
                self.pos = end + 1 if end >= 0 else self.pos
                return self.code_point(digits, start)
            digits = self.text[self.pos : self.pos + 2]
            self.pos += 2
            return self.code_point(digits if len(digits) == 2 else "", start)
        if char == "u":  # ECMA-262, as patterns.py translates it for RE2
            digits = self.text[self.pos : self.pos + 4]
            self.pos += 4
            return self.code_point(digits if len(digits) == 4 else "", start)
        if char in _OCTAL:
            # RE2: \0 and \1-\7 followed by an octal digit start up to three octal digits;
            # a lone \1-\7 would be a backreference, which RE2 refuses.
            if char != "0" and self.peek() not in _OCTAL:
                raise self.fail("backreferences are not supported", start)
            digits = char
            while len(digits) < 3 and self.peek() and self.peek() in _OCTAL:
                digits += self.take()
            return chr(int(digits, 8))
        if char.isascii() and not char.isalnum():
            return char  # escaped punctuation (and an escaped space) stands for itself
        raise self.fail(f"an unknown escape \\{char}", start)

    def code_point(self, digits: str, start: int) -> str:
        if not digits or not all(d in _HEX for d in digits):
            raise self.fail("a bad hexadecimal escape", start)
        value = int(digits, 16)
        if value > MAX_CODE_POINT:
            raise self.fail("a code point beyond U+10FFFF", start)
        return chr(value)

    def unicode_class(self) -> tuple[ClassItem, ...]:
        """`\\pL`, `\\p{Name}`, `\\p{^Name}`, `\\PL`, …: at the `p` or `P`."""
        start = self.pos - 1
        negated = self.take() == "P"
        if self.eat("{"):
            end = self.text.find("}", self.pos)
            if end < 0:
                raise self.fail("a Unicode class without }", start)
            name = self.text[self.pos : end]
            self.pos = end + 1
        else:
            name = self.take()
        if name.startswith("^"):
            negated, name = not negated, name[1:]
        if name == "Any":
            return () if negated else (Range(0, MAX_CODE_POINT),)
        if name in _CATEGORIES:
            return (Category(name, negated),)
        if name in _SCRIPTS:
            ranges = _SCRIPTS[name]
            return _complement(ranges) if negated else ranges
        raise self.fail(f"an unknown Unicode class {name!r}", start)

    # -- classes ------------------------------------------------------------------------------

    def char_class(self) -> CharClass:
        """After `[`."""
        start = self.pos - 1
        negated = self.eat("^")
        items: list[ClassItem] = []
        first = True
        while True:
            char = self.peek()
            if not char:
                raise self.fail("missing ]", start)
            if char == "]" and not first:
                self.pos += 1
                return CharClass(tuple(items), negated)
            first = False
            if self.text.startswith("[:", self.pos):
                items.extend(self.posix_class())
            elif char == "\\" and self.peek(1) in tuple("dDsSwW"):
                kind = self.peek(1)
                self.pos += 2
                ranges = _PERL[kind.lower()]
                items.extend(_complement(ranges) if kind.isupper() else ranges)
            elif char == "\\" and self.peek(1) in ("p", "P"):
                self.pos += 1
                items.extend(self.unicode_class())
            else:
                items.append(self.class_range())

    def class_range(self) -> Range:
        start = self.pos
        low = self.class_char()
        if self.peek() == "-" and self.peek(1) not in ("]", ""):
            self.pos += 1
            high = self.class_char()
            if ord(high) < ord(low):
                raise self.fail("a range out of order", start)
            return Range(ord(low), ord(high))
        return Range(ord(low), ord(low))

    def class_char(self) -> str:
        char = self.take()
        return self.char_escape() if char == "\\" else char

    def posix_class(self) -> tuple[Range, ...]:
        start = self.pos
        end = self.text.find(":]", self.pos + 2)
        if end < 0:
            raise self.fail("a POSIX class without :]", start)
        name = self.text[self.pos + 2 : end]
        self.pos = end + 2
        negated = name.startswith("^")
        ranges = _POSIX.get(name.lstrip("^"))
        if ranges is None:
            raise self.fail(f"an unknown POSIX class {name!r}", start)
        return _complement(ranges) if negated else ranges
