"""The regex parser the offline model builds pattern strings from (runs/engine/regex_syntax.py),
and the strings it builds: every one matched by RE2, the same for the same seed."""

from __future__ import annotations

import pytest
import re2

from runs.engine import patterns
from runs.engine.regex_syntax import (
    MAX_CODE_POINT,
    Alternation,
    Anchor,
    AnyChar,
    Category,
    CharClass,
    Group,
    Literal,
    Range,
    RegexSyntaxError,
    Repeat,
    Sequence,
    class_contains,
    parse,
)
from runs.engine.synthesis import synthesize


def chars(text: str) -> Sequence:
    return Sequence(tuple(Literal(c) for c in text))


def one(low: str, high: str | None = None) -> Range:
    return Range(ord(low), ord(high if high is not None else low))


# -- the trees ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "tree"),
    [
        ("abc", chars("abc")),
        ("a", Literal("a")),
        ("", Sequence(())),
        (".", AnyChar()),
        # classes and ranges
        ("[abc]", CharClass((one("a"), one("b"), one("c")))),
        ("[a-z0-9_]", CharClass((one("a", "z"), one("0", "9"), one("_")))),
        ("[^@\\s]", CharClass((one("@"), one("\t", "\n"), one("\f", "\r"), one(" ")), True)),
        ("[]a]", CharClass((one("]"), one("a")))),
        ("[^]]", CharClass((one("]"),), True)),
        ("[-a]", CharClass((one("-"), one("a")))),
        ("[a-]", CharClass((one("a"), one("-")))),
        ("[\\]\\-\\\\]", CharClass((one("]"), one("-"), one("\\")))),
        ("[\\d]", CharClass((one("0", "9"),))),
        ("[\\D]", CharClass((Range(0, 0x2F), Range(0x3A, MAX_CODE_POINT)))),
        ("[[:xdigit:]]", CharClass((one("0", "9"), one("A", "F"), one("a", "f")))),
        ("[[:^digit:]]", CharClass((Range(0, 0x2F), Range(0x3A, MAX_CODE_POINT)))),
        ("[\\x00-\\x1f]", CharClass((Range(0, 0x1F),))),
        ("\\d", CharClass((one("0", "9"),))),
        ("\\W", CharClass((one("0", "9"), one("A", "Z"), one("_"), one("a", "z")), True)),
        # escapes
        ("\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/\\ ", chars(".*+?()[]{}|^$\\/ ")),
        ("\\t\\n\\r\\f\\v\\a", chars("\t\n\r\f\v\a")),
        ("\\x41\\x{42}\\u0043", chars("ABC")),
        ("\\x{1F600}", Literal("\U0001f600")),
        ("\\0\\12\\101", chars("\x00\nA")),
        ("\\Qa.b*\\E+", Sequence((*chars("a.b").items, Repeat(Literal("*"), 1, None)))),
        ("\\Q(x", chars("(x")),
        # anchors
        ("^a$", Sequence((Anchor("^"), Literal("a"), Anchor("$")))),
        ("\\Aa\\z", Sequence((Anchor("\\A"), Literal("a"), Anchor("\\z")))),
        ("\\bx\\B", Sequence((Anchor("\\b"), Literal("x"), Anchor("\\B")))),
        # alternation and groups
        ("a|bc|", Alternation((Literal("a"), chars("bc"), Sequence(())))),
        (
            "(a|b)c",
            Sequence((Group(Alternation((Literal("a"), Literal("b"))), True), Literal("c"))),
        ),
        ("(?:ab)", Group(chars("ab"), False)),
        ("(?P<year>\\d{4})", Group(Repeat(CharClass((one("0", "9"),)), 4, 4), True, "year")),
        ("(?<y>a)", Group(Literal("a"), True, "y")),
        ("(?i)abc", chars("abc")),
        ("a(?s-m)b", chars("ab")),
        ("(?i:ab)", Group(chars("ab"), False)),
        ("((a))", Group(Group(Literal("a"), True), True)),
        # repetition and its bounds
        (
            "a*b+c?",
            Sequence(
                (
                    Repeat(Literal("a"), 0, None),
                    Repeat(Literal("b"), 1, None),
                    Repeat(Literal("c"), 0, 1),
                )
            ),
        ),
        ("a*?", Repeat(Literal("a"), 0, None, greedy=False)),
        ("a{3}", Repeat(Literal("a"), 3, 3)),
        ("a{2,}", Repeat(Literal("a"), 2, None)),
        ("a{2,5}?", Repeat(Literal("a"), 2, 5, greedy=False)),
        ("a{0,1000}", Repeat(Literal("a"), 0, 1000)),
        ("(ab){2}", Repeat(Group(chars("ab"), True), 2, 2)),
        # a { that opens no bound is a literal, as in RE2
        ("a{", chars("a{")),
        ("a{,3}", chars("a{,3}")),
        ("a{x}", chars("a{x}")),
        ("x{2,y}", chars("x{2,y}")),
        ("}]", chars("}]")),
        # unicode
        ("é", Literal("é")),
        ("[α-ω]", CharClass((one("α", "ω"),))),
        ("日本+", Sequence((Literal("日"), Repeat(Literal("本"), 1, None)))),
        ("\U0001f600", Literal("\U0001f600")),
        ("\\pL", CharClass((Category("L"),))),
        ("\\p{Lu}", CharClass((Category("Lu"),))),
        ("\\PN", CharClass((Category("N", negated=True),))),
        ("\\p{^Nd}", CharClass((Category("Nd", negated=True),))),
        ("[\\p{Lu}\\d]", CharClass((Category("Lu"), one("0", "9")))),
        ("\\p{Greek}", CharClass((Range(0x391, 0x3A1), Range(0x3A3, 0x3A9), Range(0x3B1, 0x3C9)))),
        ("\\p{Any}", CharClass((Range(0, MAX_CODE_POINT),))),
    ],
)
def test_it_reads_the_syntax_re2_accepts(pattern, tree):
    assert patterns.pattern_problem(pattern) is None  # RE2 (through patterns.py) takes it
    assert parse(pattern) == tree


@pytest.mark.parametrize(
    "pattern",
    [
        "(a",
        "a)",
        "[a",
        "[z-a]",
        "*a",
        "a**",
        "a{2}{3}",
        "{2}",
        "a{3,2}",
        "\\1",
        "(a)\\1",
        "\\8",
        "\\e",
        "\\x4",
        "\\x{110000}",
        "\\u12",
        "\\p{Klingon}",
        "[[:nope:]]",
        "(?=a)",
        "(?P=x)",
        "(?<!a)b",
        "(?#comment)",
        "(?P<bad-name>a)",
        "a\\",
    ],
)
def test_what_it_does_not_read_raises_a_syntax_error(pattern):
    with pytest.raises(RegexSyntaxError) as caught:
        parse(pattern)
    assert caught.value.pattern == pattern
    assert 0 <= caught.value.position <= len(pattern)


def test_it_refuses_no_more_than_re2_does_on_escapes_and_octals():
    # \12 is octal in RE2 (and here); a lone \1 would be a backreference RE2 refuses.
    assert patterns.pattern_problem("\\12") is None and parse("\\12") == Literal("\n")
    assert patterns.pattern_problem("\\1") is not None
    with pytest.raises(RegexSyntaxError, match="backreferences"):
        parse("\\1")


def test_class_membership_covers_ranges_and_unicode_categories():
    items = (one("a", "f"), Category("Nd"), Category("L", negated=True))
    assert class_contains(items, "c")
    assert class_contains(items, "٣")  # an Arabic-Indic digit: Nd
    assert class_contains(items, "!")  # not a letter
    assert not class_contains(items, "z")
    assert not class_contains(items, "Ω")


# -- the strings built from them ---------------------------------------------------------------

BUILT = [
    r"^[A-Z]{3}-\d{4}$",
    r"^(draft|final)-[a-z0-9]+$",
    r"^[^@\s]+@example\.org$",
    r"^#[0-9a-fA-F]{6}$",
    r"^\+?[1-9]\d{1,14}$",
    r"^[a-z0-9]+(?:-[a-z0-9]+)*$",
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$",
    r"^(?P<major>\d+)\.(?P<minor>\d+)\.(?P<patch>\d+)$",
    r"^(?i)[a-z]{2}_[A-Z]{2}$",
    r"^[[:upper:]][[:lower:]]+$",
    r"^\pL+ \p{Lu}\PN$",
    r"^\p{Greek}{3}$",
    r"^[α-ω]{2,4}$",
    r"^日本\x{8a9e}$",
    r"^\u00e9t\u00e9$",
    r"^[^a-zA-Z0-9 ]{2}$",
    r"^[\D]{3}$",
    r"^\W\S\w$",
    r"^a.b.c$",
    r"^\Q1+1=2\E$",
    r"^(?:ab|cd){2,3}x{0,2}$",
    r"\bword\b",
    r"^[\x{1F600}-\x{1F64F}]$",
    r"^[\t ]*$",
    r"^$",
]


@pytest.mark.parametrize("pattern", BUILT)
def test_every_string_built_matches_the_pattern_under_re2(pattern):
    regex = re2.compile(pattern.replace("\\u00e9", "\\x{e9}"))
    for seed in ("a", "b", "c", "d"):
        value = synthesize({"type": "string", "pattern": pattern}, seed=seed)
        assert regex.search(value), (pattern, value)
        assert value == synthesize({"type": "string", "pattern": pattern}, seed=seed)


def test_bounds_are_honoured_and_lazy_repeats_build_the_same_way():
    value = synthesize({"type": "string", "pattern": r"^x{5}y{2,3}?$"}, seed="s")
    assert value.startswith("xxxxx") and value[5:] in ("yy", "yyy")


def test_a_pattern_asking_for_too_long_a_string_falls_back_to_text():
    pattern = "^" + "[ab]{1000}" * 25 + "$"  # 25,000 characters, over the building's bound
    assert patterns.pattern_problem(pattern) is None
    value = synthesize({"type": "string", "pattern": pattern}, seed="s")
    assert isinstance(value, str) and not re2.compile(pattern).search(value)
    shorter = "^" + "[ab]{1000}" * 15 + "$"  # 15,000: within it
    assert re2.compile(shorter).search(synthesize({"type": "string", "pattern": shorter}, seed="s"))


def test_a_negated_class_that_holds_every_plain_character_writes_a_rarer_one():
    pattern = r"^[^\x00-\x7f]$"
    value = synthesize({"type": "string", "pattern": pattern}, seed="s")
    assert re2.compile(pattern).search(value) and len(value) == 1
