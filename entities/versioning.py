"""SemVer for entity definitions (seed 000 §10.1).

MAJOR when the io_contract breaks callers, MINOR when capabilities are added, PATCH for any
other change. Pure functions over two definitions in the exchange format.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from runs.engine import versions

_VOLATILE_METADATA = ("id", "version", "created_at", "updated_at", "created_by", "status")


@dataclass(frozen=True)
class Bump:
    kind: str  # MAJOR | MINOR | PATCH | NONE
    reasons: tuple[str, ...]

    @property
    def summary(self) -> str:
        return "; ".join(self.reasons)


def content(definition: dict) -> dict:
    """What a version covers: the definition without lifecycle metadata or derived fields."""
    data = copy.deepcopy(definition)
    for key in _VOLATILE_METADATA:
        data.get("metadata", {}).pop(key, None)
    for key in ("is_atomic", "composition_depth"):
        data.get("hierarchy", {}).pop(key, None)
    tools = data.get("capabilities", {}).get("tools", [])
    data.get("capabilities", {})["tools"] = [t["tool_id"] for t in tools]
    return data


def bump_version(version: str, kind: str) -> str:
    major, minor, patch = (int(part) for part in version.split("."))
    if kind == "MAJOR":
        return f"{major + 1}.0.0"
    if kind == "MINOR":
        return f"{major}.{minor + 1}.0"
    if kind == "PATCH":
        return f"{major}.{minor}.{patch + 1}"
    return version


def classify(old: dict, new: dict) -> Bump:
    """Which part of the version a change from `old` to `new` bumps, and why."""
    before, after = content(old), content(new)
    if before == after:
        return Bump("NONE", ())
    breaking = _io_breaking(before.get("io_contract", {}), after.get("io_contract", {}))
    if breaking:
        return Bump("MAJOR", tuple(breaking))
    added = _capabilities_added(before, after)
    if added:
        return Bump("MINOR", tuple(added))
    changed = sorted(
        f"{section} changed"
        for section in set(before) | set(after)
        if before.get(section) != after.get(section)
    )
    return Bump("PATCH", tuple(changed))


def _props(schema: Any) -> dict:
    return schema.get("properties", {}) if isinstance(schema, dict) else {}


def _required(schema: Any) -> set[str]:
    return set(schema.get("required", [])) if isinstance(schema, dict) else set()


def _narrowed(old_prop: Any, new_prop: Any) -> str | None:
    if not isinstance(old_prop, dict) or not isinstance(new_prop, dict):
        return None
    if old_prop.get("type") != new_prop.get("type"):
        return f"type changed from {old_prop.get('type')} to {new_prop.get('type')}"
    if "enum" in new_prop:
        removed = [v for v in old_prop.get("enum", []) if v not in new_prop["enum"]]
        if "enum" not in old_prop:
            return "now limited to fixed values"
        if removed:
            return f"no longer accepts {', '.join(map(str, removed))}"
    return None


def _io_breaking(old: dict, new: dict) -> list[str]:
    reasons: list[str] = []
    old_in = old.get("input", {}).get("schema", {})
    new_in = new.get("input", {}).get("schema", {})
    for name in sorted(_required(new_in) - _required(old_in)):
        reasons.append(f"input field {name!r} is now required")
    for name, prop in _props(old_in).items():
        if name not in _props(new_in):
            reasons.append(f"input field {name!r} was removed")
        elif why := _narrowed(prop, _props(new_in)[name]):
            reasons.append(f"input field {name!r}: {why}")
    old_rules = old.get("input", {}).get("validation_rules", [])
    for rule in new.get("input", {}).get("validation_rules", []):
        if rule not in old_rules:
            reasons.append(f"new input rule {rule.get('rule')!r}")
    old_out = old.get("output", {}).get("schema", {})
    new_out = new.get("output", {}).get("schema", {})
    for name, prop in _props(old_out).items():
        if name not in _props(new_out):
            reasons.append(f"output field {name!r} was removed")
        elif why := _narrowed(prop, _props(new_out)[name]):
            reasons.append(f"output field {name!r}: {why}")
    for name in sorted(_required(old_out) - _required(new_out)):
        if name in _props(new_out):
            reasons.append(f"output field {name!r} is no longer guaranteed")
    return reasons


def _capabilities_added(old: dict, new: dict) -> list[str]:
    reasons: list[str] = []
    old_tools = set(old.get("capabilities", {}).get("tools", []))
    for tool in new.get("capabilities", {}).get("tools", []):
        if tool not in old_tools:
            reasons.append(f"tool {tool!r} added")
    old_memory = old.get("capabilities", {}).get("memory", {})
    new_memory = new.get("capabilities", {}).get("memory", {})
    if new_memory.get("enabled") and not old_memory.get("enabled"):
        reasons.append("memory enabled")
    old_children = [c.get("child_id") for c in old.get("hierarchy", {}).get("children", [])]
    for link in new.get("hierarchy", {}).get("children", []):
        if link.get("child_id") not in old_children:
            reasons.append(f"child {link.get('child_id')!r} added")
    old_steps = {s.get("step_id") for s in _steps(old)}
    for step in _steps(new):
        if step.get("step_id") not in old_steps:
            reasons.append(f"plan step {step.get('name')!r} added")
    old_dyn = old.get("planning", {}).get("dynamic_planning", {})
    new_dyn = new.get("planning", {}).get("dynamic_planning", {})
    if new_dyn.get("enabled") and not old_dyn.get("enabled"):
        reasons.append("dynamic planning enabled")
    old_in = _props(old.get("io_contract", {}).get("input", {}).get("schema", {}))
    for name in _props(new.get("io_contract", {}).get("input", {}).get("schema", {})):
        if name not in old_in:
            reasons.append(f"optional input field {name!r} added")
    old_out = _props(old.get("io_contract", {}).get("output", {}).get("schema", {}))
    for name in _props(new.get("io_contract", {}).get("output", {}).get("schema", {})):
        if name not in old_out:
            reasons.append(f"output field {name!r} added")
    return reasons


# What each kind of bump tells a parent about a newer version of its child.
BUMP_MEANS = {
    "MAJOR": "breaks the io contract",
    "MINOR": "adds capabilities",
    "PATCH": "fixes and tweaks",
}


@dataclass(frozen=True)
class Upgrade:
    """A version of a child newer than any its link's `version` (an exact version or a
    range) allows: seed 000 §10.2's "upgrade available"."""

    range: str
    resolved: str | None  # what the link runs now: the newest version it allows
    newest: str
    change: str  # MAJOR | MINOR | PATCH from `resolved` to `newest` ("" when none is allowed)
    summary: str  # why that bump was made (the version's summary)
    widened: str  # the link's version that takes `newest`, written as the range is

    @property
    def text(self) -> str:
        """`pinned ^1.2 → 1.4.0; 2.0.0 available (MAJOR: breaks the io contract — …)`."""
        runs = self.resolved or "no saved version"
        why = BUMP_MEANS.get(self.change, "")
        if why and self.summary:
            why = f"{why} — {self.summary}"
        kind = f" ({self.change}: {why})" if self.change else ""
        return f"pinned {self.range} → {runs}; {self.newest} available{kind}"


def upgrade_of(wanted: str, saved: list[tuple[str, str, str]]) -> Upgrade | None:
    """The upgrade a link with `version` `wanted` misses, given its child's versions as
    (version, change, summary) in the order they were saved; None when it runs the newest."""
    names = [version for version, _, _ in saved]
    newest = versions.newest(names)
    resolved = versions.newest_matching(wanted, names)
    if newest is None or newest == resolved:
        return None
    change, summary = "", ""
    if resolved is not None:
        change = versions.bump_between(resolved, newest)
        # The first version after the one the link runs that made that kind of bump: why.
        summary = next(
            (
                why
                for version, kind, why in saved
                if kind == change
                and versions.is_newer(version, resolved)
                and not versions.is_newer(version, newest)
            ),
            "",
        )
    return Upgrade(
        range=wanted,
        resolved=resolved,
        newest=newest,
        change=change,
        summary=summary,
        widened=versions.widened(wanted, newest),
    )


def _steps(definition: dict) -> list[dict]:
    return definition.get("planning", {}).get("static_plan", {}).get("steps", [])
