"""The dashboard's filters: a workspace among the user's, an entity among that workspace's, and
a period. A value the user may not pick (another workspace's id, an entity they cannot see, an
unknown period) is a field error naming the problem; it never says whether the object exists.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.urls import reverse_lazy

from dashboard.selectors import DEFAULT_PERIOD, PERIODS, dashboard_entities, dashboard_workspaces
from entities.forms import EntityPickField
from entities.models import Workspace

ENTITIES_OF = "entities_of"


class DashboardFilterForm(forms.Form):
    workspace = forms.ModelChoiceField(
        queryset=Workspace.objects.none(),
        required=False,
        empty_label="All my workspaces",
        error_messages={
            "invalid_choice": "There is no workspace %(value)s among yours; pick one of the list."
        },
    )
    entity = EntityPickField(suggest_url=reverse_lazy("runs:entity_suggest"))
    period = forms.ChoiceField(
        choices=[(key, period.label) for key, period in PERIODS.items()],
        required=False,
        error_messages={
            "invalid_choice": "%(value)s is not a period; use one of " + ", ".join(PERIODS) + "."
        },
    )

    def __init__(self, data: Any, *, user: Any) -> None:
        super().__init__(data)
        self.user = user
        self.fields["workspace"].queryset = dashboard_workspaces(user)
        self.fields["entity"].queryset = dashboard_entities(user)

    def clean_period(self) -> str:
        return self.cleaned_data["period"] or DEFAULT_PERIOD

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        workspace, entity = cleaned.get("workspace"), cleaned.get("entity")
        if workspace is not None and entity is not None and entity.workspace_id != workspace.pk:
            # The page sends the workspace its entity list was made for (ENTITIES_OF): when
            # the person has just picked another workspace, the entity chosen in the list
            # before is let go rather than refused.
            listed_for = self.data.get(ENTITIES_OF, "")
            if listed_for and listed_for != str(workspace.pk):
                cleaned["entity"] = None
            else:
                self.add_error(
                    "entity",
                    f"{entity.name} is an entity of {entity.workspace.name}, "
                    f"not of {workspace.name}.",
                )
        return cleaned

    def entities_listed_for(self) -> str:
        """After validation (which takes any entity of the user's, so that a mismatch gets
        its own message): the workspace the entity picker suggests from, which the page
        sends back as ENTITIES_OF."""
        workspace = getattr(self, "cleaned_data", {}).get("workspace")
        if workspace is None:
            return "all"
        return str(workspace.pk)

    def query(self) -> str:
        """The valid filters as a query string, for the address bar."""
        values: dict[str, Any] = {}
        if self.cleaned_data.get("workspace") is not None:
            values["workspace"] = self.cleaned_data["workspace"].pk
        if self.cleaned_data.get("entity") is not None:
            values["entity"] = self.cleaned_data["entity"].pk
        if self.cleaned_data["period"] != DEFAULT_PERIOD:
            values["period"] = self.cleaned_data["period"]
        return urlencode(values)
