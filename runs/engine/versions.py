"""Which version of a child a link takes (seed 000 §10.2: a parent may reference specific
versions of its children).

A child link's `version` is absent or null (the child's newest version at the trace's pin,
its root's start), an exact version ("1.2.0") or an npm-style range ("^1.2.0", "~1.2",
">=1.0.0 <2.0.0", "1.x"), parsed and matched by semantic-version's `NpmSpec`. A ranged link
takes the highest version the range allows among those saved by the pin. Pure functions,
shared by design-time validation (entities), both stores and the designer.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from semantic_version import NpmSpec, Version

from runs.engine import pinned

MAX_RANGE_LENGTH = 100
_NONE: Mapping[str, str] = MappingProxyType({})
RANGE_EXAMPLES = (
    "an exact version such as 1.2.0 or an npm range such as ^1.2.0, ~1.2, >=1.0.0 <2.0.0 or 1.x"
)


def range_problem(text: Any) -> str:
    """Why `text` cannot be a link's `version`, or "" when it can (null is handled by the
    caller: it means the newest version)."""
    if not isinstance(text, str):
        return "must be a version or a version range (text), or null for the newest version"
    if len(text) > MAX_RANGE_LENGTH:
        return f"is too long: at most {MAX_RANGE_LENGTH} characters (it has {len(text)})"
    if not text.strip():
        return f"is empty: leave it out (or null) for the newest version, or write {RANGE_EXAMPLES}"
    if not text.isprintable():
        return f"{text!r} holds a control character; write {RANGE_EXAMPLES}"
    if _spec(text) is None:
        return f"{text!r} is not a version or a version range; write {RANGE_EXAMPLES}"
    return ""


@functools.lru_cache(maxsize=1024)
def _spec(text: str) -> NpmSpec | None:
    try:
        return NpmSpec(text)
    except Exception:  # the library answers some malformed ranges with an AttributeError
        return None


@functools.lru_cache(maxsize=4096)
def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except (ValueError, TypeError):
        return None


def allows(text: str, version: str) -> bool:
    """Whether the range `text` allows `version` (False when either is not one)."""
    spec, parsed = _spec(text), _version(version)
    return spec is not None and parsed is not None and bool(spec.match(parsed))


def newest_matching(text: str | None, versions: Iterable[str]) -> str | None:
    """The highest of `versions` the range allows (any, for no range), or None. Of equal
    versions the last one given wins: callers list them in the order they were saved."""
    spec = None if text is None else _spec(text)
    if text is not None and spec is None:
        return None
    best: tuple[Version, str] | None = None
    for version in versions:
        parsed = _version(version)
        if parsed is None or (spec is not None and not spec.match(parsed)):
            continue
        if best is None or parsed >= best[0]:
            best = (parsed, version)
    return None if best is None else best[1]


def newest(versions: Iterable[str]) -> str | None:
    """The highest of `versions`."""
    return newest_matching(None, versions)


def is_newer(version: str, than: str) -> bool:
    """Whether `version` is a higher version than `than` (False when either is not one)."""
    a, b = _version(version), _version(than)
    return a is not None and b is not None and a > b


def bump_between(old: str, new: str) -> str:
    """The part of the version that changed from `old` to `new`: MAJOR, MINOR or PATCH
    ("" when they are equal or either is not a version)."""
    a, b = _version(old), _version(new)
    if a is None or b is None or a == b:
        return ""
    if a.major != b.major:
        return "MAJOR"
    return "MINOR" if a.minor != b.minor else "PATCH"


def ordered(versions: Iterable[str]) -> list[str]:
    """`versions` lowest first (text that is no version left out), each once."""
    parsed = {v: p for v in versions if (p := _version(v)) is not None}
    return sorted(parsed, key=parsed.__getitem__)


def span(versions: Iterable[str]) -> str:
    """What versions there are, for a message: "1.0.0–1.4.2", "only 1.0.0", "none"."""
    found = ordered(versions)
    if not found:
        return "none"
    if len(found) == 1:
        return f"only {found[0]}"
    return f"{found[0]}–{found[-1]}"


def link_ranges(definition: Mapping[str, Any]) -> Mapping[str, str]:
    """Each child reference of the definition's links that names a version, with it (the
    first link's, when two name the same child: validation makes them agree). Plan steps
    name a child as its link does (the exchange format writes both as the child's ref),
    so a step of a static or a dynamic plan takes its link's range. Worked out once per
    pinned list of links."""
    links = (definition.get("hierarchy") or {}).get("children")
    if not links:
        return _NONE
    return pinned.derived(links, "link_ranges", lambda: _ranges(links))


def _ranges(links: list[Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for link in links:
        if isinstance(link, dict) and link.get("version") is not None:
            found.setdefault(str(link.get("child_id")), str(link["version"]))
    return found


def link_path(definition: Mapping[str, Any], ref: str) -> str:
    """Where the link to `ref` is in the definition: `hierarchy.children[2]`."""
    links = (definition.get("hierarchy") or {}).get("children") or []
    for index, link in enumerate(links):
        if isinstance(link, dict) and str(link.get("child_id")) == ref:
            return f"hierarchy.children[{index}]"
    return "hierarchy.children"


def widened(text: str | None, version: str) -> str:
    """The range that takes `version` in the manner of `text`: an exact version stays exact,
    a tilde range stays a tilde range, anything else becomes a caret range (the same MAJOR)."""
    written = (text or "").strip()
    if written and _version(written.lstrip("=v")) is not None:
        return version
    if written.startswith("~"):
        return f"~{version}"
    return f"^{version}"
