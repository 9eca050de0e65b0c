"""The versions page: the history, the comparison of two versions, and a restore."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from django.urls import reverse

from entities.selectors import entity_version_list
from entities.services import entities_delete, entity_save
from tests.factories import EntityFactory, definition, grant
from tests.support.clients import signed_in

pytestmark = pytest.mark.django_db

PROMPT = "You are a careful writer who drafts every brief in plain words."


def writer_definition(prompt: str = PROMPT, **sections) -> dict:
    data = definition("writer", "AGENT", **sections)
    data["identity"]["persona"]["system_prompt"] = prompt
    return data


@pytest.fixture
def writer(acme, alice):
    """An agent with three versions: 1.0.0 as created, 1.0.1 with a new prompt, 1.0.2 with
    a lower recursion limit."""
    entity = entity_save(workspace=acme, definition=writer_definition(), user=alice).entity
    entity_save(
        workspace=acme,
        entity=entity,
        user=alice,
        definition=writer_definition(PROMPT.replace("careful", "quick")),
    )
    entity_save(
        workspace=acme,
        entity=entity,
        user=alice,
        definition=writer_definition(
            PROMPT.replace("careful", "quick"), max_depth=3, identity={"name": "writer"}
        ),
    )
    entity.refresh_from_db()
    assert entity.version == "1.0.2"
    return entity


def url(entity, **params) -> str:
    base = reverse(
        "designer:versions", kwargs={"workspace": entity.workspace.slug, "pk": entity.pk}
    )
    if not params:
        return base
    return base + "?" + "&".join(f"{key}={value}" for key, value in params.items())


def test_it_asks_for_a_sign_in(client, writer):
    response = client.get(url(writer))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_history_lists_every_version_newest_first_and_compares_the_last_two(alice, writer):
    response = signed_in(Client, alice).get(url(writer))
    assert response.status_code == 200
    page = response.content.decode()
    listed = [v.version for v in response.context["page"].object_list]
    assert listed == ["1.0.2", "1.0.1", "1.0.0"]
    assert ">Initial<" in page and ">Patch<" in page and "alice" in page
    assert (response.context["old"].version, response.context["new"].version) == ("1.0.1", "1.0.2")
    [change] = response.context["diff"].changes
    assert change.label == "Governance › Execution limits › Max recursion depth"
    assert (change.before, change.after) == ("5", "3")
    assert "Changes from 1.0.1 to 1.0.2" in page
    assert "<strong>1 difference</strong>: 1 changed, 0 added, 0 removed." in page


def test_any_two_versions_compare_with_long_text_diffed_inline(alice, writer):
    response = signed_in(Client, alice).get(url(writer, a="1.0.0", b="1.0.2"))
    assert response.status_code == 200
    labels = [change.label for change in response.context["diff"].changes]
    assert labels == [
        "Identity › Persona › System prompt",
        "Governance › Execution limits › Max recursion depth",
    ]
    page = response.content.decode()
    assert "<del>careful </del><ins>quick </ins>" in page
    assert "Unchanged: Metadata, Hierarchy" in page


def test_b_alone_is_compared_with_the_version_before_it(alice, writer):
    response = signed_in(Client, alice).get(url(writer, b="1.0.1"))
    assert (response.context["old"].version, response.context["new"].version) == ("1.0.0", "1.0.1")


def test_one_version_only_has_nothing_to_compare(alice, acme):
    entity = EntityFactory(workspace=acme, name="lonely", user=alice)
    response = signed_in(Client, alice).get(url(entity))
    assert response.status_code == 200 and "diff" not in response.context
    assert "Only one version so far" in response.content.decode()


def test_user_made_text_is_escaped(alice, acme):
    entity = entity_save(workspace=acme, definition=writer_definition(), user=alice).entity
    entity_save(
        workspace=acme,
        entity=entity,
        user=alice,
        definition=writer_definition("<script>alert('x')</script> " + PROMPT),
    )
    page = signed_in(Client, alice).get(url(entity)).content.decode()
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page


def test_another_workspaces_entity_is_not_found(alice, charlie, globex, writer):
    theirs = EntityFactory(workspace=globex, name="theirs", user=charlie)
    as_alice = signed_in(Client, alice)
    assert as_alice.get(url(theirs)).status_code == 404
    # Under her own workspace's URL too.
    foreign = reverse("designer:versions", kwargs={"workspace": "acme", "pk": theirs.pk})
    assert as_alice.get(foreign).status_code == 404
    assert as_alice.post(foreign, {"version": "1.0.0", "confirmed": "yes"}).status_code == 404
    # And her entity under a workspace of hers that is not its own.
    grant(alice, globex, "viewer")
    wrong = reverse("designer:versions", kwargs={"workspace": "globex", "pk": writer.pk})
    assert as_alice.get(wrong).status_code == 404
    missing = reverse("designer:versions", kwargs={"workspace": "acme", "pk": uuid.uuid4()})
    assert as_alice.get(missing).status_code == 404


def test_a_version_that_does_not_exist_is_not_found(alice, writer):
    client = signed_in(Client, alice)
    assert client.get(url(writer, a="9.9.9")).status_code == 404
    assert client.get(url(writer, b="1.0.0", a="3.0.0")).status_code == 404
    assert client.get(url(writer, restore="2.0.0")).status_code == 404
    assert client.post(url(writer), {"version": "2.0.0", "confirmed": "yes"}).status_code == 404


@pytest.mark.parametrize(
    "bad", ["a\x00b", "1.0.0\x00", "garbage", "1.0", "1.0.0.0", "9" * 30, "-1.0.0"]
)
def test_a_parameter_that_is_not_a_version_is_a_bad_request_naming_it(alice, writer, bad):
    client = signed_in(Client, alice)
    response = client.get(url(writer), {"a": bad, "b": "1.0.0"})
    assert response.status_code == 400
    assert "a: " in response.context["problem"] and "is not a version" in response.content.decode()
    assert client.get(url(writer), {"restore": bad}).status_code == 400
    refused = client.post(url(writer), {"version": bad, "confirmed": "yes"})
    assert refused.status_code == 400 and b"version: " in refused.content
    assert entity_version_list(entity=writer).count() == 3


def test_a_page_number_that_is_garbage_shows_the_first_page(alice, writer):
    response = signed_in(Client, alice).get(url(writer), {"page": "x\x00"})
    assert response.status_code == 200 and response.context["page"].number == 1


def test_a_viewer_sees_the_history_read_only(bob, writer):
    client = signed_in(Client, bob)
    page = client.get(url(writer))
    assert page.status_code == 200 and "Restore…" not in page.content.decode()
    assert client.get(url(writer, restore="1.0.0")).status_code == 403
    refused = client.post(url(writer), {"version": "1.0.0", "confirmed": "yes"})
    assert refused.status_code == 403
    assert entity_version_list(entity=writer).count() == 3


def test_restoring_asks_for_confirmation_first(alice, writer):
    client = signed_in(Client, alice)
    page = client.get(url(writer)).content.decode()
    assert f'href="{url(writer)}?restore=1.0.0"' in page
    confirm = client.get(url(writer, restore="1.0.0"))
    assert confirm.status_code == 200
    assert "Restore version 1.0.0?" in confirm.content.decode()
    # What restoring would change: from the current version to the one restored.
    assert (confirm.context["old"].version, confirm.context["new"].version) == ("1.0.2", "1.0.0")
    # A POST without the confirmation goes to it and restores nothing.
    unconfirmed = client.post(url(writer), {"version": "1.0.0"})
    assert unconfirmed.status_code == 302
    assert unconfirmed["Location"] == url(writer, restore="1.0.0")
    assert entity_version_list(entity=writer).count() == 3


def test_restoring_a_version_makes_it_a_new_version(alice, writer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    confirm = client.get(url(writer, restore="1.0.0"))
    token = confirm.context["csrf_token"]
    response = client.post(
        url(writer), {"version": "1.0.0", "confirmed": "yes", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302 and response["Location"] == url(writer)
    history = list(entity_version_list(entity=writer))
    assert [v.version for v in history] == ["1.0.3", "1.0.2", "1.0.1", "1.0.0"]
    restored = history[0]
    assert restored.created_by == alice
    assert restored.definition["identity"]["persona"]["system_prompt"] == PROMPT
    limits = restored.definition["governance"]["execution_limits"]
    assert limits["max_recursion_depth"] == 5
    page = client.get(response["Location"])
    assert "Restored version 1.0.0 as version 1.0.3." in page.content.decode()
    # The page now compares the restore with what it replaced.
    assert (page.context["old"].version, page.context["new"].version) == ("1.0.2", "1.0.3")


def test_restoring_needs_the_csrf_token(alice, writer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(url(writer), {"version": "1.0.0", "confirmed": "yes"})
    assert response.status_code == 403
    assert entity_version_list(entity=writer).count() == 3


def test_restoring_the_current_definition_changes_nothing_and_says_so(alice, writer):
    client = signed_in(Client, alice)
    response = client.post(url(writer), {"version": "1.0.2", "confirmed": "yes"}, follow=True)
    assert "already matches version 1.0.2" in response.content.decode()
    assert entity_version_list(entity=writer).count() == 3


def test_a_restore_the_workspace_refuses_now_names_the_problem_and_loses_nothing(alice, acme):
    helper = EntityFactory(workspace=acme, name="helper", user=alice)
    boss = entity_save(
        workspace=acme, user=alice, definition=definition("boss", "AGENT", children=["helper"])
    ).entity
    entity_save(workspace=acme, entity=boss, user=alice, definition=definition("boss", "AGENT"))
    entities_delete(workspace=acme, entities=[helper], user=alice)
    client = signed_in(Client, alice)

    response = client.post(url(boss), {"version": "1.0.0", "confirmed": "yes"}, follow=True)
    page = response.content.decode()
    assert response.status_code == 200
    assert "Version 1.0.0 cannot be restored as it is: Children › 1 › Child: " in page
    assert f"there is no entity &#x27;{helper.pk}&#x27; in this workspace" in page
    assert "Nothing was changed." in page
    assert [v.version for v in entity_version_list(entity=boss)] == ["1.0.1", "1.0.0"]
    # It lands on what the restore would have changed.
    assert response.context["new"].version == "1.0.0"


def test_the_page_links_to_the_entitys_editor(alice, writer):
    page = signed_in(Client, alice).get(url(writer)).content.decode()
    editor = reverse("designer:entity", kwargs={"workspace": "acme", "pk": writer.pk})
    assert f'href="{editor}"' in page


def test_the_page_answers_in_a_bounded_number_of_queries(
    alice, writer, django_assert_max_num_queries
):
    client = signed_in(Client, alice)
    for n in range(60):  # two pages of history
        entity_save(
            workspace=writer.workspace,
            entity=writer,
            user=alice,
            definition=writer_definition(f"{PROMPT} Revision {n}.", max_depth=3),
        )
    with django_assert_max_num_queries(14):
        response = client.get(url(writer))
    assert response.status_code == 200 and response.context["page"].has_next()
