"""A condition as fields of a form: rows of (field, operator, value), their join, and the raw
JSONLogic box as the advanced form, laid into any form (a child's row, a plan step's exit).

Rows and the raw box travel together with the mode the page showed (`<name>_mode`) and the
raw text it showed (`<name>_shown`): an edited raw box wins, else the rows do; an expression
rows cannot say is shown raw (mode "raw") and kept until the designer edits it or fills rows
to replace it. Nothing typed is lost: after a clean, the box and the rows show what won.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms

from designer.editor import conditions
from designer.editor.conditions import ConditionError, Row

MOST_LINES = 8


@dataclass
class ConditionView:
    """What the template shows of one condition."""

    name: str
    label: str
    join: forms.BoundField
    lines: list[tuple[forms.BoundField, forms.BoundField, forms.BoundField]]
    raw: forms.BoundField
    hidden: list[forms.BoundField]
    raw_mode: bool
    datalist: str
    # A field shown after the condition (an exit's "go to").
    extra: forms.BoundField | None = None


class ConditionFields:
    """The fields of the condition `name` in `form`; `clean(form)` answers its JSONLogic."""

    def __init__(
        self,
        form: forms.Form,
        name: str,
        *,
        label: str,
        expression: Any,
        datalist: str,
        help_text: str = "",
    ) -> None:
        self.name, self.label, self.datalist = name, label, datalist
        shown = conditions.to_rows(expression)
        rows, join = shown if shown is not None else ([], "all")
        mode = "rows" if shown is not None else "raw"
        raw_text = conditions.show_expression(expression)
        if form.is_bound:
            # The lines posted up to the last one with something in it, and one blank line
            # to add another: blank lines posted back do not pile up.
            last, index = -1, 0
            while index < MOST_LINES and form.add_prefix(self.key(index, "field")) in form.data:
                typed = (
                    str(form.data.get(form.add_prefix(self.key(index, part)), "")).strip()
                    for part in ("field", "value")
                )
                if any(typed):
                    last = index
                index += 1
            lines = min(last + 2, MOST_LINES)
        else:
            lines = min(len(rows) + 1, MOST_LINES)
        fields = form.fields
        fields[f"{name}_join"] = forms.ChoiceField(
            choices=conditions.JOIN_CHOICES, initial=join, label="Holds when", required=False
        )
        for index in range(lines):
            row = rows[index] if index < len(rows) else None
            fields[self.key(index, "field")] = forms.CharField(
                required=False,
                max_length=conditions.MOST_FIELD,
                label="Field",
                initial=row.field if row else "",
                widget=forms.TextInput(attrs={"list": datalist, "autocomplete": "off"}),
            )
            fields[self.key(index, "op")] = forms.ChoiceField(
                choices=conditions.OPERATOR_CHOICES,
                required=False,
                label="Operator",
                initial=row.operator if row else "is",
            )
            fields[self.key(index, "value")] = forms.CharField(
                required=False,
                max_length=conditions.MOST_VALUE,
                label="Value",
                initial=conditions.show_value(row.value, row.operator) if row else "",
            )
        fields[f"{name}_raw"] = forms.CharField(
            required=False,
            label=f"{label} as JSONLogic",
            initial=raw_text,
            help_text=help_text,
            widget=forms.Textarea(attrs={"rows": 2, "class": "json-editor", "spellcheck": "false"}),
        )
        fields[f"{name}_mode"] = forms.CharField(
            required=False, initial=mode, widget=forms.HiddenInput
        )
        fields[f"{name}_shown"] = forms.CharField(
            required=False, initial=raw_text, widget=forms.HiddenInput
        )
        self.lines = lines

    def key(self, index: int, part: str) -> str:
        return f"{self.name}_{index}_{part}"

    def view(self, form: forms.Form, extra: forms.BoundField | None = None) -> ConditionView:
        n = self.name
        return ConditionView(
            name=n,
            label=self.label,
            join=form[f"{n}_join"],
            lines=[
                (form[self.key(i, "field")], form[self.key(i, "op")], form[self.key(i, "value")])
                for i in range(self.lines)
            ],
            raw=form[f"{n}_raw"],
            hidden=[form[f"{n}_mode"], form[f"{n}_shown"]],
            raw_mode=(form[f"{n}_mode"].value() or "rows") == "raw",
            datalist=self.datalist,
            extra=extra,
        )

    def clean(self, form: forms.Form) -> Any:
        """The condition's JSONLogic (None for none), or errors at the lines or the box."""
        data = form.cleaned_data
        n = self.name
        raw_text = data.get(f"{n}_raw") or ""
        edited = raw_text.strip() != (data.get(f"{n}_shown") or "").strip()
        rows, wrong = self._rows(form)
        raw_mode = data.get(f"{n}_mode") == "raw"
        if edited or (raw_mode and not rows and not wrong):
            try:
                expression = conditions.read_expression(raw_text)
            except ConditionError as exc:
                form.add_error(f"{n}_raw", str(exc))
                return None
            self._show(form, raw_text, "raw" if edited or raw_mode else "rows", clear=True)
            return expression
        if wrong:
            return None
        expression = conditions.to_logic(rows, data.get(f"{n}_join") or "all")
        self._show(form, conditions.show_expression(expression), "rows", clear=False)
        return expression

    def _rows(self, form: forms.Form) -> tuple[list[Row], bool]:
        rows, wrong = [], False
        data = form.cleaned_data
        for index in range(self.lines):
            field = data.get(self.key(index, "field")) or ""
            operator = data.get(self.key(index, "op")) or "is"
            value = data.get(self.key(index, "value")) or ""
            if not field.strip() and not value.strip():
                continue
            try:
                path = conditions.check_field(field)
            except ConditionError as exc:
                form.add_error(self.key(index, "field"), str(exc))
                wrong = True
                continue
            try:
                rows.append(Row(path, operator, conditions.parse_value(value, operator)))
            except ConditionError as exc:
                form.add_error(self.key(index, "value"), str(exc))
                wrong = True
        return rows, wrong

    def _show(self, form: forms.Form, raw_text: str, mode: str, *, clear: bool) -> None:
        """Make the page show what won: the box and what it showed, the mode, and (when the
        box won) no rows, so the next post does not take stale rows for new ones."""
        data = form.data.copy()
        n = self.name
        data[form.add_prefix(f"{n}_raw")] = raw_text
        data[form.add_prefix(f"{n}_shown")] = raw_text
        data[form.add_prefix(f"{n}_mode")] = mode
        if clear:
            for index in range(self.lines):
                for part in ("field", "value"):
                    data[form.add_prefix(self.key(index, part))] = ""
        form.data = data
