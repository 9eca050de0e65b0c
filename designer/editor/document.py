"""The editor's document: the working definition, the sections over it, and the operations the
page performs (show, re-show from raw JSON, check, save), each placing every problem at the
field it is about.

The whole working definition travels with the form as JSON (`document`), so parts no section
edits, and anything typed into the raw view, are kept across every round trip; the sections'
fields are laid over it. Nothing is trusted from it: the services validate the definition that
results, as they would an import.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.forms.formsets import DELETION_FIELD_NAME
from django.http import QueryDict

from config.json_input import JSONInputRefused, json_input_loads
from designer.editor.base import EditorContext, Section
from designer.editor.children import ChildrenSection
from designer.editor.contract import ContractSection
from designer.editor.delegation import DelegationSection
from designer.editor.governance import GovernanceSection
from designer.editor.identity import IdentitySection
from designer.editor.model import ModelSection
from designer.editor.plan import PlanSection
from designer.editor.tools import ToolsSection
from entities.definition import Problem

# The plan comes after the children: its `write` keeps the steps in step with them (and it
# targets the tools, picked before both).
SECTIONS: tuple[type[Section], ...] = (
    IdentitySection,
    ModelSection,
    ToolsSection,
    ContractSection,
    ChildrenSection,
    PlanSection,
    GovernanceSection,
    DelegationSection,
)

DOCUMENT = "document"
# Widgets a browser sends nothing of when nothing is checked.
CHECKBOXES = frozenset({"checkbox", "checkboxselectmultiple"})
RAW = "raw"


@dataclass
class Editor:
    """The sections of one entity's definition, bound to a request or not."""

    context: EditorContext
    definition: dict
    sections: list[Section]
    # Problems no field claims (a cycle, a budget over the parent's), shown above the form.
    general: list[Problem] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    raw_error: str = ""
    # The names of the fields the page sent: the fields it has (see `check_slots`).
    sent: frozenset[str] = frozenset()

    @classmethod
    def showing(cls, context: EditorContext, definition: dict) -> Editor:
        """The editor filled from `definition`, nothing bound."""
        return cls(context, definition, [s(definition, None, context) for s in SECTIONS])

    @classmethod
    def posted(cls, context: EditorContext, data: QueryDict, *, add_row: str = "") -> Editor:
        """The editor bound to what the page sent; `document` refused gives a general problem."""
        definition, error = _document(data.get(DOCUMENT, ""))
        editor = cls(
            context,
            definition,
            [s(definition, data, context, add_row=add_row) for s in SECTIONS],
            sent=frozenset(data.keys()),
        )
        if error:
            editor.general.append(Problem("", error))
        return editor

    def definition_from_fields(self) -> dict | None:
        """The working definition with every section's values laid over it, or None when a
        field itself is wrong (a number that is not one); those errors are on the fields."""
        definition, wrong = self.definition_so_far()
        return None if wrong or self.general else definition

    def definition_so_far(self) -> tuple[dict, list[Section]]:
        """The working definition with the values of every section whose fields are right
        laid over it, and the sections whose fields are not (their part stays as it was)."""
        definition = copy.deepcopy(self.definition)
        wrong = []
        for section in self.sections:
            if section.is_valid():
                section.apply(definition)
            else:
                wrong.append(section)
        return definition, wrong

    def check(self, problems_of: Callable[[dict], list[Problem]]) -> None:
        """Show every problem of what the fields hold now: the fields' own, and the services'
        for the rest. A section whose fields are wrong kept its old part, so the services'
        problems about that part would be about old values: they wait for the fix."""
        if self.general:
            return
        definition, wrong = self.definition_so_far()
        problems = problems_of(definition)
        self.show_problems([p for p in problems if not any(s.claims(p) for s in wrong)])

    def show_problems(self, problems: list[Problem]) -> None:
        """Put each problem at its field; the rest above the form."""
        self.problems = list(problems)
        for problem in problems:
            if not any(section.place(problem) for section in self.sections):
                self.general.append(problem)

    @property
    def error_count(self) -> int:
        """How many problems the page shows: at fields, on rows, and above the form."""
        count = len(self.general)
        for section in self.sections:
            for form in section.all_forms():
                if form.is_bound:
                    count += sum(len(errors) for errors in form.errors.values())
            for rowset in section.rowsets.values():
                if rowset.is_bound:
                    count += len(rowset.non_form_errors())
        return count

    def check_slots(self) -> list[tuple[str, Any]]:
        """Each problem slot the page has, with the problems it shows now: every form's and
        row set's own, and every field the page sent (a checkbox left unchecked is sent as
        nothing, yet is there). A field the page did not send (the blank line a condition
        grows after a post, a box for an input of a child just picked) has no slot on the
        page until its section is shown again, nor has a row's Remove box: htmx would have
        nowhere to put them, so the check leaves them out; the summary counts their problems
        all the same."""
        slots: list[tuple[str, Any]] = []
        for section in self.sections:
            for form in section.all_forms():
                slots.append((form.prefix, form.non_field_errors()))
                slots += [
                    (field.html_name, field.errors)
                    for field in form.visible_fields()
                    if field.name != DELETION_FIELD_NAME
                    and (field.html_name in self.sent or field.widget_type in CHECKBOXES)
                ]
            slots += [
                (rowset.prefix, rowset.non_form_errors()) for rowset in section.rowsets.values()
            ]
        return slots

    def document_json(self, definition: dict | None = None) -> str:
        return json.dumps(self.definition if definition is None else definition)


def raw_definition(text: str) -> tuple[dict | None, str]:
    """The definition typed into the raw view, or why it cannot be one."""
    definition, error = _document(text)
    return (None, error) if error else (definition, "")


def _document(text: str) -> tuple[dict, str]:
    if not text.strip():
        return {}, "The definition is empty: write it as a JSON object."
    try:
        value = json_input_loads(text, "definition")
    except JSONInputRefused as exc:
        return {}, "; ".join(f"{where}: {what}" for where, what in exc.problems.items())
    except ValueError as exc:
        return {}, f"The definition is not valid JSON: {exc}."
    if not isinstance(value, dict):
        return {}, "The definition must be a JSON object ({…}), with its sections as keys."
    return value, ""
