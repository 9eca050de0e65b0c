"""Secret redaction: the one place where a tool call's answer loses every echo of a credential.

A server that echoes what it was sent (a debugging endpoint, an error page quoting the
request) returns the credential in whatever encoding it likes: JSON escapes (`\\/` from PHP,
`\\u0026` from Go, `\\u00XX` for any character), percent-encoding (`quote`, `quote_plus`),
base64 (standard or URL-safe, padded or not, and as part of a longer string such as the
`user:secret` of HTTP Basic), or hex. `SecretRedaction` finds each of these forms, and
mixtures of the escapes inside one form, in a text; `value` does it to every string and key
of a decoded JSON value, so a secret is caught both before and after a JSON decoder turns
escapes back into characters.

Base64 of a string holding the secret at any offset: base64 codes 3 bytes as 4 characters,
so the characters that depend on the secret's bytes alone depend only on where the secret
starts modulo 3. For each of the 3 alignments the run of characters wholly inside the secret
is a fixed string, found like the secret itself; the one or two characters at each end also
code bytes around the secret and are left (they carry at most a few bits of its first and
last byte).

The runner (`tools/runner.py`) applies it to everything an adapter given credentials returns
or raises, so no adapter has to remember to.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"

# JSON's two-character escapes (RFC 8259 §7), by the character they stand for.
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
# base64 bits before the secret, by its alignment (offset modulo 3), and where the characters
# that code the secret's bits alone start: ceil(8 * filler / 6).
_ALIGNMENTS = ((0, 0), (1, 2), (2, 3))


def _any_case(hex_digits: str) -> str:
    """A regex for hex digits in upper, lower or mixed case."""
    return "".join(f"[{d.lower()}{d.upper()}]" if d.isalpha() else re.escape(d) for d in hex_digits)


def _one_character(c: str, *, fold_case: bool) -> str:
    """A regex for one character of a secret as a server may write it: itself, a JSON
    escape, an HTML character reference, or its UTF-8 bytes percent-encoded."""
    alternatives: list[str] = []
    for ch in dict.fromkeys([c, c.lower(), c.upper()] if fold_case else [c]):
        code = ord(ch)
        alternatives.append(re.escape(ch))
        if ch in _SHORT_ESCAPES:
            alternatives.append(re.escape(_SHORT_ESCAPES[ch]))
        if code < 0x10000:
            alternatives.append(r"\\u" + _any_case(f"{code:04x}"))
        else:  # a UTF-16 surrogate pair
            high = 0xD800 + ((code - 0x10000) >> 10)
            low = 0xDC00 + ((code - 0x10000) & 0x3FF)
            alternatives.append(
                r"\\u" + _any_case(f"{high:04x}") + r"\\u" + _any_case(f"{low:04x}")
            )
        alternatives.append(f"&#0*{code};")
        alternatives.append("&#[xX]0*" + _any_case(f"{code:x}") + ";")
        alternatives.append("".join("%" + _any_case(f"{b:02x}") for b in ch.encode()))
        if ch == " ":
            alternatives.append(r"\+")
    return "(?:" + "|".join(alternatives) + ")"


def _pattern(form: str, *, fold_case: bool = False) -> str:
    return "".join(_one_character(c, fold_case=fold_case) for c in form)


def _base64_cores(data: bytes) -> set[str]:
    """What the base64 of any string holding `data` contains of it, for each alignment, in
    both alphabets (padding never falls inside these runs)."""
    cores = set()
    for filler, start in _ALIGNMENTS:
        encoded = base64.b64encode(b"\0" * filler + data).decode()
        core = encoded[start : (8 * (filler + len(data))) // 6]
        cores.add(core)
        cores.add(core.translate(str.maketrans("+/", "-_")))
    return cores


def secret_forms(secret: str) -> list[tuple[str, bool]]:
    """The strings to look for, each with whether its case may vary (hex)."""
    spellings = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}
    forms: dict[str, bool] = {secret: False}
    for spelling in spellings:
        for core in _base64_cores(spelling.encode()):
            forms.setdefault(core, False)
    forms.setdefault(secret.encode().hex(), True)
    return sorted(forms.items(), key=lambda item: -len(item[0]))


class SecretRedaction:
    """Replaces every form of the given secrets with `[redacted]`."""

    __slots__ = ("_pattern",)

    def __init__(self, secrets: Iterable[str]):
        patterns = [
            _pattern(form, fold_case=fold_case)
            for secret in dict.fromkeys(secrets)
            if secret
            for form, fold_case in secret_forms(secret)
        ]
        # Longest first: a longer form that holds a shorter one is replaced whole.
        self._pattern = re.compile("|".join(patterns)) if patterns else None

    def text(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(REDACTED, text)

    def value(self, value: Any) -> Any:
        """A copy of a JSON value with the secrets redacted in every string and key."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {
                self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value

    def __repr__(self) -> str:
        return "SecretRedaction(…)"

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a secret redaction cannot be pickled")
