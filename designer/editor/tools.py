"""Tools: which tools the entity may call, picked from the workspace's registry and the
built-in tools, each shown with its parameters and permission.

A picked tool is written as a reference (`{"tool_id": …}`), so the registry stays the one
place its definition lives and a later change there reaches every entity; a built-in is
usable by its name in every workspace (tools/catalog.py), so it is a reference too.

Tools written in full in the definition that are not the registry's tool as it is (typed in
the JSON view, or brought by an import) are kept exactly as they are and shown as such; they
are edited in the JSON view. So is a reference to a tool that does not exist: the services
name it, and the designer decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django import forms
from django.urls import reverse

from designer.editor.base import Section, add_error, deep, read
from entities.definition import Problem, is_tool_reference
from tools.selectors import UsableTool, usable_tool_count, usable_tools

# How many tools the picker lists before it asks for a search; the picked ones come on top.
PICKER_LIMIT = 100
# The most tools one entity can pick in one request (a guard against a forged post).
MOST_PICKED = 500
MOST_PARAMETERS = 30
_INDEX = re.compile(r"^capabilities\.tools\[(\d+)\]")

PERMISSIONS = {
    "READ": "Reads only",
    "WRITE": "Writes (changes data)",
    "EXECUTE": "Executes (acts outside)",
}


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    required: bool
    description: str


@dataclass(frozen=True)
class ToolChoice:
    """One tool as the picker shows it."""

    tool_id: str
    name: str
    description: str
    permission: str
    permission_label: str
    sandbox: bool
    in_registry: bool
    builtin: bool
    parameters: list[Parameter]
    more_parameters: int
    checked: bool
    restriction: str  # "" or what the entity's safety rails say of it


@dataclass(frozen=True)
class Picker:
    items: list[ToolChoice]
    # Whether tools that match are left out (the list stops at PICKER_LIMIT)
    more: bool
    total: int
    search: str


def parameters_of(definition: dict[str, Any]) -> tuple[list[Parameter], int]:
    """The tool's arguments as its JSON Schema declares them (the first few), and how many
    more there are."""
    schema = read(definition, "function_schema", "parameters") or {}
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return [], 0
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    found = []
    for name, prop in list(properties.items())[:MOST_PARAMETERS]:
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type", "any")
        found.append(
            Parameter(
                name=str(name),
                type=" or ".join(map(str, kind)) if isinstance(kind, list) else str(kind),
                required=name in required,
                description=str(prop.get("description", "")),
            )
        )
    return found, max(0, len(properties) - MOST_PARAMETERS)


def _restrictions(definition: dict) -> dict[str, str]:
    """What the entity's own safety rails say of each tool, by tool_id."""
    rules = read(definition, "governance", "safety_rails", "action_restrictions") or []
    said: dict[str, str] = {}
    for rule in rules if isinstance(rules, list) else []:
        if not isinstance(rule, dict) or not isinstance(rule.get("restricted_action"), str):
            continue
        if rule.get("blocked_entirely"):
            said[rule["restricted_action"]] = "Blocked by this entity's safety rails"
        elif rule.get("requires_approval", True):
            said[rule["restricted_action"]] = "Each call waits for a person's approval"
    return said


def choice_of(tool: UsableTool, *, checked: bool, restriction: str = "") -> ToolChoice:
    definition = tool.definition
    parameters, more = parameters_of(definition)
    permission = str(definition.get("permissions") or "READ")
    return ToolChoice(
        tool_id=tool.tool_id,
        name=str(definition.get("name") or tool.tool_id),
        description=str(definition.get("description") or ""),
        permission=permission,
        permission_label=PERMISSIONS.get(permission, permission),
        sandbox=bool(definition.get("sandbox_mode")),
        in_registry=tool.in_registry,
        builtin=tool.builtin,
        parameters=parameters,
        more_parameters=more,
        checked=checked,
        restriction=restriction,
    )


def picker(
    *,
    workspace: Any,
    picked: list[str],
    search: str = "",
    definition: dict | None = None,
    hide: frozenset[str] = frozenset(),
) -> Picker:
    """The picked tools first (always, so a search never drops one), then the others that
    match `search`, at most PICKER_LIMIT of them."""
    said = _restrictions(definition or {})
    picked = [tool_id for tool_id in picked if _is_id(tool_id)]  # a forged pick is refused
    chosen = {tool.tool_id: tool for tool in usable_tools(workspace=workspace, tool_ids=picked)}
    items = [
        choice_of(chosen[tool_id], checked=True, restriction=said.get(tool_id, ""))
        for tool_id in dict.fromkeys(picked)
        if tool_id in chosen
    ]
    skip = set(chosen) | hide
    # One more than shown tells whether there are more.
    others = [
        tool
        for tool in usable_tools(
            workspace=workspace, search=search, limit=PICKER_LIMIT + len(skip) + 1
        )
        if tool.tool_id not in skip
    ]
    items += [
        choice_of(tool, checked=False, restriction=said.get(tool.tool_id, ""))
        for tool in others[:PICKER_LIMIT]
    ]
    return Picker(
        items=items,
        more=len(others) > PICKER_LIMIT,
        total=usable_tool_count(workspace=workspace),
        search=search,
    )


class _AnyChoice(forms.MultipleChoiceField):
    """Choices checked by the form against the registry, which can be too large to list."""

    def valid_value(self, value: Any) -> bool:
        return True


class ToolsForm(forms.Form):
    use = _AnyChoice(
        required=False,
        label="Tools it may use",
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args: Any, workspace: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workspace = workspace
        self.found: dict[str, UsableTool] = {}

    def clean_use(self) -> list[str]:
        """The picked tool ids, each one the workspace can use; the choices are checked here
        against the registry, not listed in the field (the registry can be large)."""
        picked = list(dict.fromkeys(self.cleaned_data["use"]))
        if len(picked) > MOST_PICKED:
            raise forms.ValidationError(f"Pick at most {MOST_PICKED} tools.")
        if any(len(tool_id) > 100 or "\x00" in tool_id for tool_id in picked):
            raise forms.ValidationError("A picked tool's id is not one a tool can have.")
        self.found = {
            tool.tool_id: tool for tool in usable_tools(workspace=self.workspace, tool_ids=picked)
        }
        missing = [tool_id for tool_id in picked if tool_id not in self.found]
        if missing:
            raise forms.ValidationError(
                "No tool "
                + ", ".join(repr(tool_id) for tool_id in missing)
                + " in this workspace's registry or the built-in tools."
            )
        return picked


@dataclass(frozen=True)
class _Slot:
    """What one item of `capabilities.tools` is to the section."""

    tool_id: str | None
    picked: bool  # False: kept as it is (defined here, or naming nothing usable)


class ToolsSection(Section):
    key = "tools"
    title = "Tools"
    template = "designer/editor/_tools.html"
    intro = (
        "The tools the entity may call: this workspace's and the built-in tools. "
        "Each shows what it takes and what it is allowed to do."
    )
    form_class = ToolsForm
    paths = {"capabilities.tools": ""}

    def form_kwargs(self) -> dict[str, Any]:
        return {"workspace": self.context.workspace}

    def initial(self, definition: dict) -> dict[str, Any]:
        self.slots, self.inline = self._slots(definition)
        self.written: list[_Slot] | None = None
        return {"use": [s.tool_id for s in self.slots if s.picked]}

    def _slots(self, definition: dict) -> tuple[list[_Slot], list[tuple[dict, bool]]]:
        """Each item of the definition's tools as picked or kept; and the kept ones as they
        are, each with whether the registry has a tool of its id (saving updates that)."""
        items = read(definition, "capabilities", "tools")
        items = items if isinstance(items, list) else []
        ids = [t["tool_id"] for t in items if isinstance(t, dict) and _is_id(t.get("tool_id"))]
        known = (
            {t.tool_id: t for t in usable_tools(workspace=self.context.workspace, tool_ids=ids)}
            if ids
            else {}
        )
        slots: list[_Slot] = []
        inline: list[tuple[dict, bool]] = []
        for item in items:
            tool_id = item.get("tool_id") if isinstance(item, dict) else None
            usable = known.get(tool_id) if _is_id(tool_id) else None
            if usable is not None and (is_tool_reference(item) or item == usable.definition):
                slots.append(_Slot(tool_id, True))
            else:
                slots.append(_Slot(tool_id if _is_id(tool_id) else None, False))
                inline.append((item, usable is not None and usable.in_registry))
        return slots, inline

    @property
    def kept_ids(self) -> frozenset[str]:
        return frozenset(s.tool_id for s in self.slots if not s.picked and s.tool_id)

    @property
    def selected(self) -> list[str]:
        """The ids the checkboxes hold now: what was posted (when valid), or the saved."""
        form = self.form
        if form.is_bound:
            if form.is_valid():
                return list(form.cleaned_data["use"])
            return list(form.data.getlist(form.add_prefix("use")))[:MOST_PICKED]
        return list(form.initial.get("use", []))

    @property
    def picker(self) -> Picker:
        return picker(
            workspace=self.context.workspace,
            picked=[t for t in self.selected if t not in self.kept_ids],
            definition=self.definition,
            hide=self.kept_ids,
        )

    @property
    def search_url(self) -> str:
        return reverse("designer:tool_picker", kwargs={"workspace": self.context.workspace.slug})

    def write(self, definition: dict, data: dict[str, Any], rows: dict[str, list[dict]]) -> None:
        found: dict[str, UsableTool] = self.form.found  # type: ignore[attr-defined]
        picked = [t for t in data["use"] if t not in self.kept_ids]
        items = read(definition, "capabilities", "tools")
        items = items if isinstance(items, list) else []
        written: list[dict] = []
        slots: list[_Slot] = []
        done: set[str] = set()

        def pick(tool_id: str) -> None:
            found[tool_id]  # only tools the form found usable are picked
            # A reference: a registry tool, or a built-in (usable by name everywhere).
            written.append({"tool_id": tool_id})
            slots.append(_Slot(tool_id, True))
            done.add(tool_id)

        for item, slot in zip(items, self.slots, strict=False):
            if not slot.picked:
                written.append(item)
                slots.append(slot)
            elif slot.tool_id in picked and slot.tool_id not in done:
                pick(slot.tool_id)  # type: ignore[arg-type]
        for tool_id in picked:
            if tool_id not in done:
                pick(tool_id)
        deep(definition, "capabilities")["tools"] = written
        self.written = slots

    def place(self, problem: Problem) -> bool:
        """A problem of a picked tool goes to the picker, naming the tool; one of a kept tool
        above the section's list, naming it too."""
        path = problem.path
        if not (
            path == "capabilities.tools"
            or path.startswith(("capabilities.tools[", "capabilities.tools."))
        ):
            return False
        found = _INDEX.match(path)
        slots = self.written if self.written is not None else self.slots
        if found and int(found.group(1)) < len(slots):
            slot = slots[int(found.group(1))]
            name = slot.tool_id or f"Tool {int(found.group(1)) + 1}"
            add_error(self.form, "use" if slot.picked else None, f"{name}: {problem.message}")
            return True
        add_error(self.form, None, problem.message)
        return True


def _is_id(value: Any) -> bool:
    """Text a tool id can be (a NUL would reach PostgreSQL, which refuses it)."""
    return isinstance(value, str) and 0 < len(value) <= 100 and "\x00" not in value
