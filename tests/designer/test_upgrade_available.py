"""The designer shows "upgrade available" where a child link's version misses a newer version
of the child (seed 000 §10.2): in the editor's Children section, with a button that widens the
link and saves (a new version of the parent), and in the tree's list of the parent's children.
The version is edited on each child row like any other field."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client
from django.urls import reverse

from entities.models import ChildLink, Entity
from entities.selectors import entity_definition, entity_upgrades
from entities.services import entity_save
from tests.factories import EntityFactory
from tests.support.clients import signed_in
from tests.support.designer import shown, url
from tests.support.editor import section

pytestmark = pytest.mark.django_db

NOTE = (
    "pinned ^1.0.0 → 1.0.1; 2.0.0 available (MAJOR: breaks the io contract — input field "
    "'tone' is now required)"
)


@pytest.fixture
def designer(alice):
    return signed_in(Client, alice)


@pytest.fixture
def viewer(bob):
    return signed_in(Client, bob)


@pytest.fixture
def writer(acme) -> Entity:
    """1.0.0, 1.0.1 (its prompt) and 2.0.0 (a required input field: MAJOR)."""
    entity = EntityFactory(workspace=acme, name="writer")
    data = entity_definition(entity=entity)
    data["identity"]["persona"]["system_prompt"] = "Write better."
    entity_save(workspace=acme, entity=entity, definition=data)
    data["io_contract"]["input"]["schema"] = {
        "type": "object",
        "properties": {"tone": {"type": "string"}},
        "required": ["tone"],
    }
    return entity_save(workspace=acme, entity=entity, definition=data).entity


def lead(acme, version: str | None) -> Entity:
    return EntityFactory(
        workspace=acme,
        name="lead",
        type="AGENT",
        children=[{"child_id": "writer", "version": version}],
    )


def text(response) -> str:
    return html.unescape(re.sub(r"\s+", " ", response.content.decode()))


def test_the_editor_shows_what_the_links_range_misses(designer, acme, writer):
    parent = lead(acme, "^1.0.0")

    response = designer.get(url(parent))

    assert response.status_code == 200
    assert "Upgrade available" in text(response)
    assert NOTE in text(response)
    page = shown(designer, url(parent))
    assert page["children-children-0-version"] == "^1.0.0"
    assert 'name="widen" value="children-children-0:^2.0.0"' in response.content.decode()


def test_a_link_that_runs_the_newest_shows_no_upgrade(designer, acme, writer):
    for version in (None, "^2.0.0"):
        Entity.objects.filter(name="lead").delete()
        response = designer.get(url(lead(acme, version)))
        assert "Upgrade available" not in text(response)
        assert 'name="widen"' not in response.content.decode()


def test_a_viewer_sees_the_upgrade_but_no_button(viewer, acme, writer):
    response = viewer.get(url(lead(acme, "^1.0.0")))

    assert NOTE in text(response)
    assert 'name="widen"' not in response.content.decode()


def test_one_click_widens_the_link_and_saves_a_new_version(designer, acme, writer):
    parent = lead(acme, "^1.0.0")
    page = shown(designer, url(parent))

    response = designer.post(url(parent), page | {"widen": "children-children-0:^2.0.0"})

    assert response.status_code == 302, response.content.decode()[:2000]
    parent.refresh_from_db()
    assert parent.version == "1.0.1"
    assert ChildLink.objects.get(parent=parent).version == "^2.0.0"
    assert entity_upgrades(entity=parent) == []
    assert "Upgrade available" not in text(designer.get(url(parent)))


def test_a_widen_of_another_row_or_a_bad_value_changes_nothing_it_should_not(
    designer, acme, writer
):
    parent = lead(acme, "^1.0.0")
    page = shown(designer, url(parent))

    for widen in ("children-children-7:^2.0.0", "plan-steps-0:^2.0.0", "nonsense", ""):
        response = designer.post(url(parent), page | {"widen": widen})
        assert response.status_code == 302
    parent.refresh_from_db()
    assert parent.version == "1.0.0"  # the form as shown: nothing changed
    # A widened value is checked as a typed one: refused at the row's field.
    response = designer.post(url(parent), page | {"widen": "children-children-0:^9.0.0"})
    assert response.status_code == 422
    row = section(response, "children").rowsets["children"].forms[0]
    assert row.errors["version"] == ["no version of 'writer' matches ^9.0.0; it has 1.0.0–2.0.0"]


@pytest.mark.parametrize(
    ("typed", "error"),
    [
        ("^^1", "'^^1' is not a version or a version range"),
        ("^3.0.0", "no version of 'writer' matches ^3.0.0; it has 1.0.0–2.0.0"),
        ("^1." + "9" * 300, "at most 100 characters"),
        ("^1.0\x00", "Null characters are not allowed"),
    ],
)
def test_a_typed_version_is_checked_at_its_field(designer, acme, writer, typed, error):
    parent = lead(acme, None)
    page = shown(designer, url(parent)) | {"children-children-0-version": typed, "op": "save"}

    response = designer.post(url(parent), page)

    assert response.status_code == 422
    row = section(response, "children").rowsets["children"].forms[0]
    assert error in html.unescape(str(row.errors["version"]))
    assert ChildLink.objects.get(parent=parent).version == ""


def test_a_typed_version_is_saved_and_shown_again(designer, acme, writer):
    parent = lead(acme, None)
    page = shown(designer, url(parent)) | {"children-children-0-version": "~1.0", "op": "save"}

    assert designer.post(url(parent), page).status_code == 302

    assert entity_definition(entity=parent)["hierarchy"]["children"][0]["version"] == "~1.0"
    again = shown(designer, url(parent))
    assert again["children-children-0-version"] == "~1.0"
    # Saved again as shown: nothing changes.
    before = entity_definition(entity=parent)
    assert designer.post(url(parent), again | {"op": "save"}).status_code == 302
    assert entity_definition(entity=parent) == before


def test_the_tree_lists_the_upgrade_under_the_parent(viewer, acme, writer):
    parent = lead(acme, "^1.0.0")
    address = reverse("designer:tree_children", kwargs={"workspace": "acme", "pk": parent.pk})

    page = text(viewer.get(address))

    assert "Upgrade available" in page
    assert NOTE in page
    assert url(parent) + "#section-children" in page
