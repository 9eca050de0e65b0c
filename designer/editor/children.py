"""Children: the entities this one calls, in order, each with how it runs (after the previous
one, alongside, or only when a condition holds), the condition built as rows, and what it is
given (its input fields, each from a field of the run or a constant).

A child is picked by name from the workspace's entities (the search offers only the types
the type rule allows); the definition keeps its ref, as an import or the API would."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django import forms
from django.http import QueryDict
from django.urls import reverse

from designer.editor import conditions
from designer.editor.base import EditorContext, RowForm, Rows, Section, deep, read
from designer.editor.condition_fields import ConditionFields
from designer.editor.mapping_fields import MappingFields
from entities.selectors import entities_by_ref, link_upgrades
from entities.versioning import Upgrade
from runs.engine import versions

RELATIONSHIPS = [
    ("SEQUENTIAL", "After the one before"),
    ("PARALLEL", "Alongside its neighbours (parallel)"),
    ("CONDITIONAL", "Only when a condition holds"),
]
MOST_CHILDREN = 100
_ROW_INDEX = re.compile(r"-(\d+)$")


@dataclass(frozen=True)
class Known:
    """An entity a definition names, as the editor shows and maps it."""

    ref: str
    name: str
    type: str
    input_fields: list[str] = field(default_factory=list)
    output_schema: Any = None
    pk: Any = None


def known_entities(workspace: Any, refs: list[str]) -> dict[str, Known]:
    """The entities `refs` name (by ref, id or name), by each of those, in one query."""
    found = entities_by_ref(workspace=workspace, refs=refs)
    known: dict[str, Known] = {}
    for typed, entity in found.items():
        contract = entity.io_contract or {}
        item = Known(
            ref=entity.ref,
            name=entity.name,
            type=entity.type,
            input_fields=conditions.schema_fields((contract.get("input") or {}).get("schema")),
            output_schema=(contract.get("output") or {}).get("schema"),
            pk=entity.pk,
        )
        for key in {typed, entity.ref, entity.name}:
            known[key] = item
    return known


def posted_values(data: QueryDict | None, prefix: str, name: str, most: int) -> list[str]:
    """The values of `name` in the posted rows of `prefix`, in row order (at most `most`)."""
    if data is None:
        return []
    try:
        total = min(int(data.get(f"{prefix}-TOTAL_FORMS", "0")), most)
    except ValueError:
        total = 0
    return [data.get(f"{prefix}-{index}-{name}", "") or "" for index in range(max(total, 0))]


def row_index(prefix: str) -> int:
    found = _ROW_INDEX.search(prefix or "")
    return int(found.group(1)) if found else 0


def widened_row(data: QueryDict, widen: str) -> QueryDict:
    """What the page sent with one child's version set: `widen` is a row's prefix and the
    version to set ("children-children-2:^2.0.0", a row's "take the newest" button). The
    save that follows checks it as any typed version; anything else leaves `data` as is."""
    prefix, _, version = widen.partition(":")
    found = re.fullmatch(r"children-children-(\d{1,3})", prefix)
    try:
        total = int(data.get("children-children-TOTAL_FORMS", ""))
    except ValueError:
        return data
    if found is None or int(found.group(1)) >= total or not version:
        return data
    widened = data.copy()
    widened[f"{prefix}-version"] = version
    return widened


class ChildForm(RowForm):
    paths: ClassVar[dict[str, str]] = {
        ".child_id": "child",
        ".child_type": "child",
        ".relationship": "relationship",
        ".version": "version",
        ".condition": "condition_raw",
    }

    child = forms.CharField(
        max_length=200,
        label="Child",
        help_text="Type to search the workspace by name.",
    )
    relationship = forms.ChoiceField(choices=RELATIONSHIPS, label="Runs")
    version = forms.CharField(
        max_length=versions.MAX_RANGE_LENGTH,
        required=False,
        label="Version",
        help_text="Empty: its newest version when a run starts. Or an exact version (1.2.0) "
        "or a range (^1.2.0, ~1.2, >=1.0.0 <2.0.0, 1.x): the newest it allows.",
        widget=forms.TextInput(attrs={"placeholder": "newest", "autocomplete": "off"}),
    )
    condition_description = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(
        self,
        *args: Any,
        known: dict[str, Known] | None = None,
        order: list[str] | None = None,
        base_paths: list[str] | None = None,
        pick_url: str = "",
        links: list[dict] | None = None,
        upgrades: list[Upgrade | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        known = known or {}
        index = row_index(self.prefix)
        self.upgrade = self._upgrade_shown(index, links or [], upgrades or [], known)
        earlier = []
        for name in (order or [])[:index]:
            item = known.get(name.strip())
            earlier += conditions.output_paths(
                item.name if item else name.strip(), item.output_schema if item else None
            )
        self.datalist = f"paths-{self.prefix}"
        self.available = [*(base_paths or []), *earlier]
        link = (links or [])[index] if not self.is_bound and index < len(links or []) else {}
        chosen = (
            self.data.get(self.add_prefix("child"), "")
            if self.is_bound
            else self.initial.get("child", "")
        )
        item = known.get((chosen or "").strip())
        self.fields["child"].widget.attrs.update(
            {
                "list": "child-options",
                "autocomplete": "off",
                "class": "child-pick",
                "hx-get": pick_url,
                "hx-trigger": "focus, input changed delay:250ms",
                "hx-target": "#child-options",
                "hx-swap": "innerHTML",
                "hx-sync": "this:replace",
            }
        )
        self.condition = ConditionFields(
            self,
            "condition",
            label="Condition",
            expression=(link.get("condition") or {}).get("expression") if link else None,
            datalist=self.datalist,
            help_text="Advanced: the condition as JSONLogic; edit it here for what rows "
            "cannot say (nested all/any, other operators).",
        )
        self.mapping = MappingFields(
            self,
            target_fields=item.input_fields if item else [],
            mapping=link.get("input_mapping") if link else {},
            paths=self.available,
            datalist=self.datalist,
        )

    def _upgrade_shown(
        self, index: int, links: list[dict], upgrades: list[Upgrade | None], known: dict
    ) -> Upgrade | None:
        """The saved link's upgrade, while the row still shows that link (same child, same
        version): a row moved, changed or added shows none."""
        if index >= len(links) or index >= len(upgrades) or upgrades[index] is None:
            return None
        if not self.is_bound:
            return upgrades[index]
        link = links[index]
        typed = (self.data.get(self.add_prefix("child")) or "").strip()
        item = known.get(typed)
        same_child = (item.ref if item else typed) == str(link.get("child_id") or "")
        same_version = (self.data.get(self.add_prefix("version")) or "").strip() == str(
            link.get("version") or ""
        )
        return upgrades[index] if same_child and same_version else None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        data["condition"] = self.condition.clean(self)
        data["input_mapping"] = self.mapping.clean(self)
        if (
            data.get("relationship") == "CONDITIONAL"
            and data["condition"] is None
            and not self.errors
        ):
            self.add_error(
                "condition_0_field",
                "Runs only when a condition holds: build the condition (a field, how it "
                "compares, a value), or choose another way it runs.",
            )
        return data

    # -- for the template --------------------------------------------------------------------

    @property
    def layout(self) -> dict[str, Any]:
        return {
            "fields": [self["child"], self["relationship"], self["version"]],
            "upgrade": self.upgrade,
            "conditions": [self.condition.view(self)],
            "condition_class": "when-conditional",
            "mapping": self.mapping.boxes(self),
            "mapping_hidden": self.mapping.hidden(self),
            "mapping_title": "What it is given",
            "mapping_help": "Each input field of the child from a field of the run (pick one) "
            "or a value you type. Leave them all empty to pass the run's fields of the same "
            "names.",
            "hidden": [self["condition_description"]],
            "datalist": self.datalist,
            "paths": self.available,
        }


class ChildrenSection(Section):
    key = "children"
    title = "Children"
    intro = (
        "The entities this one calls, in this order. A child of a process may be an agent, "
        "a skill or an action; an agent's, an agent, a skill or an action; a skill's, a skill "
        "or an action; an action has none."
    )
    template = "designer/editor/_section_rows.html"
    extra_template = "designer/editor/_children_options.html"
    rows: ClassVar[dict[str, Rows]] = {
        "children": Rows(ChildForm, "hierarchy.children", "Children", MOST_CHILDREN, "Add a child")
    }
    paths: ClassVar[dict[str, str]] = {"hierarchy": ""}

    def __init__(
        self,
        definition: dict,
        data: QueryDict | None,
        context: EditorContext,
        *,
        add_row: str = "",
    ) -> None:
        links = read(definition, "hierarchy", "children") or []
        self.links = [link for link in links if isinstance(link, dict)]
        refs = [str(link.get("child_id") or "") for link in self.links]
        self.order = (
            posted_values(data, "children-children", "child", MOST_CHILDREN)
            if data is not None
            else [self._shown_name(ref, {}) for ref in refs]
        )
        self.known = known_entities(context.workspace, [*refs, *(o.strip() for o in self.order)])
        if data is None:
            self.order = [self._shown_name(ref, self.known) for ref in refs]
        # What each link's version misses (seed 000 §10.2): none for a link without one.
        self.upgrades = link_upgrades(
            links=[
                (
                    self.known[ref].pk if ref in self.known else None,
                    link.get("version") if isinstance(link.get("version"), str) else None,
                )
                for ref, link in zip(refs, self.links, strict=True)
            ]
        )
        self.base_paths = conditions.input_paths(definition)
        super().__init__(definition, data, context, add_row=add_row)

    @staticmethod
    def _shown_name(ref: str, known: dict[str, Known]) -> str:
        return known[ref].name if ref in known else ref

    def row_kwargs(self, name: str) -> dict[str, Any]:
        ws = self.context.workspace.slug
        query = f"?type={self.context.entity_type}"
        if self.context.entity is not None:
            query += f"&entity={self.context.entity.pk}"
        return {
            "known": self.known,
            "order": self.order,
            "base_paths": self.base_paths,
            "pick_url": reverse("designer:pick_children", kwargs={"workspace": ws}) + query,
            "links": self.links,
            "upgrades": self.upgrades,
        }

    def row_initial(self, name: str, definition: dict) -> list[dict[str, Any]]:
        return [
            {
                "child": self._shown_name(str(link.get("child_id") or ""), self.known),
                "relationship": link.get("relationship") or "SEQUENTIAL",
                "version": link.get("version") or "",
                "condition_description": (link.get("condition") or {}).get("description", ""),
            }
            for link in self.links
        ]

    def write(self, definition: dict, data: dict[str, Any], rows: dict[str, list[dict]]) -> None:
        children = []
        for row in rows["children"]:
            typed = row["child"].strip()
            item = self.known.get(typed)
            link: dict[str, Any] = {"child_id": item.ref if item else typed}
            if item is not None:
                link["child_type"] = item.type
            expression = row["condition"]
            link["relationship"] = row["relationship"]
            link["condition"] = {
                "enabled": row["relationship"] == "CONDITIONAL" and expression is not None,
                "expression": expression,
                "description": row.get("condition_description") or "",
            }
            link["input_mapping"] = row["input_mapping"]
            if row.get("version"):
                link["version"] = row["version"]
            children.append(link)
        deep(definition, "hierarchy")["children"] = children
