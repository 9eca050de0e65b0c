"""Governance: what a run of the entity may spend and do, where a person decides, and the
safety rails; each limit shown beside what the entity's parents set, since a run under them
also runs under theirs."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django import forms

from designer.editor.base import RowForm, Rows, Section, deep, read
from entities.selectors import entity_parent_list

TRIGGERS = [
    ("BEFORE_EXECUTION", "Before it starts"),
    ("AFTER_PLANNING", "After it plans, before it acts"),
    ("BEFORE_TOOL_CALL", "Before each tool call"),
    ("ON_FAILURE", "When it fails"),
    ("CUSTOM_CONDITION", "When a condition holds"),
]
CHANNELS = [("IN_APP", "Inbox"), ("EMAIL", "Email"), ("SLACK", "Slack")]
TIMEOUT_ACTIONS = [("ABORT", "Abort the run"), ("PROCEED", "Proceed"), ("ESCALATE", "Escalate")]
ON_EXHAUSTED = [
    ("BLOCK", "Wait: the run blocks until someone raises the limit"),
    ("FAIL", "Fail the run"),
]
FILTERS = [
    ("TOXICITY", "Toxicity"),
    ("PII", "Personal data"),
    ("PROFANITY", "Profanity"),
    ("BIAS", "Bias"),
]
ON_FLAGGED = [("REDACT", "Redact what was found"), ("FAIL", "Fail the step")]
AUDIT = [("MINIMAL", "Minimal"), ("STANDARD", "Standard"), ("COMPREHENSIVE", "Comprehensive")]
PII = [("REDACT", "Redact"), ("ENCRYPT", "Encrypt"), ("ALLOW", "Allow")]
MONEY = {"min_value": Decimal(0), "max_value": Decimal(10_000_000), "decimal_places": 6}
MOST_MS = 2_147_483_647


class SecondsField(forms.DecimalField):
    """A duration typed in seconds, kept in milliseconds as the definition has it."""

    def __init__(self, *, min_ms: int = 1, **kwargs: Any) -> None:
        super().__init__(
            min_value=Decimal(min_ms) / 1000,
            max_value=Decimal(MOST_MS) / 1000,
            decimal_places=3,
            **kwargs,
        )

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            seconds = f"{Decimal(value) / 1000:f}"
            # 300 s stays "300": only a fraction's trailing zeros go (1.500 → "1.5").
            return seconds.rstrip("0").rstrip(".") if "." in seconds else seconds
        return value

    def clean(self, value: Any) -> int | None:  # type: ignore[override]
        seconds = super().clean(value)
        return None if seconds is None else int(seconds * 1000)


class GovernanceForm(forms.Form):
    max_cost_usd = forms.DecimalField(
        required=False,
        label="Budget per run (USD)",
        help_text="This run and every run under it.",
        **MONEY,
    )
    cumulative_cost_usd = forms.DecimalField(
        required=False, label="Lifetime budget (USD)", help_text="Across all its runs.", **MONEY
    )
    alert_threshold_usd = forms.DecimalField(
        required=False,
        label="Alert at (USD)",
        help_text="The workspace's admins are told.",
        **MONEY,
    )
    on_budget_exhausted = forms.ChoiceField(choices=ON_EXHAUSTED, label="When the budget runs out")
    timeout = SecondsField(label="Timeout (seconds)", initial=300_000)
    max_recursion_depth = forms.IntegerField(
        min_value=0, max_value=50, label="Deepest nesting of runs below it", initial=5
    )
    max_llm_calls = forms.IntegerField(
        min_value=0,
        max_value=MOST_MS,
        required=False,
        label="Most model calls",
        help_text="Empty: no limit.",
    )
    max_tool_calls = forms.IntegerField(
        min_value=0,
        max_value=MOST_MS,
        required=False,
        label="Most tool calls",
        help_text="Empty: no limit.",
    )
    audit_level = forms.ChoiceField(choices=AUDIT, label="Audit")
    pii_handling = forms.ChoiceField(choices=PII, label="Personal data in records")
    content_filters = forms.MultipleChoiceField(
        choices=FILTERS,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Screen the model's output for",
    )
    on_flagged_output = forms.ChoiceField(choices=ON_FLAGGED, label="When the screen flags output")
    output_validation = forms.BooleanField(
        required=False, label="Check the output against the output contract's schema"
    )


class CheckpointForm(RowForm):
    paths = {
        ".trigger": "trigger",
        ".condition": "condition",
        ".notification_channels": "notification_channels",
        ".timeout_action": "timeout_action",
        ".timeout_ms": "timeout",
        ".approval_required": "approval_required",
    }

    trigger = forms.ChoiceField(choices=TRIGGERS, label="When")
    condition = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "json-editor"}),
        help_text='JSONLogic over the run, e.g. {">": [{"var": "input.amount"}, 1000]}; '
        "only for “When a condition holds”.",
    )
    approval_required = forms.BooleanField(
        required=False, initial=True, label="A person must approve (else they are only told)"
    )
    notification_channels = forms.MultipleChoiceField(
        choices=CHANNELS, required=False, widget=forms.CheckboxSelectMultiple, label="Tell them by"
    )
    timeout = SecondsField(
        required=False,
        min_ms=1000,
        label="Wait at most (seconds)",
        help_text="Empty: wait until someone decides.",
    )
    timeout_action = forms.ChoiceField(choices=TIMEOUT_ACTIONS, label="Then")


class RestrictionForm(RowForm):
    paths = {
        ".restricted_action": "restricted_action",
        ".requires_approval": "requires_approval",
        ".blocked_entirely": "blocked_entirely",
    }

    restricted_action = forms.CharField(max_length=200, label="Action or tool")
    requires_approval = forms.BooleanField(required=False, initial=True, label="Needs approval")
    blocked_entirely = forms.BooleanField(required=False, label="Blocked")


class GovernanceSection(Section):
    key = "governance"
    title = "Governance"
    intro = (
        "Budgets, limits, where a person decides, and the safety rails. Beside each limit, "
        "what the entity's parents set: a run under them also runs under theirs."
    )
    form_class = GovernanceForm
    groups = (
        (
            "Budget",
            ("max_cost_usd", "cumulative_cost_usd", "alert_threshold_usd", "on_budget_exhausted"),
        ),
        ("Limits", ("timeout", "max_recursion_depth", "max_llm_calls", "max_tool_calls")),
        ("Safety rails", ("content_filters", "on_flagged_output", "output_validation")),
        ("Records", ("audit_level", "pii_handling")),
    )
    rows = {
        "checkpoints": Rows(
            CheckpointForm,
            "governance.human_oversight.hitl_checkpoints",
            "Human checkpoints",
            20,
            "Add a checkpoint",
        ),
        "restrictions": Rows(
            RestrictionForm,
            "governance.safety_rails.action_restrictions",
            "Restricted actions",
            50,
            "Add a restricted action",
        ),
    }
    paths = {
        "governance.cost_controls.max_cost_usd": "max_cost_usd",
        "governance.cost_controls.cumulative_cost_usd": "cumulative_cost_usd",
        "governance.cost_controls.alert_threshold_usd": "alert_threshold_usd",
        "governance.cost_controls.on_budget_exhausted": "on_budget_exhausted",
        "governance.execution_limits.timeout_ms": "timeout",
        "governance.execution_limits.max_recursion_depth": "max_recursion_depth",
        "governance.execution_limits.max_llm_calls": "max_llm_calls",
        "governance.execution_limits.max_tool_calls": "max_tool_calls",
        "governance.human_oversight.audit_level": "audit_level",
        "governance.human_oversight.pii_handling": "pii_handling",
        "governance.safety_rails.content_filters": "content_filters",
        "governance.safety_rails.on_flagged_output": "on_flagged_output",
        "governance.safety_rails.output_validation": "output_validation",
        "governance": "",
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, lines in self._inherited().items():
            # Shown under the field by _field.html.
            self.form.fields[name].inherited = lines  # type: ignore[attr-defined]

    def _inherited(self) -> dict[str, list[str]]:
        entity = self.context.entity
        if entity is None:
            return {}
        found: dict[str, list[str]] = {}
        for parent in entity_parent_list(entity=entity):
            governance = parent.governance or {}
            label = parent.display_name or parent.name
            for name, value in _limits(governance).items():
                if value not in (None, [], ""):
                    found.setdefault(name, []).append(f"{label}: {value}")
        return found

    def initial(self, definition: dict) -> dict[str, Any]:
        g = read(definition, "governance") or {}
        cost = g.get("cost_controls") or {}
        limits = g.get("execution_limits") or {}
        oversight = g.get("human_oversight") or {}
        rails = g.get("safety_rails") or {}
        return {
            "max_cost_usd": cost.get("max_cost_usd"),
            "cumulative_cost_usd": cost.get("cumulative_cost_usd"),
            "alert_threshold_usd": cost.get("alert_threshold_usd"),
            "on_budget_exhausted": cost.get("on_budget_exhausted") or "BLOCK",
            "timeout": limits.get("timeout_ms", 300_000),
            "max_recursion_depth": limits.get("max_recursion_depth", 5),
            "max_llm_calls": limits.get("max_llm_calls"),
            "max_tool_calls": limits.get("max_tool_calls"),
            "audit_level": oversight.get("audit_level") or "STANDARD",
            "pii_handling": oversight.get("pii_handling") or "REDACT",
            "content_filters": rails.get("content_filters") or [],
            "on_flagged_output": rails.get("on_flagged_output") or "REDACT",
            "output_validation": bool((rails.get("output_validation") or {}).get("enabled")),
        }

    def row_initial(self, name: str, definition: dict) -> list[dict[str, Any]]:
        if name == "checkpoints":
            rows = read(definition, "governance", "human_oversight", "hitl_checkpoints") or []
            return [_checkpoint_row(row) for row in rows if isinstance(row, dict)]
        rows = read(definition, "governance", "safety_rails", "action_restrictions") or []
        return [
            {
                "restricted_action": row.get("restricted_action", ""),
                "requires_approval": row.get("requires_approval", True),
                "blocked_entirely": row.get("blocked_entirely", False),
            }
            for row in rows
            if isinstance(row, dict)
        ]

    def write(self, definition: dict, data: dict[str, Any], rows: dict[str, list[dict]]) -> None:
        cost = deep(definition, "governance", "cost_controls")
        for name in ("max_cost_usd", "cumulative_cost_usd", "alert_threshold_usd"):
            amount = data[name]
            cost[name] = None if amount is None else float(amount)
        cost["on_budget_exhausted"] = data["on_budget_exhausted"]
        limits = deep(definition, "governance", "execution_limits")
        limits["timeout_ms"] = data["timeout"]
        for name in ("max_recursion_depth", "max_llm_calls", "max_tool_calls"):
            limits[name] = data[name]
        oversight = deep(definition, "governance", "human_oversight")
        oversight["audit_level"] = data["audit_level"]
        oversight["pii_handling"] = data["pii_handling"]
        oversight["hitl_checkpoints"] = [_checkpoint(row) for row in rows["checkpoints"]]
        rails = deep(definition, "governance", "safety_rails")
        rails["content_filters"] = list(data["content_filters"])
        rails["on_flagged_output"] = data["on_flagged_output"]
        deep(rails, "output_validation")["enabled"] = data["output_validation"]
        rails["action_restrictions"] = [
            {
                "restricted_action": row["restricted_action"],
                "requires_approval": row["requires_approval"],
                "blocked_entirely": row["blocked_entirely"],
            }
            for row in rows["restrictions"]
        ]


def _checkpoint_row(row: dict) -> dict[str, Any]:
    condition = row.get("condition")
    if condition is not None and not isinstance(condition, str):
        condition = json.dumps(condition)
    return {
        "trigger": row.get("trigger"),
        "condition": condition or "",
        "approval_required": row.get("approval_required", True),
        "notification_channels": row.get("notification_channels", ["IN_APP"]),
        "timeout": row.get("timeout_ms"),
        "timeout_action": row.get("timeout_action") or "ABORT",
    }


def _checkpoint(row: dict[str, Any]) -> dict[str, Any]:
    # The condition goes as the text typed: the services parse JSONLogic given as text, and
    # name what is wrong in it at this field.
    return {
        "trigger": row["trigger"],
        "condition": row["condition"].strip() or None,
        "approval_required": row["approval_required"],
        "notification_channels": list(row["notification_channels"]),
        "timeout_ms": row["timeout"],
        "timeout_action": row["timeout_action"],
    }


def _limits(governance: dict) -> dict[str, Any]:
    """A parent's limits, by the field of this form they stand beside, as shown."""
    cost = governance.get("cost_controls") or {}
    limits = governance.get("execution_limits") or {}
    rails = governance.get("safety_rails") or {}
    timeout = limits.get("timeout_ms")

    def usd(value: Any) -> str | None:
        return None if value is None else f"${Decimal(str(value)):,.2f}"

    return {
        "max_cost_usd": usd(cost.get("max_cost_usd")),
        "cumulative_cost_usd": usd(cost.get("cumulative_cost_usd")),
        "timeout": None if timeout is None else f"{Decimal(timeout) / 1000:g} s",
        "max_recursion_depth": limits.get("max_recursion_depth"),
        "max_llm_calls": limits.get("max_llm_calls"),
        "max_tool_calls": limits.get("max_tool_calls"),
        "content_filters": ", ".join(rails.get("content_filters") or []),
    }
