"""The designer at a workspace's scale: at 1,111 entities (a 10,10,10 hierarchy) every page of
the tree, the editor and the history answers in a bounded number of queries and weighs under
300 KB. How long they take is measured by bench/designer.py, not asserted here: a test's clock
on a shared machine says more about the machine than about the page."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from entities.models import Entity
from entities.services import entities_import
from tests.factories import UserFactory, WorkspaceFactory, grant
from tests.support.clients import signed_in
from tests.support.page_form import form_data

pytestmark = pytest.mark.django_db

MOST_QUERIES = 30
MOST_BYTES = 300_000


def ten_ten_ten() -> list[dict]:
    """process → 10 agents → 10 skills each → 10 actions each (1,111 entities)."""
    definitions: list[dict] = []
    types = ("PROCESS", "AGENT", "SKILL", "ACTION")

    def make(level: int, path: str) -> str:
        ref = f"n{path}"
        children = [make(level + 1, f"{path}_{i}") for i in range(10)] if level < 3 else []
        definitions.append(
            {
                "metadata": {"id": ref, "type": types[level], "status": "ACTIVE"},
                "identity": {
                    "name": f"{types[level].lower()}{path}",
                    "description": f"Generated {types[level].lower()} {path}",
                    "persona": {"system_prompt": "You are generated."},
                },
                "hierarchy": {"children": [{"child_id": c} for c in children]},
            }
        )
        return ref

    make(0, "0")
    return definitions


def test_every_designer_page_is_bounded_at_1111_entities(django_assert_max_num_queries):
    workspace = WorkspaceFactory(name="Big", slug="big")
    user = grant(UserFactory(username="big_designer"), workspace, "designer", "operator")
    entities_import(workspace=workspace, definitions=ten_ten_ten())
    assert Entity.objects.filter(workspace=workspace).count() == 1111
    client = signed_in(Client, user)
    named = {
        e.name: e
        for e in Entity.objects.filter(
            name__in=["process0", "agent0_3", "skill0_3_4", "action0_3_4_5"]
        )
    }

    def at(name: str, **kwargs: object) -> str:
        return reverse(f"designer:{name}", kwargs={"workspace": "big", **kwargs})

    pages = [
        at("tree"),
        at("tree_children", pk=named["process0"].pk),
        at("tree_children", pk=named["agent0_3"].pk),
        at("tree_search") + "?q=action0_3_4",
        at("tree_candidates", pk=named["agent0_3"].pk) + "?q=skill",
        at("entity_new") + "?type=AGENT",
        *(at("entity", pk=entity.pk) for entity in named.values()),
        *(at("versions", pk=entity.pk) for entity in named.values()),
    ]
    for page in pages:
        with django_assert_max_num_queries(MOST_QUERIES):
            response = client.get(page)
        assert response.status_code == 200, page
        assert len(response.content) < MOST_BYTES, (page, len(response.content))
    # The check as one types, on the biggest definition (the process and its ten children).
    editor = at("entity", pk=named["process0"].pk)
    data = form_data(client.get(editor).content, "editor")
    with django_assert_max_num_queries(MOST_QUERIES):
        response = client.post(at("entity_check", pk=named["process0"].pk), data)
    assert response.status_code == 200
    assert len(response.content) < MOST_BYTES
