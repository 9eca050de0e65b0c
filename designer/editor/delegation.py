"""The editor's Delegation section: whether the entity may hire subordinates at run time
(`capabilities.delegation`, runs/engine/hiring.py), from which templates, how many, and the
largest budget one hire may be given."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from designer.editor.base import Section, deep, read
from designer.editor.identity import TagsField

MOST_SUBORDINATES = 100


class DelegationForm(forms.Form):
    enabled = forms.BooleanField(
        required=False,
        label="May hire subordinates",
        help_text="A DELEGATE step of its plan (or of a plan its model proposes) starts a "
        "child run of a template with a role, a task and a budget set aside from this run's.",
    )
    templates = TagsField(
        required=False,
        label="Templates it hires from",
        help_text="Comma-separated names of this workspace's entities; the hierarchy's type "
        "rule applies to them as to children.",
    )
    max_subordinates = forms.IntegerField(
        min_value=1,
        max_value=MOST_SUBORDINATES,
        label="Hires per run, at most",
    )
    max_budget_usd_each = forms.DecimalField(
        required=False,
        min_value=Decimal("0.000001"),
        max_value=Decimal(1_000_000),
        decimal_places=6,
        label="Largest budget of one hire (USD)",
        help_text="Empty: a hire is given what the step asks, out of this run's budget.",
    )


class DelegationSection(Section):
    key = "delegation"
    title = "Delegation"
    intro = "Subordinates the entity may hire while it runs, for parts of its task."
    form_class = DelegationForm
    groups = (("", ("enabled", "templates", "max_subordinates", "max_budget_usd_each")),)
    paths = {
        "capabilities.delegation.enabled": "enabled",
        "capabilities.delegation.templates": "templates",
        "capabilities.delegation.max_subordinates": "max_subordinates",
        "capabilities.delegation.max_budget_usd_each": "max_budget_usd_each",
        "capabilities.delegation": "",
    }

    def initial(self, definition: dict) -> dict[str, Any]:
        delegation = read(definition, "capabilities", "delegation") or {}
        templates = delegation.get("templates")
        return {
            "enabled": delegation.get("enabled") is True,
            "templates": templates if isinstance(templates, list) else [],
            "max_subordinates": delegation.get("max_subordinates") or 5,
            "max_budget_usd_each": delegation.get("max_budget_usd_each"),
        }

    def write(self, definition: dict, data: dict[str, Any], rows: dict[str, list[dict]]) -> None:
        saved = read(definition, "capabilities", "delegation")
        budget = data["max_budget_usd_each"]
        said = {
            "enabled": data["enabled"],
            "templates": data["templates"],
            "max_subordinates": data["max_subordinates"],
            "max_budget_usd_each": None if budget is None else float(budget),
        }
        untouched = not said["enabled"] and not said["templates"]
        if not saved and untouched and said["max_subordinates"] == 5 and budget is None:
            return  # nothing said of delegation: the definition stays as it was
        deep(definition, "capabilities", "delegation").update(said)
