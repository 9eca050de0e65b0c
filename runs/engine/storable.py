"""What a model or a tool produced, made storable: PostgreSQL's text and jsonb take neither
the NUL character nor a lone surrogate (UTF-8 has no form for one), and a provider or a server
may send either (`\\u0000` in a JSON body decodes to NUL). Each becomes U+FFFD, the
replacement character, in values and keys alike. JSON has no infinite number nor NaN, which
Python's decoder takes (`1e400`, `Infinity`): each becomes its name as text ("Infinity",
"-Infinity", "NaN"), which a schema then refuses by its type. So the call is recorded and
the run goes on instead of failing on the write (and paying the call again on every replay).
People's input is refused instead (config/json_input.py)."""

from __future__ import annotations

import math
from typing import Any

REPLACEMENT = "\ufffd"


def storable(value: Any) -> Any:
    """`value` (text, or a decoded JSON value) with NUL, lone surrogates and numbers JSON
    has not replaced; the same object when it holds none."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        cleaned = {_text(k) if isinstance(k, str) else k: storable(v) for k, v in value.items()}
        same = all(a is b for a, b in zip(value, cleaned, strict=True)) and all(
            value[k] is cleaned[k] for k in value
        )
        return value if same else cleaned
    if isinstance(value, list | tuple):
        items = [storable(item) for item in value]
        if all(a is b for a, b in zip(value, items, strict=True)):
            return value
        return type(value)(items) if isinstance(value, tuple) else items
    return value


def _text(text: str) -> str:
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join(REPLACEMENT if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return text
