"""The run input form as a wizard: `metadata_extensions.ui_hints.form_layout: "wizard"`.

The fields of `RunInputForm` (runs/forms.py) are laid out one page per field, or per group of
fields when the input schema has many, with Back and Next, then a review of everything typed
before the run starts. It is the same form either way: the same fields, the same schema and
rules, the same `input_data`.

Every page is one POST of the whole form: the fields of the page are shown, every other field
rides along as a hidden input, and the server says which page comes next. So it works without
JavaScript (each page is a page), with htmx (each page swaps in place), and nothing typed is
lost going back and forth; no session holds a half-typed input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django import forms
from django.forms.forms import NON_FIELD_ERRORS

from entities.definition import FORM_LAYOUTS
from runs.forms import ChoiceOfValues, RunInputForm

# Names no input property can take (they are not identifiers: runs/forms.py `_NAME`).
STEP = "wizard-step"
GO = "wizard-go"
# Up to this many fields, a page each; past it, the fields are grouped so that there are
# never more pages than this.
MOST_PAGES = 6


def form_layout(definition: Any) -> str:
    """The input form's layout the definition asks for: "single" or "wizard". A value the
    definition check refuses (one saved before it did) is the single form."""
    hints: Any = {}
    if isinstance(definition, dict):
        extensions = definition.get("metadata_extensions")
        if isinstance(extensions, dict):
            hints = extensions.get("ui_hints") or {}
    layout = hints.get("form_layout") if isinstance(hints, dict) else None
    return layout if layout in FORM_LAYOUTS else "single"


@dataclass(frozen=True)
class Page:
    number: int  # from 1; the review is the page after the last
    fields: tuple[str, ...]
    title: str


def pages_of(form: RunInputForm) -> list[Page]:
    """The form's fields in their order, a page each, or grouped in pages of equal size
    when there are more than MOST_PAGES."""
    names = list(form.fields)
    size = max(1, math.ceil(len(names) / MOST_PAGES))
    pages = []
    for number, start in enumerate(range(0, len(names), size), start=1):
        chunk = tuple(names[start : start + size])
        labels = [str(form.fields[name].label or name) for name in chunk]
        pages.append(Page(number, chunk, ", ".join(labels)))
    return pages


@dataclass(frozen=True)
class Answer:
    """One field as the review shows it."""

    label: str
    value: str


class InputWizard:
    """Which page of `form` to show, what the person asked for (`GO`), and whether the
    input is complete. `finished` is true once the review's Start was pressed on an input
    the form accepts; the caller then starts the run with `form.input_data`."""

    def __init__(self, form: RunInputForm, data: Any = None) -> None:
        self.form = form
        self.pages = pages_of(form)
        self.review = len(self.pages) + 1
        self.step = 1
        self.finished = False
        # 422 when the page shown is there because of its problems.
        self.status = 200
        if data is not None:
            self._move(data)

    @classmethod
    def of(cls, layout: str, form: RunInputForm, data: Any = None) -> InputWizard | None:
        """The wizard for `layout`, or None for the single form (also when the input is one
        JSON text: there is nothing to page through)."""
        if layout != "wizard" or form.single_json or not form.fields:
            return None
        return cls(form, data)

    def _move(self, data: Any) -> None:
        current = _number(data.get(STEP), default=1, most=self.review)
        go = str(data.get(GO, "next"))
        if go == "back":
            self._show(max(1, current - 1))
        elif go.startswith("page-"):
            # Back to a page already passed (the review's "Change"), never past one unseen.
            self._show(_number(go.removeprefix("page-"), default=current, most=current))
        elif current == self.review:
            self._finish()
        else:
            self._next(current)

    def _next(self, current: int) -> None:
        self.form.is_valid()
        wrong = self._wrong_pages()
        if current in wrong:
            self._show(current, problems=True)
        elif current + 1 == self.review and wrong:
            # The review shows only a complete input: the first page with a problem instead.
            self._show(min(wrong), problems=True)
        else:
            self._show(current + 1, problems=current + 1 == self.review)

    def _finish(self) -> None:
        if self.form.is_valid():
            self.finished = True
            self.step = self.review
            return
        wrong = self._wrong_pages()
        self._show(min(wrong) if wrong else self.review, problems=True)

    def _wrong_pages(self) -> set[int]:
        errors = self.form.errors
        return {page.number for page in self.pages if any(name in errors for name in page.fields)}

    def _show(self, step: int, *, problems: bool = False) -> None:
        """Show `step` with the problems of its own fields only (and the input's general
        ones on the review); a page one goes back to shows none."""
        self.step = step
        self.status = 422 if problems and self.form.errors else 200
        if not self.form.is_bound:
            return
        if not self.on_review:
            # The page came after a click: its first field takes the keyboard (htmx honours
            # autofocus in what it swaps in, as a browser does on a page).
            self.form.fields[self.page.fields[0]].widget.attrs["autofocus"] = True
        shown = set(self.page.fields) if problems and not self.on_review else set()
        if problems and self.on_review:
            shown = {NON_FIELD_ERRORS}
        for name in list(self.form.errors):
            if name not in shown:
                del self.form.errors[name]
        if not self.form.errors:
            self.status = 200

    # -- what the templates read ---------------------------------------------------------------

    @property
    def on_review(self) -> bool:
        return self.step == self.review

    @property
    def page(self) -> Page:
        return self.pages[min(self.step, len(self.pages)) - 1]

    @property
    def step_name(self) -> str:
        return STEP

    @property
    def go_name(self) -> str:
        return GO

    @property
    def visible_fields(self) -> list[forms.BoundField]:
        if self.on_review:
            return []
        return [self.form[name] for name in self.page.fields]

    @property
    def hidden_fields(self) -> list[forms.BoundField]:
        """Every field not on the page shown, carried along as a hidden input."""
        shown = {field.name for field in self.visible_fields}
        return [self.form[name] for name in self.form.fields if name not in shown]

    @property
    def first_visible(self) -> str:
        fields = self.visible_fields
        return fields[0].name if fields else ""

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The pages and the review, for the list of steps above the form."""
        titles = [(page.number, page.title) for page in self.pages] + [(self.review, "Review")]
        return [
            {"number": number, "title": title, "current": number == self.step}
            for number, title in titles
        ]

    @property
    def review_pages(self) -> list[tuple[Page, list[Answer]]]:
        """Each page with what its fields hold, as typed."""
        return [
            (page, [self._answer(self.form[name]) for name in page.fields]) for page in self.pages
        ]

    def _answer(self, field: forms.BoundField) -> Answer:
        label, value = str(field.label), field.value()
        if isinstance(field.field, forms.BooleanField):
            return Answer(label, "Yes" if value is True or value == "True" else "No")
        if isinstance(field.field, ChoiceOfValues):
            key = field.field.prepare_value(value)
            return Answer(label, str(field.field.values[key]) if key in field.field.values else "—")
        text = "" if value is None else str(field.field.prepare_value(value))
        return Answer(label, text or "—")


def _number(raw: Any, *, default: int, most: int) -> int:
    try:
        number = int(str(raw))
    except ValueError:
        return default
    return min(max(number, 1), most)
