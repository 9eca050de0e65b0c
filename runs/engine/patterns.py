"""Regular expressions that come from a user, matched in linear time.

A pattern written by a designer (a JSON Schema `pattern` or `patternProperties` key, a REGEX
review criterion, a validation rule) runs on input anyone may send. Python's `re`
backtracks: `^(a+)+$` against forty `a`s and a `!` holds a thread, and the GIL, for minutes.
So every user pattern is compiled here with RE2 (google-re2), whose matching time is linear
in the text, and a pattern RE2 cannot take (backreferences, lookarounds, atomic groups,
possessive quantifiers, repetition counts over 1000) is refused with a sentence naming
the construct, at design time by the definition checks and at run time as a failed check:
never handed to `re` instead.

Pure Python (and RE2): importable by the engine and by every app.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import re2

__all__ = ["PatternRefused", "UserPattern", "compile_pattern", "pattern_problem"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is answered to its author, not logged to stderr

# ECMA-262 (JSON Schema's dialect) writes a code point as \uXXXX; RE2 as \x{XXXX}. An escaped
# backslash is consumed first, so `\\u0041` stays a backslash and the text "u0041".
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|.)", re.DOTALL)


class PatternRefused(ValueError):
    """A pattern the linear-time engine cannot take; `reason` says why in a phrase."""

    def __init__(self, pattern: str, reason: str):
        self.pattern = pattern
        self.reason = reason
        super().__init__(f"{pattern!r}: {reason}")


@dataclass(frozen=True)
class UserPattern:
    """A user pattern compiled for RE2. `search` answers whether it occurs in the text."""

    text: str
    regex: Any

    def search(self, text: str) -> bool:
        try:
            return self.regex.search(text) is not None
        except UnicodeEncodeError:
            # RE2 reads UTF-8; a lone surrogate has no UTF-8 form, so it is matched as U+FFFD.
            clean = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
            return self.regex.search(clean) is not None


def compile_pattern(pattern: Any) -> UserPattern:
    """The RE2 form of `pattern`; raises PatternRefused naming what RE2 cannot take."""
    if not isinstance(pattern, str):
        raise PatternRefused(str(pattern), "a regular expression must be a string")
    return _compiled(pattern)


def pattern_problem(pattern: Any) -> str | None:
    """Why `pattern` cannot be used (a phrase), or None when it can."""
    try:
        compile_pattern(pattern)
    except PatternRefused as exc:
        return exc.reason
    return None


@lru_cache(maxsize=2048)
def _compiled(pattern: str) -> UserPattern:
    translated = _ESCAPE.sub(_translate_escape, pattern)
    try:
        regex = re2.compile(translated, _OPTIONS)
    except re2.error as exc:
        raise PatternRefused(pattern, _reason(pattern, exc)) from None
    return UserPattern(pattern, regex)


def _translate_escape(match: re.Match[str]) -> str:
    code = match.group(1)
    return f"\\x{{{code}}}" if code is not None else match.group(0)


def _reason(pattern: str, exc: Exception) -> str:
    raw = exc.args[0] if exc.args else ""
    detail = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    construct = ""
    if re.match(r"invalid escape sequence: \\[1-9]", detail) or "(?P=" in pattern:
        construct = "backreferences (\\1, (?P=name)) are not supported"
    elif detail.startswith("invalid escape sequence: \\k"):
        construct = "named backreferences (\\k<name>) are not supported"
    elif detail.startswith("invalid perl operator: (?=") or detail.startswith(
        "invalid perl operator: (?!"
    ):
        construct = "lookaheads ((?=…), (?!…)) are not supported"
    elif detail.startswith("invalid perl operator: (?<=") or detail.startswith(
        "invalid perl operator: (?<!"
    ):
        construct = "lookbehinds ((?<=…), (?<!…)) are not supported"
    elif detail.startswith("invalid perl operator: (?>"):
        construct = "atomic groups ((?>…)) are not supported"
    elif detail.startswith("invalid perl operator: (?("):
        construct = "conditionals ((?(1)…|…)) are not supported"
    elif re.match(r"bad repetition operator: [*+?}]\+", detail):
        construct = "possessive quantifiers (a++, a*+) are not supported"
    elif detail.startswith("invalid repetition size"):
        construct = (
            "a repetition count above 1000 (nested counts multiplied) is not supported "
            "(a length limit is maxLength's job)"
        )
    elif "too large" in detail or "too big" in detail:
        construct = "the pattern is too large"
    if construct:
        return f"{construct}; user patterns run on RE2, a linear-time engine ({detail})"
    return (
        "it is not a valid regular expression for RE2, the linear-time engine user patterns "
        f"run on ({detail})"
    )
