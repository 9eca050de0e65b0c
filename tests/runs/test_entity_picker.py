"""The entity filters of the runs list and the dashboard: a text field with suggestions (the
first 20 of the user's visible entities, htmx-fed), resolving a name, `name (workspace)` or an
id without JavaScript; the pages stay small however many entities there are."""

from __future__ import annotations

import pytest

from tests.factories import EntityFactory, WorkspaceFactory, grant

pytestmark = pytest.mark.django_db

SUGGEST = "/runs/entities/"
LIST_ID = {"list": "id_entity-suggestions"}


@pytest.fixture
def many(acme):
    """300 entities in Acme."""
    return [EntityFactory(workspace=acme, name=f"agent_{n:03d}") for n in range(300)]


def test_it_suggests_the_first_twenty_matches_by_name(client, bob, many):
    client.force_login(bob)
    page = client.get(SUGGEST, {"entity": "agent_1", **LIST_ID}).content.decode()
    assert page.startswith('<datalist id="id_entity-suggestions">')
    assert page.count("<option") == 20
    assert 'value="agent_100 (Acme)"' in page and "agent_000" not in page


def test_it_suggests_nothing_of_another_workspace(client, charlie, many):
    client.force_login(charlie)
    page = client.get(SUGGEST, {"entity": "agent", **LIST_ID}).content.decode()
    assert "<option" not in page


def test_a_list_id_that_is_not_one_is_refused(client, bob):
    client.force_login(bob)
    assert client.get(SUGGEST, {"entity": "a", "list": '"><script>'}).status_code == 400


def test_a_workspace_name_is_escaped_in_the_suggestions(client, bob):
    shady = WorkspaceFactory(name='"><img src=x>', slug="shady")
    grant(bob, shady, "viewer")
    EntityFactory(workspace=shady, name="x_quote")
    client.force_login(bob)
    page = client.get(SUGGEST, {"entity": "x_", **LIST_ID}).content.decode()
    assert 'value="x_quote (&quot;&gt;&lt;img src=x&gt;)"' in page and "<img" not in page


@pytest.mark.parametrize("page_url", ["/runs/", "/dashboard/"])
def test_the_filters_resolve_a_typed_name_and_say_when_nothing_matches(
    client, alice, acme, page_url
):
    writer = EntityFactory(workspace=acme, name="writer")
    client.force_login(alice)
    for typed in ("writer", "writer (Acme)", str(writer.pk)):
        answer = client.get(page_url, {"entity": typed})
        assert answer.status_code == 200, typed
    # An id (a link's) is shown as the suggestions write the entity.
    assert 'value="writer (Acme)"' in answer.content.decode()
    missing = client.get(page_url, {"entity": "nobody"})
    assert missing.status_code == 422
    assert "No entity is named “nobody” among the ones you can see" in missing.content.decode()


def test_a_name_in_two_workspaces_asks_for_the_workspace(client, alice, acme):
    other = WorkspaceFactory(name="Initech", slug="initech")
    grant(alice, other, "viewer")
    EntityFactory(workspace=acme, name="writer")
    EntityFactory(workspace=other, name="writer")
    client.force_login(alice)
    ambiguous = client.get("/runs/", {"entity": "writer"})
    assert ambiguous.status_code == 422
    assert "Several of your workspaces have an entity named “writer”" in (
        ambiguous.content.decode()
    )
    assert client.get("/runs/", {"entity": "writer (Initech)"}).status_code == 200


@pytest.mark.parametrize("page_url", ["/runs/", "/dashboard/"])
def test_the_page_stays_small_at_many_entities(client, bob, acme, many, page_url):
    client.force_login(bob)
    page = client.get(page_url).content.decode()
    assert "agent_" not in page  # no entity listed
    assert len(page.encode()) < 60_000
