"""Design-time speed: importing a hierarchy, and one save in a large workspace.

    .venv/bin/python bench/designer.py --shape 10,10,10 [--json]

Generates a process → agents → skills → actions bundle of the given shape (3,2,2 is 22
entities; 10,10,10 is 1,111), imports it into a fresh workspace of the database of
DATABASE_URL (SQLite in var/ by default), then times a designer's save in that workspace
(one agent gains a child, with full validation: schemas, references, cycles, depth,
budgets, the version snapshot) and a refused save (a cycle), and the pages of that workspace
as a superuser opens them (the admin's change and add forms; the designer's tree, editors,
live check and history: server time, size and queries). Prints a summary, or one JSON line
with --json. The entities and the bench's user are deleted afterwards; the workspace stays
(its audit chain is append-only), so point DATABASE_URL at a database of the bench's own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DEBUG", "1")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402

from entities.definition import DefinitionInvalid  # noqa: E402
from entities.exchange import definition_of, export_workspace  # noqa: E402
from entities.models import ChildLink, Entity, PlanStep, Workspace  # noqa: E402
from entities.services import entities_import, entity_save  # noqa: E402
from tests.support.page_form import form_data  # noqa: E402

TYPES = ("PROCESS", "AGENT", "SKILL", "ACTION")
NAMED = ("process0", "agent0_0", "action0_0_0_0")  # the pages' entities


def bundle(shape: list[int]) -> list[dict]:
    """Definitions for a full tree of the shape; budgets and depth limits are coherent."""
    definitions: list[dict] = []

    def make(level: int, path: str, budget: float) -> str:
        ref = f"n{path}"
        fanout = shape[level] if level < len(shape) else 0
        child_budget = round(budget / (fanout + 1), 6) if fanout else 0
        children = [make(level + 1, f"{path}.{i}", child_budget) for i in range(fanout)]
        definitions.append(
            {
                "metadata": {"id": ref, "type": TYPES[level], "status": "ACTIVE"},
                "identity": {
                    "name": f"{TYPES[level].lower()}{path.replace('.', '_')}",
                    "description": f"Generated {TYPES[level].lower()} {path}",
                    "persona": {"system_prompt": "You are a generated entity."},
                },
                "hierarchy": {"children": [{"child_id": c} for c in children]},
                "governance": {
                    "cost_controls": {"max_cost_usd": budget},
                    "execution_limits": {"max_recursion_depth": 5},
                },
                "planning": {
                    "static_plan": {
                        "enabled": bool(children),
                        "steps": [
                            {
                                "step_id": f"s{i + 1}",
                                "order": i + 1,
                                "name": f"Invoke {c}",
                                "type": "CHILD_ENTITY_INVOCATION",
                                "target": {"entity_id": c},
                            }
                            for i, c in enumerate(children)
                        ],
                    }
                },
            }
        )
        return ref

    make(0, "0", 100.0)
    return definitions


def timed(fn, repeat: int) -> tuple[list[float], int]:
    times, queries = [], 0
    for _ in range(repeat):
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as ctx:
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1000)
        queries = len(ctx.captured_queries)
    return times, queries


def page_figures(workspace: Workspace, repeat: int) -> dict[str, dict[str, float]]:
    """The pages a designer opens in that workspace, as a superuser opens them: the admin's
    change form of an agent and its add form; the designer's tree, a process's children, the
    editor of a process, an agent and an action, the check as one types in the process's
    editor, and an agent's history. Median server time, size and queries of each."""
    user = get_user_model().objects.create_superuser(
        f"bench-{uuid.uuid4().hex[:8]}", password=uuid.uuid4().hex
    )
    named = {e.name: e for e in Entity.objects.filter(workspace=workspace, name__in=NAMED)}
    process, agent, action = (named[name] for name in NAMED)
    ws = workspace.slug

    def at(name: str, **kwargs: object) -> str:
        return reverse(f"designer:{name}", kwargs={"workspace": ws, **kwargs})

    try:
        client = Client(HTTP_HOST="localhost", **{"wsgi.url_scheme": "https"})
        client.force_login(user)
        pages: dict[str, tuple[str, dict | None]] = {
            "admin_change_form": (reverse("admin:entities_entity_change", args=[agent.pk]), None),
            "admin_add_form": (reverse("admin:entities_entity_add"), None),
            "tree": (at("tree"), None),
            "tree_children_of_the_process": (at("tree_children", pk=process.pk), None),
            "editor_process": (at("entity", pk=process.pk), None),
            "editor_agent": (at("entity", pk=agent.pk), None),
            "editor_action": (at("entity", pk=action.pk), None),
            "history_agent": (at("versions", pk=agent.pk), None),
        }
        editor = client.get(at("entity", pk=process.pk))
        pages["check_process"] = (
            at("entity_check", pk=process.pk),
            form_data(editor.content, "editor"),
        )
        figures = {}
        for name, (url, data) in pages.items():
            sizes: list[int] = []

            def get(url: str = url, data: dict | None = data, sizes: list[int] = sizes) -> None:
                response = client.get(url) if data is None else client.post(url, data)
                assert response.status_code == 200, (url, response.status_code)
                sizes.append(len(response.content))

            times, queries = timed(get, repeat)
            figures[name] = {
                "ms": round(statistics.median(times), 1),
                "kb": round(sizes[-1] / 1024, 1),
                "queries": queries,
            }
        return figures
    finally:
        user.delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="10,10,10")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    shape = [int(n) for n in args.shape.split(",")]

    call_command("migrate", verbosity=0)
    workspace = Workspace.objects.create(name="bench", slug=f"bench-{uuid.uuid4().hex[:8]}")
    try:
        definitions = bundle(shape)
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as ctx:
            start = time.perf_counter()
            entities_import(workspace=workspace, definitions=definitions)
            import_s = time.perf_counter() - start
        import_queries = len(ctx.captured_queries)
        nodes = len(definitions)

        agent = Entity.objects.get(workspace=workspace, name="agent0_0")
        action = Entity.objects.get(workspace=workspace, name="action0_0_0_0")
        base = definition_of(agent)

        def toggle_save() -> None:
            current = definition_of(Entity.objects.get(pk=agent.pk))
            children = base["hierarchy"]["children"]
            extra = [{"child_id": action.ref}]
            has_extra = len(current["hierarchy"]["children"]) > len(children)
            current["hierarchy"]["children"] = children if has_extra else children + extra
            entity_save(workspace=workspace, definition=current, entity=agent)

        save_ms, save_queries = timed(toggle_save, args.repeat)

        process = Entity.objects.get(workspace=workspace, name="process0")
        cyclic = definition_of(action)
        cyclic["hierarchy"]["children"] = [{"child_id": process.ref}]

        def refused() -> None:
            try:
                entity_save(workspace=workspace, definition=cyclic, entity=action)
            except DefinitionInvalid:
                return
            raise AssertionError("the cycle was accepted")

        refuse_ms, _ = timed(refused, args.repeat)

        start = time.perf_counter()
        export_workspace(workspace)
        export_s = time.perf_counter() - start
        pages = page_figures(workspace, max(3, args.repeat // 4))

        figures = {
            "database": connection.vendor,
            "shape": args.shape,
            "nodes": nodes,
            "import_s": round(import_s, 3),
            "import_ms_per_entity": round(import_s * 1000 / nodes, 3),
            "import_queries_per_entity": round(import_queries / nodes, 2),
            "save_p50_ms": round(statistics.median(save_ms), 2),
            "save_max_ms": round(max(save_ms), 2),
            "save_queries": save_queries,
            "refused_save_p50_ms": round(statistics.median(refuse_ms), 2),
            "export_s": round(export_s, 3),
            "pages": pages,
        }
    finally:
        # The entities go; the workspace stays, as its audit chain is append-only (run the
        # bench on a database of its own: DATABASE_URL).
        ChildLink.objects.filter(parent__workspace=workspace).delete()
        PlanStep.objects.filter(entity__workspace=workspace).delete()
        Entity.objects.filter(workspace=workspace).delete()

    if args.json:
        print(json.dumps(figures))
        return
    print(f"{nodes} entities ({args.shape}) on {figures['database']}")
    print(
        f"  import: {figures['import_s']} s, {figures['import_ms_per_entity']} ms and "
        f"{figures['import_queries_per_entity']} queries per entity"
    )
    print(
        f"  one save in that workspace: p50 {figures['save_p50_ms']} ms, max "
        f"{figures['save_max_ms']} ms, {figures['save_queries']} queries"
    )
    print(f"  a refused save (cycle): p50 {figures['refused_save_p50_ms']} ms")
    print(f"  export of the workspace: {figures['export_s']} s")
    for name, page in figures["pages"].items():
        print(
            f"  {name.replace('_', ' ')}: {page['ms']} ms on the server, {page['kb']} KB, "
            f"{page['queries']} queries"
        )


if __name__ == "__main__":
    main()
