"""The inbox's filters and the four decision forms of a request's page.

The forms only read what a person typed (JSON parsed, a constraint put in the shape the
service takes); every rule of a decision is `approval_decide`'s, and what it refuses comes
back to the field it names.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.db.models import QuerySet

from approvals.models import Approval, Decision, Risk, Trigger
from approvals.services import FEEDBACK_MAX, DecisionRefused
from config.json_input import form_json_loads
from entities.models import Entity, Workspace

SORTS = {
    "newest": ("-requested_at", "-pk"),
    "risk": ("-risk_rank", "-requested_at", "-pk"),
}


class InboxFilterForm(forms.Form):
    """The GET parameters of the inbox. A value the user may not pick (another workspace's
    id, an unknown trigger) is dropped, never an error page: the list shows what is left."""

    workspace = forms.ModelChoiceField(
        queryset=Workspace.objects.none(), required=False, empty_label="All workspaces"
    )
    entity = forms.ModelChoiceField(
        queryset=Entity.objects.none(), required=False, empty_label="All entities"
    )
    trigger = forms.ChoiceField(choices=[("", "All triggers"), *Trigger.choices], required=False)
    risk = forms.ChoiceField(
        choices=[("", "Any risk"), *[(value, label.title()) for value, label in Risk.choices]],
        required=False,
    )
    sort = forms.ChoiceField(
        choices=[("newest", "Newest first"), ("risk", "Riskiest first")], required=False
    )

    def __init__(self, data: Any, *, base: QuerySet[Approval]) -> None:
        super().__init__(data)
        # Only what the user's own requests name: the choices come from the scoped list.
        self.fields["workspace"].queryset = Workspace.objects.filter(
            pk__in=base.values("workspace_id")
        ).order_by("name")
        self.fields["entity"].queryset = (
            Entity.objects.filter(pk__in=base.values("entity_id"))
            .select_related("workspace")
            .order_by("name", "workspace__name")
        )
        # Names are unique within a workspace only.
        self.fields["entity"].label_from_instance = lambda entity: (
            f"{entity.name} ({entity.workspace.name})"
        )

    def filters(self) -> dict[str, Any]:
        """The valid filters; an invalid one is left out."""
        self.is_valid()
        cleaned = getattr(self, "cleaned_data", {})
        return {name: cleaned[name] for name in self.fields if cleaned.get(name)}

    def apply(self, queryset: QuerySet[Approval]) -> QuerySet[Approval]:
        filters = self.filters()
        if "workspace" in filters:
            queryset = queryset.filter(workspace=filters["workspace"])
        if "entity" in filters:
            queryset = queryset.filter(entity=filters["entity"])
        if "trigger" in filters:
            queryset = queryset.filter(checkpoint_trigger=filters["trigger"])
        if "risk" in filters:
            queryset = queryset.filter(risk_level=filters["risk"])
        return queryset.order_by(*SORTS[filters.get("sort", "newest")])

    def query(self, **extra: str) -> str:
        """The filters as a query string, for links that keep them."""
        values = {
            name: getattr(value, "pk", value)
            for name, value in self.filters().items()
            if (name, value) != ("sort", "newest")  # the default needs no parameter
        }
        return urlencode(values | extra)


# -- decisions ---------------------------------------------------------------------------------


class DecisionForm(forms.Form):
    decision: str = ""
    notes = forms.CharField(
        label="Notes",
        required=False,
        max_length=FEEDBACK_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
    )

    def decide_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `approval_decide` beyond the approval and the user."""
        return {"decision": self.decision, "notes": self.cleaned_data["notes"]}

    def add_refusal(self, refused: DecisionRefused) -> None:
        """Show what the service refused at the fields it names (`payload.query` at the
        payload, `constraint.forbid_tools` at the tool list…), the rest above the form."""
        elsewhere = not refused.details
        for path, message in refused.details.items():
            head, _, inner = path.partition(".")
            if (head, inner) in REFUSAL_FIELDS:
                self.add_error(REFUSAL_FIELDS[head, inner], message)
            elif head in self.fields:
                self.add_error(head, f"{inner}: {message}" if inner else message)
            else:
                elsewhere = True
        if elsewhere:
            self.add_error(None, str(refused))


class ApproveForm(DecisionForm):
    decision = Decision.APPROVE


class EditForm(DecisionForm):
    decision = Decision.EDIT
    payload = forms.CharField(
        label="Edited payload (JSON)",
        widget=forms.Textarea(attrs={"rows": 12, "class": "json-editor", "spellcheck": "false"}),
        error_messages={"required": "Write the edited payload as JSON."},
    )
    field_order = ["payload", "notes"]

    def clean_payload(self) -> Any:
        return form_json_loads(self.cleaned_data["payload"])

    def decide_kwargs(self) -> dict[str, Any]:
        return super().decide_kwargs() | {"payload": self.cleaned_data["payload"]}


class RejectForm(DecisionForm):
    decision = Decision.REJECT
    notes = forms.CharField(
        label="Feedback for the agent",
        required=False,
        max_length=FEEDBACK_MAX,
        widget=forms.Textarea(attrs={"rows": 3}),
    )


class LockConstraintForm(DecisionForm):
    decision = Decision.LOCK_CONSTRAINT
    constraint = forms.CharField(
        label="Constraint the rest of the run must respect",
        max_length=1_000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Do not send anything by email"}),
        error_messages={"required": "Say the constraint in words."},
    )
    forbid_tools = forms.CharField(
        label="Tools to forbid",
        required=False,
        help_text="Tool ids, separated by commas (optional).",
        widget=forms.TextInput(attrs={"placeholder": "send_email, http_request"}),
    )
    field_order = ["constraint", "forbid_tools", "notes"]

    def clean_forbid_tools(self) -> list[str]:
        raw = self.cleaned_data["forbid_tools"]
        return [tool for tool in (part.strip() for part in raw.split(",")) if tool]

    def decide_kwargs(self) -> dict[str, Any]:
        constraint: dict[str, Any] = {"constraint": self.cleaned_data["constraint"]}
        if self.cleaned_data["forbid_tools"]:
            constraint["forbid_tools"] = self.cleaned_data["forbid_tools"]
        return super().decide_kwargs() | {"constraint": constraint}


# Where a refusal's detail lands: (head, rest of the path) → form field.
REFUSAL_FIELDS = {
    ("constraint", "constraint"): "constraint",
    ("constraint", "forbid_tools"): "forbid_tools",
}

DECISION_FORMS: dict[str, type[DecisionForm]] = {
    form.decision: form for form in (ApproveForm, EditForm, RejectForm, LockConstraintForm)
}
