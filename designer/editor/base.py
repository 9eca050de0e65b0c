"""What every section of the editor is: a form over part of a definition, with row sets for
its lists, that reads its values from the definition, writes them back, and claims the
problems whose path it edits."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django import forms
from django.forms.formsets import BaseFormSet, formset_factory
from django.http import QueryDict

from entities.definition import Problem

# `hierarchy.children[2].condition` → ("hierarchy.children", 2, ".condition")
_INDEXED = re.compile(r"^\[(\d+)\](.*)$")


@dataclass(frozen=True)
class EditorContext:
    """What sections may need beyond the definition: where the entity lives and who edits."""

    workspace: Any
    entity: Any  # None for a new entity
    entity_type: str
    user: Any
    extra: dict[str, Any] = field(default_factory=dict)


def add_error(form: forms.Form, field: str | None, message: str) -> None:
    """`form.add_error` that also works on a form shown unbound (the raw JSON put back into
    the fields, with the services' problems): Django's needs the cleaned data it removes the
    field from, which only a bound form has."""
    if not hasattr(form, "cleaned_data"):
        form.cleaned_data = {}
    form.add_error(field, message)


class RowForm(forms.Form):
    """One row of a list (an example, a child, a plan step). `paths` maps a path under the
    row (".scenario") to the field that edits it; a path not listed goes to the row as a
    whole."""

    paths: ClassVar[dict[str, str]] = {}

    def place(self, rest: str, message: str) -> None:
        for prefix, name in sorted(self.paths.items(), key=lambda item: -len(item[0])):
            if rest == prefix or rest.startswith((prefix + ".", prefix + "[")):
                add_error(self, name, message)
                return
        add_error(self, None, message)


@dataclass(frozen=True)
class Rows:
    """A list of the definition edited as rows: `path` is where the list is in the definition."""

    form: type[RowForm]
    path: str
    title: str
    max_rows: int = 100
    add_label: str = "Add a row"


class Section:
    """A part of the definition as a form. Subclasses set `form_class`, `rows`, `paths` and
    implement `initial` (values from the definition) and `write` (values into it)."""

    key: ClassVar[str]
    title: ClassVar[str]
    template: ClassVar[str] = "designer/editor/_section.html"
    # Rendered after the fields (datalists, previews); "" for none.
    extra_template: ClassVar[str] = ""
    # Rendered into the check's answer (out-of-band swaps of what the fields make); "" for none.
    check_template: ClassVar[str] = ""
    intro: ClassVar[str] = ""
    # The form's fields under headings: ((heading or "", (field names…)), …); empty: all.
    groups: ClassVar[tuple[tuple[str, tuple[str, ...]], ...]] = ()
    form_class: ClassVar[type[forms.Form]] = forms.Form
    rows: ClassVar[dict[str, Rows]] = {}
    # definition path → form field, for placing problems
    paths: ClassVar[dict[str, str]] = {}

    def __init__(
        self,
        definition: dict,
        data: QueryDict | None,
        context: EditorContext,
        *,
        add_row: str = "",
    ) -> None:
        self.context = context
        self.definition = definition
        self.form = self.form_class(
            data, initial=self.initial(definition), prefix=self.key, **self.form_kwargs()
        )
        self.rowsets: dict[str, BaseFormSet] = {}
        self.kept: dict[str, list[RowForm]] = {}
        for name, spec in self.rows.items():
            prefix = f"{self.key}-{name}"
            formset_class = formset_factory(
                spec.form,
                extra=0,
                can_delete=True,
                max_num=spec.max_rows,
                validate_max=True,
                absolute_max=spec.max_rows,
            )
            bound = data
            if data is not None and add_row == prefix:
                bound = data.copy()
                total = f"{prefix}-TOTAL_FORMS"
                try:
                    count = int(bound.get(total, "0"))
                except ValueError:
                    count = 0
                bound[total] = str(min(count + 1, spec.max_rows))
            initial = self.row_initial(name, definition) if data is None else None
            self.rowsets[name] = formset_class(
                bound, initial=initial, prefix=prefix, form_kwargs=self.row_kwargs(name)
            )

    # -- what subclasses fill in -------------------------------------------------------------

    def form_kwargs(self) -> dict[str, Any]:
        return {}

    def row_kwargs(self, name: str) -> dict[str, Any]:
        return {}

    def initial(self, definition: dict) -> dict[str, Any]:
        return {}

    def row_initial(self, name: str, definition: dict) -> list[dict[str, Any]]:
        return []

    def write(self, definition: dict, data: dict[str, Any], rows: dict[str, list[dict]]) -> None:
        """Put the cleaned values into `definition` (a copy the editor owns)."""

    # -- the editor's side -------------------------------------------------------------------

    def is_valid(self) -> bool:
        valid = self.form.is_valid()
        for rowset in self.rowsets.values():
            valid = rowset.is_valid() and valid
        return valid

    def apply(self, definition: dict) -> None:
        """Write this section's values into `definition`; only after `is_valid()`."""
        rows: dict[str, list[dict]] = {}
        for name, rowset in self.rowsets.items():
            deleted = set(rowset.deleted_forms)
            initial = set(rowset.initial_forms)
            # An added row left empty is no row; a removed one is gone.
            kept = [
                form
                for form in rowset.forms
                if form not in deleted and (form in initial or form.has_changed())
            ]
            self.kept[name] = kept
            rows[name] = [form.cleaned_data for form in kept]
        self.write(definition, self.form.cleaned_data, rows)

    def claims(self, problem: Problem) -> bool:
        """Whether `problem` is about a part of the definition this section edits."""
        path = problem.path
        prefixes = [spec.path for spec in self.rows.values()] + list(self.paths)
        return any(
            path == prefix or path.startswith((prefix + ".", prefix + "[")) for prefix in prefixes
        )

    def place(self, problem: Problem) -> bool:
        """Show `problem` at the field that edits its path; False when it is not ours."""
        path = problem.path
        for name, spec in sorted(self.rows.items(), key=lambda item: -len(item[1].path)):
            if path.startswith(spec.path):
                found = _INDEXED.match(path[len(spec.path) :])
                kept = self.kept.get(name) or list(self.rowsets[name].forms)
                if found and int(found.group(1)) < len(kept):
                    kept[int(found.group(1))].place(found.group(2), problem.message)
                    return True
                if path == spec.path:
                    add_error(self.form, None, problem.message)
                    return True
        for prefix, name in sorted(self.paths.items(), key=lambda item: -len(item[0])):
            if path == prefix or path.startswith((prefix + ".", prefix + "[")):
                add_error(self.form, name or None, problem.message)
                return True
        return False

    def all_forms(self) -> Iterator[forms.Form]:
        yield self.form
        for rowset in self.rowsets.values():
            yield from rowset.forms

    @property
    def field_groups(self) -> list[tuple[str, list[forms.BoundField]]]:
        """The form's visible fields under their headings, for the template."""
        if not self.groups:
            return [("", list(self.form.visible_fields()))]
        return [(heading, [self.form[name] for name in names]) for heading, names in self.groups]

    @property
    def row_lists(self) -> list[tuple[Rows, BaseFormSet]]:
        """Each list of the section with its rows, for the template."""
        return [(self.rows[name], rowset) for name, rowset in self.rowsets.items()]

    @property
    def has_errors(self) -> bool:
        return any(form.is_bound and form.errors for form in self.all_forms()) or any(
            rowset.is_bound and rowset.non_form_errors() for rowset in self.rowsets.values()
        )


def moved_row(data: QueryDict, move: str) -> QueryDict:
    """What the page sent with one row moved: `move` is a row's prefix and a direction
    ("plan-steps-2:up"), and the row's values trade places with its neighbour's (every field
    of the row, its conditions and mapping too). Anything else, or a move past either end,
    leaves `data` as it is."""
    row, _, direction = move.rpartition(":")
    prefix, _, index = row.rpartition("-")
    if direction not in ("up", "down") or not index.isdigit() or not prefix:
        return data
    try:
        total = int(data.get(f"{prefix}-TOTAL_FORMS", ""))
    except ValueError:
        return data
    here = int(index)
    there = here - 1 if direction == "up" else here + 1
    if not (0 <= here < total and 0 <= there < total):
        return data
    a, b = f"{prefix}-{here}-", f"{prefix}-{there}-"
    moved = data.copy()
    for key in [key for key in moved if key.startswith((a, b))]:
        del moved[key]
    for key, values in data.lists():
        if key.startswith(a):
            moved.setlist(b + key[len(a) :], values)
        elif key.startswith(b):
            moved.setlist(a + key[len(b) :], values)
    return moved


def deep(definition: dict, *keys: str) -> dict:
    """The dict at `keys` in `definition`, created on the way when missing (or not a dict)."""
    node = definition
    for key in keys:
        inner = node.get(key)
        if not isinstance(inner, dict):
            inner = {}
            node[key] = inner
        node = inner
    return node


def read(definition: Any, *keys: str, default: Any = None) -> Any:
    """The value at `keys`, or `default` when any step is missing or not a dict."""
    node = definition
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return copy.deepcopy(node)
