"""Design-time checks that need the rest of the workspace (seed 000 §9.1).

The workspace's entities and links are read once into a `Catalog`; the definitions being saved
are laid over it as `Draft`s; then references, cycles, depth and budgets are checked on the
result, so a save sees the hierarchy exactly as it would be after the save.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import CharField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from entities.definition import Problem, is_tool_reference, join_path
from entities.models import ChildLink, Entity, EntityVersion
from entities.tool_catalog import tool_catalog
from runs.engine import versions
from runs.engine.plan import state_keys_read


def entity_key(pk: Any) -> str:
    """How the catalog names an existing entity: its UUID as 32 hex digits."""
    return pk.hex if isinstance(pk, uuid.UUID) else str(pk).replace("-", "").lower()


# A child is never of a higher level than its parent (equal levels nest: an agent may lead
# agents); an ACTION, the lowest, has no children.
TYPE_LEVELS = {"PROCESS": 4, "AGENT": 3, "SKILL": 2, "ACTION": 1}


def type_rule_problem(parent_name: str, parent_type: str, child_name: str, child_type: str) -> str:
    """Why `child` may not sit under `parent`, in plain words, or "" when it may. Types not
    known yet (a definition too broken to read) are left to the schema's own problems."""
    parent_level, child_level = TYPE_LEVELS.get(parent_type), TYPE_LEVELS.get(child_type)
    if parent_level is None or child_level is None:
        return ""
    if parent_type == "ACTION":
        return (
            f"“{child_name}” cannot be a child of the ACTION “{parent_name}”: "
            "an action is the smallest unit and has no children"
        )
    if child_level > parent_level:
        return (
            f"“{child_name}” is {_article(child_type)} {child_type} and cannot be a "
            f"child of the {parent_type} “{parent_name}”: a child is never of a "
            "higher level than its parent (PROCESS, then AGENT, then SKILL, then ACTION)"
        )
    return ""


def allowed_child_types(parent_type: str) -> list[str]:
    """The types a child of a `parent_type` may have, highest first."""
    if parent_type == "ACTION" or parent_type not in TYPE_LEVELS:
        return []
    level = TYPE_LEVELS[parent_type]
    return [t for t, lv in TYPE_LEVELS.items() if lv <= level]


def _article(word: str) -> str:
    return "an" if word[:1] in "AEIOU" else "a"


def _money(value: Any) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _fmt(amount: Decimal) -> str:
    return f"${amount.normalize():f}" if amount == amount.to_integral() else f"${amount:f}"


@dataclass
class Node:
    key: str
    name: str
    type: str
    max_cost: Decimal | None
    max_depth: int
    children: list[str] = field(default_factory=list)
    # io_contract.state_contract.reads_from; None when it declares none (it may read any).
    reads_from: tuple[str, ...] | None = None


@dataclass
class Draft:
    """A normalised definition about to be saved, and where its problems should point."""

    definition: dict
    key: str
    label: str = ""
    resolved_children: list[str | None] = field(default_factory=list)
    resolved_step_targets: list[str | None] = field(default_factory=list)
    resolved_parent: str | None = None
    is_placeholder: bool = False

    @classmethod
    def placeholder(cls, raw: Any, *, key: str, label: str = "") -> Draft:
        """A definition too broken to check against the workspace: it still holds its name
        and id, so the rest of the batch can refer to it without spurious problems."""
        metadata = raw.get("metadata") if isinstance(raw, dict) else None
        identity = raw.get("identity") if isinstance(raw, dict) else None
        metadata = metadata if isinstance(metadata, dict) else {}
        identity = identity if isinstance(identity, dict) else {}
        name = identity.get("name") if isinstance(identity.get("name"), str) else ""
        definition = {
            "metadata": {
                "id": metadata.get("id") if isinstance(metadata.get("id"), str) else None,
                "type": metadata.get("type") if isinstance(metadata.get("type"), str) else None,
            },
            "identity": {"name": name},
        }
        return cls(definition=definition, key=key, label=label, is_placeholder=True)


class Catalog:
    """The entities, links and tools of one workspace, as validation sees them."""

    def __init__(self, nodes: Iterable[Node], refs: dict[str, str], tools: set[str]):
        self.nodes: dict[str, Node] = {node.key: node for node in nodes}
        self.refs = refs
        self.tools = tools

    @classmethod
    def load(cls, workspace: Any) -> Catalog:
        nodes: dict[str, Node] = {}
        refs: dict[str, str] = {}
        # Only the fields validation needs, and ids as text: this runs on every save, and
        # decoding whole JSON sections or building UUID objects for every row dominates it.
        rows = (
            Entity.objects.filter(workspace=workspace)
            .annotate(
                key=Cast("id", CharField()),
                max_cost=KT("governance__cost_controls__max_cost_usd"),
                max_depth=KT("governance__execution_limits__max_recursion_depth"),
                reads=KT("io_contract__state_contract__reads_from"),
            )
            .values_list("key", "external_id", "name", "type", "max_cost", "max_depth", "reads")
        )
        for raw_key, external_id, name, entity_type, max_cost, max_depth, reads in rows:
            key = raw_key.replace("-", "")
            nodes[key] = Node(
                key=key,
                name=name,
                type=entity_type,
                # KT answers a JSON null as SQL NULL on PostgreSQL but as the text "null"
                # on SQLite (Django reads JSON_TYPE there for null, true and false).
                max_cost=_money(None if max_cost == "null" else max_cost),
                max_depth=int(max_depth) if max_depth not in (None, "null") else 5,
                reads_from=_declared(reads),
            )
            refs[key] = key
            refs[name] = key
            if external_id:
                refs[external_id] = key
        links = (
            ChildLink.objects.filter(parent__workspace=workspace)
            .order_by("order", "id")
            .annotate(
                parent_key=Cast("parent_id", CharField()), child_key=Cast("child_id", CharField())
            )
            .values_list("parent_key", "child_key")
        )
        for parent_key, child_key in links:
            nodes[parent_key.replace("-", "")].children.append(child_key.replace("-", ""))
        return cls(nodes.values(), refs, tool_catalog().tool_ids(workspace))

    def resolve(self, ref: Any) -> str | None:
        if ref in (None, ""):
            return None
        text = str(ref)
        found = self.refs.get(text)
        if found is None and len(text) == 36 and text.count("-") == 4:
            found = self.refs.get(text.replace("-", "").lower())
        return found

    def name(self, key: str) -> str:
        return self.nodes[key].name

    def saved_versions(self, keys: Iterable[str]) -> dict[str, list[str]]:
        """The versions each of the saved entities `keys` has, in the order they were saved
        (one query; a key of an entity not saved yet has none)."""
        ids = []
        for key in keys:
            with contextlib.suppress(ValueError):
                ids.append(uuid.UUID(hex=key))
        found: dict[str, list[str]] = {}
        if not ids:
            return found
        rows = (
            EntityVersion.objects.filter(entity_id__in=ids)
            .order_by("created_at", "id")
            .values_list("entity_id", "version")
        )
        for entity_id, version in rows:
            found.setdefault(entity_key(entity_id), []).append(version)
        return found

    # graph queries on the catalog as it stands (drafts already laid over it)

    def path_between(self, start: str, goal: str) -> list[str] | None:
        """A chain of keys from start down to goal, if goal is reachable."""
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        seen: set[str] = set()
        while stack:
            key, path = stack.pop()
            if key == goal:
                return path
            if key in seen or key not in self.nodes:
                continue
            seen.add(key)
            for child in reversed(self.nodes[key].children):
                stack.append((child, [*path, child]))
        return None

    def deepest_chain(self, key: str, memo: dict[str, list[str]] | None = None) -> list[str]:
        """The longest chain of keys below (and including) `key`; the graph must be acyclic."""
        memo = {} if memo is None else memo
        if key in memo:
            return memo[key]
        best: list[str] = []
        for child in self.nodes[key].children:
            if child in self.nodes:
                chain = self.deepest_chain(child, memo)
                if len(chain) > len(best):
                    best = chain
        memo[key] = [key, *best]
        return memo[key]

    def parents_of(self, key: str) -> list[str]:
        return [n.key for n in self.nodes.values() if key in n.children]

    def ancestors_of(self, keys: Iterable[str]) -> set[str]:
        parents: dict[str, set[str]] = {}
        for node in self.nodes.values():
            for child in node.children:
                parents.setdefault(child, set()).add(node.key)
        found: set[str] = set()
        frontier = list(keys)
        while frontier:
            key = frontier.pop()
            for parent in parents.get(key, ()):
                if parent not in found:
                    found.add(parent)
                    frontier.append(parent)
        return found

    def depths(self) -> dict[str, int]:
        """composition_depth: the longest path from a root (an entity with no parent)."""
        has_parent = {c for n in self.nodes.values() for c in n.children}
        depth: dict[str, int] = {}
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(key: str) -> None:  # topological order, iterative-safe for our sizes
            state[key] = 1
            for child in self.nodes[key].children:
                if child in self.nodes and state.get(child, 0) == 0:
                    visit(child)
            state[key] = 2
            order.append(key)

        for key in self.nodes:
            if state.get(key, 0) == 0:
                visit(key)
        for key in self.nodes:
            if key not in has_parent:
                depth[key] = 0
        for key in reversed(order):
            for child in self.nodes[key].children:
                if child in self.nodes:
                    depth[child] = max(depth.get(child, 0), depth.get(key, 0) + 1)
        return depth


def lay_over(catalog: Catalog, drafts: list[Draft]) -> list[Problem]:
    """Add the drafts to the catalog (names, ids, links) and resolve their references."""
    problems: list[Problem] = []
    # Names and ids first, so drafts can refer to each other in any order.
    for draft in drafts:
        definition = draft.definition
        name = definition["identity"]["name"]
        if draft.is_placeholder:
            _register_placeholder(catalog, draft)
            continue
        node = catalog.nodes.get(draft.key)
        renamed = node is not None and node.name != name
        if renamed and catalog.refs.get(node.name) == draft.key:
            del catalog.refs[node.name]
        owner = catalog.refs.get(name)
        if owner is not None and owner != draft.key:
            other = next((d for d in drafts if d.key == owner), None)
            where = f"entity {other.label}" if other and other.label else "another entity"
            problems.append(
                Problem(
                    "identity.name",
                    f"{where} of this workspace is already named {name!r}; names are unique "
                    "within a workspace",
                    draft.label,
                )
            )
        else:
            catalog.refs[name] = draft.key
        own_id = definition["metadata"].get("id")
        if own_id:
            catalog.refs.setdefault(str(own_id), draft.key)
        governance = definition["governance"]
        catalog.nodes[draft.key] = Node(
            key=draft.key,
            name=name,
            type=definition["metadata"]["type"],
            max_cost=_money(governance["cost_controls"]["max_cost_usd"]),
            max_depth=governance["execution_limits"]["max_recursion_depth"],
            reads_from=_declared(_reads_from(definition)),
        )

    real = [draft for draft in drafts if not draft.is_placeholder]
    bundle_tools = {
        tool["tool_id"]
        for draft in real
        for tool in draft.definition["capabilities"]["tools"]
        if not is_tool_reference(tool)
    }
    for draft in real:
        problems += _resolve(catalog, draft, bundle_tools)
    problems += _version_problems(catalog, real)
    return problems


def _version_problems(catalog: Catalog, drafts: list[Draft]) -> list[Problem]:
    """A link that names a version (exact or a range) must allow one its child has saved,
    or will have once the batch is saved (a new entity's first version); and the links to
    one child agree on it (a plan step names the child, not the link)."""
    problems: list[Problem] = []
    wanted: list[tuple[Draft, int, str, str]] = []
    for draft in drafts:
        first: dict[str, tuple[int, Any]] = {}
        links = draft.definition["hierarchy"]["children"]
        for index, (link, child) in enumerate(zip(links, draft.resolved_children, strict=True)):
            if child is None or child == draft.key:
                continue
            text = link.get("version")
            if child in first and first[child][1] != text:
                earlier, other = first[child]
                problems.append(
                    Problem(
                        join_path("hierarchy", "children", index, "version"),
                        f"the links to {catalog.name(child)!r} at children[{earlier}] and here "
                        f"name different versions ({other or 'the newest'} and "
                        f"{text or 'the newest'}); a plan step names the child, not the link, "
                        "so give them the same",
                        draft.label,
                    )
                )
            first.setdefault(child, (index, text))
            if isinstance(text, str) and not versions.range_problem(text):
                wanted.append((draft, index, text, child))
    if not wanted:
        return problems
    saved = catalog.saved_versions({child for *_, child in wanted})
    first_versions = {
        draft.key: draft.definition["metadata"].get("version") or "1.0.0"
        for draft in drafts
        if draft.key.startswith("new:")
    }
    for draft, index, text, child in wanted:
        have = saved.get(child, []) or ([first_versions[child]] if child in first_versions else [])
        if versions.newest_matching(text, have) is None:
            problems.append(
                Problem(
                    join_path("hierarchy", "children", index, "version"),
                    f"no version of {catalog.name(child)!r} matches {text}; it has "
                    f"{versions.span(have)}",
                    draft.label,
                )
            )
    return problems


def _register_placeholder(catalog: Catalog, draft: Draft) -> None:
    name = draft.definition["identity"]["name"]
    own_id = draft.definition["metadata"]["id"]
    existing = catalog.nodes.get(draft.key)
    catalog.nodes[draft.key] = Node(
        key=draft.key,
        name=name or (existing.name if existing else draft.label or "?"),
        type=draft.definition["metadata"]["type"] or (existing.type if existing else ""),
        max_cost=None,
        max_depth=10**6,
        children=existing.children if existing else [],
    )
    for ref in (name, own_id):
        if ref:
            catalog.refs.setdefault(str(ref), draft.key)


def _resolve(catalog: Catalog, draft: Draft, bundle_tools: set[str]) -> list[Problem]:
    """Resolve the draft's references (parent, children, tools, step targets) against the
    catalog, recording what they resolve to on the draft; answers what does not resolve."""
    return [
        *_resolve_parent(catalog, draft),
        *_resolve_children(catalog, draft),
        *_tool_reference_problems(catalog, draft, bundle_tools),
        *_resolve_step_targets(catalog, draft),
        *_template_problems(catalog, draft),
        *_state_contract_problems(catalog, draft),
    ]


def _reads_from(definition: dict) -> Any:
    """A draft's `reads_from`, as far as its io_contract (checked on its own, and perhaps
    broken) has one."""
    contract = definition.get("io_contract")
    state = contract.get("state_contract") if isinstance(contract, dict) else None
    return state.get("reads_from") if isinstance(state, dict) else None


def _template_problems(catalog: Catalog, draft: Draft) -> list[Problem]:
    """capabilities.delegation's templates (runs/engine/hiring.py): entities of the workspace
    that the hierarchy's type rule lets this entity have as children, since a hire runs as
    its child; and a static DELEGATE step hires from one of them, with delegation enabled."""
    problems: list[Problem] = []
    label = draft.label
    delegation = draft.definition["capabilities"].get("delegation") or {}
    node = catalog.nodes[draft.key]
    templates: set[str] = set()
    for index, ref in enumerate(delegation.get("templates") or []):
        path = join_path("capabilities", "delegation", "templates", index)
        template = catalog.resolve(ref)
        if template is None:
            problems.append(
                Problem(path, f"there is no entity {ref!r} in this workspace to hire from", label)
            )
            continue
        if template == draft.key:
            problems.append(Problem(path, "an entity cannot hire itself", label))
            continue
        templates.add(template)
        t = catalog.nodes[template]
        refused = type_rule_problem(node.name, node.type, t.name, t.type)
        if refused:
            problems.append(Problem(path, f"as a hire: {refused}", label))
    if delegation.get("enabled") and not delegation.get("templates"):
        problems.append(
            Problem(
                join_path("capabilities", "delegation", "templates"),
                "delegation is enabled: name at least one template to hire from",
                label,
            )
        )
    for index, step in enumerate(draft.definition["planning"]["static_plan"]["steps"]):
        if step["type"] != "DELEGATE":
            continue
        path = join_path("planning", "static_plan", "steps", index, "target", "entity_id")
        if not delegation.get("enabled"):
            problems.append(
                Problem(
                    path,
                    "a DELEGATE step hires: enable capabilities.delegation first",
                    label,
                )
            )
        elif catalog.resolve(step["target"].get("entity_id")) not in templates:
            problems.append(
                Problem(
                    path,
                    f"{step['target'].get('entity_id')!r} is not one of "
                    "capabilities.delegation.templates",
                    label,
                )
            )
    return problems


def _declared(reads: Any) -> tuple[str, ...] | None:
    """A stored `reads_from` as the catalog reads it (JSON text; SQL NULL or "null" when
    absent): the keys, or None when it declares none."""
    if isinstance(reads, str):
        with contextlib.suppress(ValueError):
            reads = json.loads(reads)
    if not isinstance(reads, list) or not reads or not all(isinstance(k, str) for k in reads):
        return None
    return tuple(reads)


def _state_contract_problems(catalog: Catalog, draft: Draft) -> list[Problem]:
    """A child's input mapping, where the definition shows it (a child link's, a static
    plan step's), reads only the state keys the child declares it reads
    (`io_contract.state_contract.reads_from`, when it declares any). The engine checks the
    mappings no definition shows (a dynamic plan's) when it starts the child."""
    problems: list[Problem] = []
    definition = draft.definition
    mapped: list[tuple[str, str | None, dict]] = [
        (join_path("hierarchy", "children", index), child, link.get("input_mapping") or {})
        for index, (link, child) in enumerate(
            zip(definition["hierarchy"]["children"], draft.resolved_children, strict=False)
        )
    ]
    steps = definition["planning"]["static_plan"]["steps"]
    mapped += [
        (join_path("planning", "static_plan", "steps", index), target, step.get("input_mapping"))
        for index, (step, target) in enumerate(
            zip(steps, draft.resolved_step_targets, strict=False)
        )
    ]
    for path, child, mapping in mapped:
        node = catalog.nodes.get(child) if child else None
        if node is None or node.reads_from is None or not mapping:
            continue
        for field_name, expression in mapping.items():
            keys = state_keys_read(expression)
            undeclared = None if keys is None else sorted(keys - set(node.reads_from))
            if undeclared == []:
                continue
            what = (
                "keys it does not name (a computed or whole-state var)"
                if undeclared is None
                else ", ".join(repr(key) for key in undeclared)
            )
            problems.append(
                Problem(
                    join_path(path, "input_mapping", field_name),
                    f"reads {what} from the state, which {node.name!r} does not declare in "
                    f"io_contract.state_contract.reads_from ({', '.join(node.reads_from)}); "
                    "declare it there or map from a key it declares",
                    draft.label,
                )
            )
    return problems


def _resolve_parent(catalog: Catalog, draft: Draft) -> list[Problem]:
    problems: list[Problem] = []
    label = draft.label
    hierarchy = draft.definition["hierarchy"]
    parent_ref = hierarchy.get("parent_id")
    if parent_ref:
        draft.resolved_parent = catalog.resolve(parent_ref)
        if draft.resolved_parent is None:
            problems.append(
                Problem(
                    "hierarchy.parent_id",
                    f"there is no entity {parent_ref!r} in this workspace",
                    label,
                )
            )
        elif draft.resolved_parent == draft.key:
            problems.append(
                Problem("hierarchy.parent_id", "an entity cannot be its own parent", label)
            )
        else:
            parent, own = catalog.nodes[draft.resolved_parent], catalog.nodes[draft.key]
            refused = type_rule_problem(parent.name, parent.type, own.name, own.type)
            if refused:
                problems.append(Problem("hierarchy.parent_id", refused, label))
    return problems


def _resolve_children(catalog: Catalog, draft: Draft) -> list[Problem]:
    problems: list[Problem] = []
    label = draft.label
    hierarchy = draft.definition["hierarchy"]
    node = catalog.nodes[draft.key]
    draft.resolved_children = []
    for index, link in enumerate(hierarchy["children"]):
        path = join_path("hierarchy", "children", index, "child_id")
        child = catalog.resolve(link["child_id"])
        draft.resolved_children.append(child)
        if child is None:
            problems.append(
                Problem(
                    path,
                    f"there is no entity {link['child_id']!r} in this workspace; create it "
                    "first or check the id",
                    label,
                )
            )
            continue
        if child == draft.key:
            problems.append(Problem(path, "an entity cannot be its own child", label))
            continue
        child_type = catalog.nodes[child].type
        if link.get("child_type") and child_type and link["child_type"] != child_type:
            problems.append(
                Problem(
                    join_path("hierarchy", "children", index, "child_type"),
                    f"says {link['child_type']} but {catalog.name(child)!r} is a {child_type}",
                    label,
                )
            )
        refused = type_rule_problem(node.name, node.type, catalog.name(child), child_type)
        if refused:
            problems.append(Problem(path, refused, label))
        node.children.append(child)
    return problems


def _tool_reference_problems(
    catalog: Catalog, draft: Draft, bundle_tools: set[str]
) -> list[Problem]:
    problems: list[Problem] = []
    label = draft.label
    definition = draft.definition
    for index, tool in enumerate(definition["capabilities"]["tools"]):
        if is_tool_reference(tool) and tool["tool_id"] not in catalog.tools | bundle_tools:
            problems.append(
                Problem(
                    join_path("capabilities", "tools", index, "tool_id"),
                    f"there is no tool {tool['tool_id']!r} in this workspace's tool registry; "
                    "add it under Tools or define it here in full",
                    label,
                )
            )
    return problems


def _resolve_step_targets(catalog: Catalog, draft: Draft) -> list[Problem]:
    problems: list[Problem] = []
    label = draft.label
    definition = draft.definition
    tool_ids = {tool["tool_id"] for tool in definition["capabilities"]["tools"]}
    children = set(draft.resolved_children) - {None}
    draft.resolved_step_targets = []
    for index, step in enumerate(definition["planning"]["static_plan"]["steps"]):
        target = step["target"]
        path = join_path("planning", "static_plan", "steps", index, "target")
        resolved = None
        if step["type"] == "DELEGATE":  # its template: _template_problems
            resolved = catalog.resolve(target.get("entity_id"))
        elif target.get("entity_id"):
            resolved = catalog.resolve(target["entity_id"])
            if resolved is None:
                problems.append(
                    Problem(
                        f"{path}.entity_id",
                        f"there is no entity {target['entity_id']!r} in this workspace",
                        label,
                    )
                )
            elif resolved not in children:
                problems.append(
                    Problem(
                        f"{path}.entity_id",
                        f"{catalog.name(resolved)!r} is not a child of this entity; add it "
                        "under hierarchy.children first",
                        label,
                    )
                )
        draft.resolved_step_targets.append(resolved)
        if target.get("tool_id") and target["tool_id"] not in tool_ids:
            problems.append(
                Problem(
                    f"{path}.tool_id",
                    f"tool {target['tool_id']!r} is not in this entity's capabilities.tools; "
                    "add it there first",
                    label,
                )
            )
    return problems


def graph_problems(catalog: Catalog, drafts: list[Draft]) -> list[Problem]:
    """Cycles, depth over max_recursion_depth and child budgets over the parent's."""
    drafts = [draft for draft in drafts if not draft.is_placeholder]
    problems = _cycle_problems(catalog, drafts)
    if problems or any(d.resolved_children.count(d.key) for d in drafts):
        return problems
    draft_by_key = {d.key: d for d in drafts}
    return [
        *_depth_problems(catalog, drafts, draft_by_key),
        *_budget_problems(catalog, drafts, draft_by_key),
    ]


def _cycle_problems(catalog: Catalog, drafts: list[Draft]) -> list[Problem]:
    """A child that is also an ancestor, for each draft's each child."""
    problems: list[Problem] = []
    for draft in drafts:
        for index, child in enumerate(draft.resolved_children):
            if child is None or child == draft.key:
                continue
            path = catalog.path_between(child, draft.key)
            if path is not None:
                chain = " → ".join(catalog.name(k) for k in [draft.key, *path])
                problems.append(
                    Problem(
                        join_path("hierarchy", "children", index, "child_id"),
                        f"creates a cycle: {chain}; an entity cannot be its own ancestor",
                        draft.label,
                    )
                )
    return problems


def _depth_problems(
    catalog: Catalog, drafts: list[Draft], draft_by_key: dict[str, Draft]
) -> list[Problem]:
    """Nesting deeper than max_recursion_depth, of the drafts and of their ancestors."""
    problems: list[Problem] = []
    memo: dict[str, list[str]] = {}
    affected = set(draft_by_key) | catalog.ancestors_of(draft_by_key)
    for key in sorted(affected, key=lambda k: catalog.name(k)):
        node = catalog.nodes[key]
        chain = catalog.deepest_chain(key, memo)
        levels = len(chain) - 1
        if levels <= node.max_depth:
            continue
        names = " → ".join(catalog.name(k) for k in chain)
        if key in draft_by_key:
            problems.append(
                Problem(
                    "hierarchy.children",
                    f"nests {levels} levels deep ({names}), more than its "
                    f"max_recursion_depth of {node.max_depth}",
                    draft_by_key[key].label,
                )
            )
        else:
            culprit = next(d for d in drafts if d.key in chain)
            problems.append(
                Problem(
                    "hierarchy.children",
                    f"makes {node.name!r} nest {levels} levels deep ({names}), more than its "
                    f"max_recursion_depth of {node.max_depth}",
                    culprit.label,
                )
            )
    return problems


def _budget_problems(
    catalog: Catalog, drafts: list[Draft], draft_by_key: dict[str, Draft]
) -> list[Problem]:
    """Children's budgets adding up to more than their parent's, of the drafts and of their
    parents."""
    problems: list[Problem] = []
    budget_holders = set(draft_by_key)
    for key in draft_by_key:
        budget_holders.update(catalog.parents_of(key))
    for key in sorted(budget_holders, key=lambda k: catalog.name(k)):
        node = catalog.nodes[key]
        if node.max_cost is None:
            continue
        shares = [
            (catalog.nodes[c].name, catalog.nodes[c].max_cost)
            for c in node.children
            if c in catalog.nodes and catalog.nodes[c].max_cost is not None
        ]
        total = sum((amount for _, amount in shares), Decimal(0))
        if total <= node.max_cost:
            continue
        detail = ", ".join(f"{name} {_fmt(amount)}" for name, amount in shares)
        if key in draft_by_key:
            problems.append(
                Problem(
                    "governance.cost_controls.max_cost_usd",
                    f"the children's budgets add up to {_fmt(total)} ({detail}), more than "
                    f"this entity's max_cost_usd of {_fmt(node.max_cost)}",
                    draft_by_key[key].label,
                )
            )
        else:
            for draft in drafts:
                if draft.key in node.children:
                    problems.append(
                        Problem(
                            "governance.cost_controls.max_cost_usd",
                            f"with this budget the children of {node.name!r} add up to "
                            f"{_fmt(total)} ({detail}), more than its max_cost_usd of "
                            f"{_fmt(node.max_cost)}",
                            draft.label,
                        )
                    )
    return problems
