"""The inbox's filters and the four decision forms of a request's page.

The forms only read what a person typed (JSON parsed, a constraint put in the shape the
service takes); every rule of a decision is `approval_decide`'s, and what it refuses comes
back to the field it names.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.db.models import QuerySet

from approvals.argument_fields import (
    MISSING,
    ArgumentField,
    argument_fields,
    as_text,
    initial_text,
    parse_value,
)
from approvals.models import Approval, Decision, Risk, Trigger
from approvals.services import FEEDBACK_MAX, DecisionRefused, lockable_tools
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

    def __init__(self, *args: Any, approval: Approval | None = None, **kwargs: Any) -> None:
        # The request decided: the edit form's fields come from its schema, the lock's
        # tool choices from its workspace.
        super().__init__(*args, **kwargs)
        self.approval = approval

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


KIND_LABELS = {
    "string": "text",
    "number": "number",
    "integer": "whole number",
    "boolean": "yes or no",
    "enum": "one of",
    "array": "list",
}


class EditForm(DecisionForm):
    """An edit of what was asked. Tool arguments come as fields generated from the tool's
    schema (`approvals/argument_fields.py`) with the raw JSON as the advanced form; the page's
    script keeps the two in step and says in `source` which one the person edited last.
    Without a script, the raw JSON wins when it was changed, else the fields."""

    decision = Decision.EDIT
    payload = forms.CharField(
        label="Raw JSON",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 12, "class": "json-editor", "spellcheck": "false"}),
    )
    source = forms.ChoiceField(
        choices=[("", ""), ("fields", "fields"), ("json", "json")],
        required=False,
        widget=forms.HiddenInput(attrs={"data-edit-source": ""}),
    )

    def __init__(self, *args: Any, approval: Approval | None = None, **kwargs: Any) -> None:
        super().__init__(*args, approval=approval, **kwargs)
        self.original = approval.payload if approval is not None else None
        schema = approval.edit_schema if approval is not None else None
        if approval is None or approval.subject != "tool_arguments":
            schema = None  # a plan or an output is edited as JSON
        self.arguments, self.raw_only = argument_fields(schema)
        self.mode = ""
        for index, field in enumerate(self.arguments):
            self.fields[f"arg_{index}"] = self._form_field(field)
            self.initial.setdefault(f"arg_{index}", initial_text(field, self.original))
        self.order_fields([f"arg_{i}" for i in range(len(self.arguments))] + ["payload"])

    @staticmethod
    def _form_field(field: ArgumentField) -> forms.Field:
        label = field.title or field.name
        attrs = {"data-arg": field.name, "data-kind": field.kind}
        if field.kind == "boolean":
            choices = [("true", "Yes"), ("false", "No")]
            if not field.required:
                choices.insert(0, ("", "(not set)"))
            widget: forms.Widget = forms.Select(choices=choices, attrs=attrs)
        elif field.kind == "enum":
            choices = [(str(i), as_text(v)) for i, v in enumerate(field.choices)]
            if not field.required:
                choices.insert(0, ("", "(not set)"))
            attrs["data-choices"] = json.dumps(list(field.choices))
            widget = forms.Select(choices=choices, attrs=attrs)
        elif field.kind == "array":
            attrs["data-items"] = field.item_kind or "string"
            if field.choices:
                attrs["data-choices"] = json.dumps(list(field.choices))
            widget = forms.Textarea(attrs={**attrs, "rows": 3})
        elif field.kind in ("number", "integer"):
            widget = forms.TextInput(attrs={**attrs, "inputmode": "decimal"})
        else:
            widget = forms.TextInput(attrs=attrs)
        help_text = field.description
        if field.kind == "array":
            help_text = (help_text + " " if help_text else "") + "One item a line."
            if field.choices:
                help_text += " Choices: " + ", ".join(as_text(c) for c in field.choices) + "."
        form_field = forms.CharField(
            label=label,
            required=False,  # what is required is the schema's to say, by field
            strip=False,
            help_text=help_text,
            widget=widget,
        )
        form_field.schema_required = field.required  # type: ignore[attr-defined]
        form_field.kind_label = KIND_LABELS[field.kind]  # type: ignore[attr-defined]
        return form_field

    @property
    def argument_boundfields(self) -> list[forms.BoundField]:
        return [self[f"arg_{i}"] for i in range(len(self.arguments))]

    @property
    def raw_open(self) -> bool:
        """The raw JSON box starts open when it is the only way to edit something."""
        return not self.arguments or bool(self.raw_only) or self.mode == "json"

    def _chosen_mode(self) -> str:
        source = self.data.get(self.add_prefix("source"))
        if source in ("fields", "json"):
            return source
        typed = [self.add_prefix(f"arg_{i}") in self.data for i in range(len(self.arguments))]
        if not any(typed):
            return "json"
        raw = self.data.get(self.add_prefix("payload"), "")
        if not raw.strip():
            return "fields"
        try:
            return "fields" if form_json_loads(raw) == self.original else "json"
        except forms.ValidationError:
            return "json"

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        self.mode = self._chosen_mode()
        raw = cleaned.get("payload") or ""
        if self.mode == "json":
            if not raw.strip():
                self.add_error("payload", "Write the edited payload as JSON.")
                return cleaned
            try:
                cleaned["payload"] = form_json_loads(raw)
            except forms.ValidationError as exc:
                self.add_error("payload", exc)
            return cleaned
        base: Any = self.original
        if raw.strip():
            try:
                base = form_json_loads(raw)
            except forms.ValidationError:
                base = self.original
        payload = dict(base) if isinstance(base, dict) else {}
        for index, field in enumerate(self.arguments):
            name = f"arg_{index}"
            if name in self.errors:
                continue
            try:
                value = parse_value(field, cleaned.get(name) or "", present=field.name in payload)
            except ValueError as exc:
                self.add_error(name, str(exc))
                continue
            if value is MISSING:
                payload.pop(field.name, None)
            else:
                payload[field.name] = value
        cleaned["payload"] = payload
        return cleaned

    def add_refusal(self, refused: DecisionRefused) -> None:
        """With the fields: `payload.limit` lands at the limit field, the rest above them."""
        if self.mode != "fields":
            super().add_refusal(refused)
            return
        by_name = {field.name: f"arg_{i}" for i, field in enumerate(self.arguments)}
        for path, message in refused.details.items():
            head, _, inner = path.partition(".")
            name, _, deeper = inner.partition(".")
            if head == "payload" and name in by_name:
                self.add_error(by_name[name], f"{deeper}: {message}" if deeper else message)
            else:
                self.add_error(None, f"{inner}: {message}" if inner else message)
        if not refused.details:
            self.add_error(None, str(refused))

    def decide_kwargs(self) -> dict[str, Any]:
        return super().decide_kwargs() | {"payload": self.cleaned_data["payload"]}


REASON_REQUIRED = "Say why you reject it: the agent is told, and it is kept with the request."


class RejectForm(DecisionForm):
    decision = Decision.REJECT
    notes = forms.CharField(
        label="Reason (the agent is told)",
        max_length=FEEDBACK_MAX,
        widget=forms.Textarea(attrs={"rows": 3}),
        error_messages={"required": REASON_REQUIRED},
    )


class LockConstraintForm(DecisionForm):
    decision = Decision.LOCK_CONSTRAINT
    constraint = forms.CharField(
        label="Constraint the rest of the run must respect",
        max_length=1_000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Do not send anything by email"}),
        error_messages={"required": "Say the constraint in words."},
    )
    forbid_tools = forms.MultipleChoiceField(
        label="Tools to forbid",
        required=False,
        help_text="The workspace's tools and the built-in ones (optional).",
        widget=forms.CheckboxSelectMultiple(attrs={"class": "tool-picks"}),
        error_messages={
            "invalid_choice": "There is no tool named %(value)s in this workspace or among "
            "the built-in tools."
        },
    )
    field_order = ["constraint", "forbid_tools", "notes"]

    def __init__(self, *args: Any, approval: Approval | None = None, **kwargs: Any) -> None:
        super().__init__(*args, approval=approval, **kwargs)
        tools = lockable_tools(approval) if approval is not None else []
        self.fields["forbid_tools"].choices = [(tool, tool) for tool in tools]

    def clean_forbid_tools(self) -> list[str]:
        return list(dict.fromkeys(self.cleaned_data["forbid_tools"]))

    def decide_kwargs(self) -> dict[str, Any]:
        constraint: dict[str, Any] = {"constraint": self.cleaned_data["constraint"]}
        if self.cleaned_data["forbid_tools"]:
            constraint["forbid_tools"] = self.cleaned_data["forbid_tools"]
        return super().decide_kwargs() | {"constraint": constraint}


class RequestIdsField(forms.Field):
    """The ids of the picked requests: ASCII digits within the id column's range (anything
    else was not written by the page)."""

    widget = forms.MultipleHiddenInput
    ID = re.compile(r"[0-9]{1,19}")

    def to_python(self, value: Any) -> list[int]:
        if not value:
            return []
        if not isinstance(value, list | tuple):
            value = [value]
        ids = []
        for item in value:
            if not (isinstance(item, str) and self.ID.fullmatch(item)) or int(item) >= 2**63:
                raise forms.ValidationError("These are not requests of the list.")
            ids.append(int(item))
        return ids


class BulkDecisionForm(forms.Form):
    """Approve or reject the requests picked in the list (one, or several at once). Without
    `confirmed` the page asks first; a rejection needs its reason."""

    MAX_IDS = 100  # the list shows at most this many

    decision = forms.ChoiceField(
        choices=[(Decision.APPROVE, "Approve"), (Decision.REJECT, "Reject")],
        error_messages={"required": "Pick approve or reject."},
    )
    ids = RequestIdsField(required=False)
    reason = forms.CharField(
        label="Reason (the agent is told)",
        required=False,
        max_length=FEEDBACK_MAX,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)
    q = forms.CharField(required=False, max_length=2_000, widget=forms.HiddenInput)

    def __init__(self, data: Any) -> None:
        data = data.copy()
        # A row's own button names its decision and request ("approve:12").
        one = data.get("one", "")
        decision, _, pk = one.partition(":")
        if pk:
            data.setlist("ids", [pk])
            data["decision"] = decision
        super().__init__(data)

    def clean_ids(self) -> list[int]:
        ids = list(dict.fromkeys(self.cleaned_data["ids"]))
        if not ids:
            raise forms.ValidationError("Pick at least one request.")
        if len(ids) > self.MAX_IDS:
            raise forms.ValidationError(f"Pick at most {self.MAX_IDS} requests at once.")
        return ids

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        reason = (cleaned.get("reason") or "").strip()
        cleaned["reason"] = reason
        if cleaned.get("decision") == Decision.REJECT and cleaned.get("confirmed") and not reason:
            self.add_error("reason", REASON_REQUIRED)
        return cleaned


# Where a refusal's detail lands: (head, rest of the path) → form field.
REFUSAL_FIELDS = {
    ("constraint", "constraint"): "constraint",
    ("constraint", "forbid_tools"): "forbid_tools",
}

DECISION_FORMS: dict[str, type[DecisionForm]] = {
    form.decision: form for form in (ApproveForm, EditForm, RejectForm, LockConstraintForm)
}
