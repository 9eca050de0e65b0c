"""Rows move up and down their list in the editor (a plan's steps, children, contract
fields…): every field of the row moves with it, nothing is saved until Save."""

from __future__ import annotations

import pytest
from django.test import Client

from entities.models import Entity
from tests.factories import EntityFactory
from tests.support.clients import signed_in
from tests.support.designer import shown, url
from tests.support.page_form import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def designer(alice):
    return signed_in(Client, alice)


@pytest.fixture
def skill(acme):
    parts = [EntityFactory(workspace=acme, name=name) for name in ("fetch", "draft", "send")]
    return EntityFactory(workspace=acme, name="mail", type="SKILL", children=parts)


def children_of(page: dict) -> list[str]:
    count = int(page["children-children-TOTAL_FORMS"])
    return [page[f"children-children-{i}-child"] for i in range(count)]


def test_a_child_moves_up_with_its_condition_and_is_saved_in_its_new_place(designer, skill):
    page = shown(designer, url(skill))
    assert children_of(page) == ["fetch", "draft", "send"]
    page |= {
        "children-children-2-relationship": "CONDITIONAL",
        "children-children-2-condition_0_field": "input.to",
        "children-children-2-condition_0_op": "not_empty",
    }
    response = designer.post(url(skill), page | {"move_row": "children-children-2:up"})
    assert response.status_code == 200
    moved = form_data(response.content, "editor")
    assert children_of(moved) == ["fetch", "send", "draft"]
    assert moved["children-children-1-relationship"] == "CONDITIONAL"
    assert moved["children-children-1-condition_0_field"] == "input.to"
    assert moved["children-children-2-relationship"] != "CONDITIONAL"
    assert Entity.objects.get(pk=skill.pk).version == skill.version  # nothing saved yet

    response = designer.post(url(skill), moved | {"op": "save"})
    assert response.status_code == 302, response.content.decode()[:2000]
    links = list(Entity.objects.get(pk=skill.pk).child_links.all())
    assert [link.child.name for link in links] == ["fetch", "send", "draft"]
    assert [link.relationship for link in links][1] == "CONDITIONAL"


@pytest.mark.parametrize(
    "move",
    [
        "children-children-0:up",  # past the top
        "children-children-2:down",  # past the bottom
        "children-children-9:up",  # no such row
        "children-children-x:up",
        "children-children-1:sideways",
        "children-children-1",
        "",
        ":up",
        "\x00:up",
    ],
)
def test_a_move_that_cannot_be_done_leaves_the_rows_as_they_are(designer, skill, move):
    page = shown(designer, url(skill))
    response = designer.post(url(skill), page | {"move_row": move})
    assert response.status_code in (200, 302, 422)
    if response.status_code == 200:
        assert children_of(form_data(response.content, "editor")) == ["fetch", "draft", "send"]
    assert Entity.objects.get(pk=skill.pk).version == skill.version


def test_each_row_offers_the_moves_it_can_make(designer, skill):
    body = designer.get(url(skill)).content.decode()
    assert 'value="children-children-0:up"' not in body
    assert 'value="children-children-0:down"' in body
    assert 'value="children-children-1:up"' in body
    assert 'value="children-children-2:down"' not in body
