"""An input mapping as fields of a form: one box per input field of what is called (a child's
input contract, a tool's parameters), each filled with a state path picked from the paths
available there, or a constant. Keys the mapping holds that the target does not list are
kept as boxes too, so nothing in a definition is dropped by showing it."""

from __future__ import annotations

from typing import Any

from django import forms

from designer.editor import conditions
from designer.editor.conditions import ConditionError

MOST_KEYS = 50


class MappingFields:
    """The boxes `map_<i>` (the value) and `map_<i>_key` (hidden: the field it fills)."""

    def __init__(
        self,
        form: forms.Form,
        *,
        target_fields: list[str],
        mapping: Any,
        paths: list[str],
        datalist: str,
    ) -> None:
        self.paths = paths
        mapping = mapping if isinstance(mapping, dict) else {}
        if form.is_bound:
            keys = []
            for index in range(MOST_KEYS):
                key = form.data.get(form.add_prefix(f"map_{index}_key"))
                if key is None:
                    break
                keys.append(key)
        else:
            keys = [str(key) for key in mapping]
        keys = list(dict.fromkeys([*keys, *target_fields]))[:MOST_KEYS]
        self.keys = keys
        for index, key in enumerate(keys):
            form.fields[f"map_{index}"] = forms.CharField(
                required=False,
                max_length=2000,
                label=key,
                initial=conditions.show_source(mapping[key], paths) if key in mapping else "",
                widget=forms.TextInput(attrs={"list": datalist, "autocomplete": "off"}),
            )
            form.fields[f"map_{index}_key"] = forms.CharField(
                required=False, max_length=200, initial=key, widget=forms.HiddenInput
            )

    def boxes(self, form: forms.Form) -> list[forms.BoundField]:
        return [form[f"map_{index}"] for index in range(len(self.keys))]

    def hidden(self, form: forms.Form) -> list[forms.BoundField]:
        return [form[f"map_{index}_key"] for index in range(len(self.keys))]

    def clean(self, form: forms.Form) -> dict[str, Any]:
        """The mapping: each filled box under its field's name; errors at the box."""
        mapping: dict[str, Any] = {}
        for index in range(len(self.keys)):
            key = (form.cleaned_data.get(f"map_{index}_key") or "").strip()
            text = form.cleaned_data.get(f"map_{index}") or ""
            if not key or not text.strip():
                continue
            try:
                mapping[key] = conditions.parse_source(text, self.paths)
            except ConditionError as exc:
                form.add_error(f"map_{index}", str(exc))
        return mapping
