"""Reading the designer's editor from a response in tests."""

from __future__ import annotations

from typing import Any


def section(response: Any, key: str) -> Any:
    """The editor's section `key` (sections are added over time: never count on a position)."""
    return next(s for s in response.context["editor"].sections if s.key == key)
