"""The admin as the first designer, through the Django test client: scoping, the change form
with its inlines and whole-definition validation, import, versions, status actions, tools and
members. POST data is what a browser would send for the rendered page (`page_form`)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from entities.models import (
    ChildLink,
    Entity,
    EntityStatusChange,
    EntityVersion,
    Membership,
    PlanStep,
)
from entities.versioning import content
from governance.permissions import DESIGN, has_perm
from tests.factories import (
    EntityFactory,
    UserFactory,
    WorkspaceFactory,
    grant,
    make_tool,
)
from tests.support.page_form import added_row, form_data
from tools.models import Tool

pytestmark = pytest.mark.smoke

FIXTURE = Path(__file__).resolve().parents[2] / "entities" / "fixtures" / "video_ad_process.json"


@pytest.fixture(scope="module")
def world(module_db):
    """Acme (alice designs, bob views, ada administers), Globex (charlie designs) and Initech
    (alice only views). Acme: planner_agent → research_skill → web_search_action; the planner
    has the echo tool and one plan step invoking research_skill; summarise_action and
    sketch_action (a draft) stand alone. Globex: globex_secret_agent → globex_hidden_action."""
    acme = WorkspaceFactory(name="Acme", slug="acme")
    globex = WorkspaceFactory(name="Globex", slug="globex")
    initech = WorkspaceFactory(name="Initech", slug="initech")
    alice = grant(UserFactory(username="alice"), acme, "designer")
    grant(alice, initech, "viewer")
    make_tool(acme, "echo")
    search = EntityFactory(workspace=acme, name="web_search_action", metadata={"tags": ["lookup"]})
    research = EntityFactory(
        workspace=acme,
        name="research_skill",
        type="SKILL",
        children=[search],
        metadata={"tags": ["lookup", "curated"]},
    )
    planner = EntityFactory(
        workspace=acme,
        name="planner_agent",
        type="AGENT",
        children=[research],
        tools=[{"tool_id": "echo"}],
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [
                    {
                        "order": 1,
                        "name": "Research the brief",
                        "type": "CHILD_ENTITY_INVOCATION",
                        "target": {"entity_id": "research_skill"},
                    }
                ],
            }
        },
    )
    secret = EntityFactory(
        workspace=globex,
        name="globex_secret_agent",
        type="AGENT",
        children=[EntityFactory(workspace=globex, name="globex_hidden_action")],
    )
    return SimpleNamespace(
        acme=acme,
        globex=globex,
        initech=initech,
        alice=alice,
        bob=grant(UserFactory(username="bob"), acme, "viewer"),
        ada=grant(UserFactory(username="ada"), acme, "admin"),
        charlie=grant(UserFactory(username="charlie"), globex, "designer"),
        root=UserFactory(username="root", is_superuser=True),
        planner=planner,
        research=research,
        search=search,
        summarise=EntityFactory(workspace=acme, name="summarise_action"),
        sketch=EntityFactory(
            workspace=acme, name="sketch_action", metadata={"status": "DRAFT", "tags": []}
        ),
        secret=secret,
        acme_names={
            "planner_agent",
            "research_skill",
            "web_search_action",
            "summarise_action",
            "sketch_action",
        },
    )


@pytest.fixture
def as_alice(world, db, client):
    client.force_login(world.alice)
    return client


def change_url(entity: Entity) -> str:
    return reverse("admin:entities_entity_change", args=[entity.pk])


def changelist_names(response) -> set[str]:
    return {entity.name for entity in response.context["cl"].result_list}


def list_filter(response, parameter: str):
    specs = response.context["cl"].filter_specs
    return next(s for s in specs if getattr(s, "parameter_name", None) == parameter)


def messages_of(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def inline_forms(response, model: type) -> list:
    formset = next(
        inline.formset
        for inline in response.context["inline_admin_formsets"]
        if inline.formset.model is model
    )
    return formset.forms


def change_form(client: Client, entity: Entity) -> dict:
    response = client.get(change_url(entity))
    assert response.status_code == 200
    return form_data(response.content, "entity_form")


def post_change(client: Client, entity: Entity, changes: dict) -> object:
    data = change_form(client, entity)
    data.update(changes)
    return client.post(change_url(entity), {**data, "_save": "Save"})


def children_of(entity: Entity) -> list[str]:
    links = ChildLink.objects.filter(parent=entity).order_by("order", "id")
    return list(links.values_list("child__name", flat=True))


def versions_of(entity: Entity) -> list[str]:
    return list(entity.versions.order_by("created_at", "id").values_list("version", flat=True))


# The changelist


def test_the_changelist_lists_only_the_designers_workspace(as_alice, world):
    response = as_alice.get(reverse("admin:entities_entity_changelist"))
    assert response.status_code == 200
    assert changelist_names(response) == world.acme_names
    assert b"globex_secret_agent" not in response.content
    assert b"globex_hidden_action" not in response.content


def test_a_designer_of_another_workspace_sees_none_of_acme(world, db, client):
    client.force_login(world.charlie)
    response = client.get(reverse("admin:entities_entity_changelist"), {"q": "_"})
    assert changelist_names(response) == {"globex_secret_agent", "globex_hidden_action"}
    assert client.get(change_url(world.planner)).status_code == 302
    assert b"planner_agent" not in client.get(change_url(world.planner), follow=True).content


def test_a_superuser_sees_every_workspace_in_the_changelist(world, db, client):
    client.force_login(world.root)
    response = client.get(reverse("admin:entities_entity_changelist"))
    names = changelist_names(response)
    assert world.acme_names | {"globex_secret_agent", "globex_hidden_action"} <= names


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"q": "planner"}, {"planner_agent"}),
        ({"q": "curated"}, {"research_skill"}),
        ({"q": "secret"}, set()),
        ({"tag": "lookup"}, {"research_skill", "web_search_action"}),
        ({"type__exact": "SKILL"}, {"research_skill"}),
        ({"status__exact": "DRAFT"}, {"sketch_action"}),
    ],
    ids=["name", "tag-search", "other-workspace", "tag-filter", "type", "status"],
)
def test_the_changelist_searches_and_filters(as_alice, query, expected):
    response = as_alice.get(reverse("admin:entities_entity_changelist"), query)
    assert response.status_code == 200
    assert changelist_names(response) == expected


def test_the_workspace_filter_offers_only_the_users_workspaces(as_alice, world):
    response = as_alice.get(reverse("admin:entities_entity_changelist"))
    spec = list_filter(response, "workspace")
    assert {label for _, label in spec.lookup_choices} == {"Acme", "Initech"}
    assert b"Globex" not in response.content

    other = as_alice.get(
        reverse("admin:entities_entity_changelist"), {"workspace": world.globex.pk}
    )
    assert changelist_names(other) == set()


def test_the_tag_filter_offers_only_tags_of_the_users_workspaces(world, db, client):
    EntityFactory(workspace=world.globex, name="tagged_action", metadata={"tags": ["classified"]})
    client.force_login(world.alice)
    response = client.get(reverse("admin:entities_entity_changelist"))
    spec = list_filter(response, "tag")
    assert {value for value, _ in spec.lookup_choices} == {"curated", "lookup"}


# The change form, read


def test_the_change_form_renders_with_its_inlines(as_alice, world):
    response = as_alice.get(change_url(world.planner))
    assert response.status_code == 200
    children = inline_forms(response, ChildLink)
    assert [form.instance.child_id for form in children] == [world.research.pk, None]
    steps = inline_forms(response, PlanStep)
    assert [form.instance.name for form in steps] == ["Research the brief"]
    assert [v.version for v in response.context["original"].versions.all()] == ["1.0.0"]
    page = html.unescape(response.content.decode())
    assert 'name="child_links-TOTAL_FORMS" value="2"' in page
    assert 'name="plan_steps-TOTAL_FORMS" value="1"' in page
    assert '\n  "execution_limits": {\n' in page  # the JSON sections are shown indented


def test_the_child_choices_are_the_entitys_own_workspace(world, db, client):
    grant(world.alice, world.globex, "designer")
    client.force_login(world.alice)
    response = client.get(change_url(world.planner))
    choices = inline_forms(response, ChildLink)[-1].fields["child"].queryset
    assert set(choices.values_list("workspace__slug", flat=True)) == {"acme"}
    assert b"globex_secret_agent" not in response.content


def test_the_entity_pickers_search_instead_of_listing_every_entity(as_alice, world):
    """The parent, child and plan-target pickers are the admin's autocomplete: the change
    form carries the entities chosen, not every entity of the workspace."""
    response = as_alice.get(change_url(world.planner))
    page = response.content.decode()
    assert "research_skill" in page  # its child and its plan step's target, chosen
    for other in ("summarise_action", "sketch_action", "web_search_action"):
        assert other not in page
    assert page.count("admin-autocomplete") >= 3  # parent, the child rows, the plan target


def autocomplete(client: Client, model_name: str, field_name: str, term: str) -> set[str]:
    response = client.get(
        reverse("admin:autocomplete"),
        {"app_label": "entities", "model_name": model_name, "field_name": field_name, "term": term},
    )
    assert response.status_code == 200
    return {result["text"] for result in response.json()["results"]}


@pytest.mark.parametrize(
    ("model_name", "field_name"),
    [("entity", "parent"), ("childlink", "child"), ("planstep", "target_entity")],
)
def test_an_entity_picker_finds_only_entities_the_user_designs_in(
    as_alice, world, model_name, field_name
):
    EntityFactory(workspace=world.initech, name="initech_viewed_action")  # alice only views
    found = autocomplete(as_alice, model_name, field_name, "action")
    assert found == {
        "web_search_action (action)",
        "summarise_action (action)",
        "sketch_action (action)",
    }
    assert autocomplete(as_alice, model_name, field_name, "globex") == set()
    assert autocomplete(as_alice, model_name, field_name, "act\x00ion") == set()


def test_a_search_with_a_nul_character_is_refused_by_name(as_alice):
    response = as_alice.get(reverse("admin:entities_entity_changelist"), {"q": "plan\x00ner"})
    assert response.status_code == 200
    assert any("Null characters are not allowed" in m for m in messages_of(response))


@pytest.mark.parametrize(
    "url_name",
    [
        "admin:entities_entity_change",
        "admin:entities_entity_history",
        "admin:entities_entity_delete",
        "admin:entities_entity_export",
    ],
)
def test_another_workspaces_entity_is_not_found(as_alice, world, url_name):
    response = as_alice.get(reverse(url_name, args=[world.secret.pk]), follow=True)
    # Django answers an object outside get_queryset with a redirect to the index and a
    # "doesn't exist" message; the export view with a 404. Either way nothing of it shows.
    assert response.status_code in {200, 404}
    if response.status_code == 200:
        assert response.redirect_chain[-1][0] == reverse("admin:index")
        assert any("doesn’t exist" in m for m in messages_of(response))
    assert b"globex_secret_agent" not in response.content
    assert b"globex_hidden_action" not in response.content


def test_the_export_link_downloads_the_entity_and_its_descendants(as_alice, world):
    response = as_alice.get(reverse("admin:entities_entity_export", args=[world.research.pk]))
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="research_skill.json"'
    names = [e["identity"]["name"] for e in json.loads(response.content)["entities"]]
    assert sorted(names) == ["research_skill", "web_search_action"]


# The change form, posted


def test_saving_a_change_records_a_new_version(as_alice, world):
    response = post_change(as_alice, world.planner, {"description": "Plans and researches"})
    assert response.status_code == 302
    entity = Entity.objects.get(pk=world.planner.pk)
    assert entity.description == "Plans and researches"
    assert entity.version == "1.0.1"
    assert versions_of(entity) == ["1.0.0", "1.0.1"]
    assert "Saved as version 1.0.1 (patch)." in messages_of(response)


def test_saving_the_form_unchanged_keeps_the_version(as_alice, world):
    """The page round-trips the whole definition: children, plan step, tools, sections."""
    response = post_change(as_alice, world.planner, {})
    assert response.status_code == 302
    assert versions_of(Entity.objects.get(pk=world.planner.pk)) == ["1.0.0"]
    assert "No change to the definition; the version stays." in messages_of(response)


def test_adding_a_child_through_the_inline_saves_a_minor_version(as_alice, world):
    response = post_change(as_alice, world.planner, {"child_links-1-child": world.summarise.pk})
    assert response.status_code == 302
    assert children_of(world.planner) == ["research_skill", "summarise_action"]
    assert Entity.objects.get(pk=world.planner.pk).version == "1.1.0"


def test_children_are_saved_in_the_order_of_the_order_column(as_alice, world):
    post_change(as_alice, world.planner, {"child_links-1-child": world.summarise.pk})
    response = post_change(
        as_alice, world.planner, {"child_links-0-order": "2", "child_links-1-order": "1"}
    )
    assert response.status_code == 302
    assert children_of(world.planner) == ["summarise_action", "research_skill"]


def test_a_child_added_in_the_empty_row_goes_after_the_others(as_alice, world):
    post_change(as_alice, world.planner, {"child_links-1-child": world.summarise.pk})
    assert children_of(world.planner) == ["research_skill", "summarise_action"]
    response = post_change(as_alice, world.planner, {"child_links-2-child": world.sketch.pk})
    assert response.status_code == 302
    assert children_of(world.planner) == ["research_skill", "summarise_action", "sketch_action"]


def test_a_row_added_with_add_another_and_left_blank_is_ignored(as_alice, world):
    page = as_alice.get(change_url(world.planner)).content
    data = form_data(page, "entity_form")
    data.update(added_row(page, "entity_form", "child_links", 2))
    data.update({"child_links-TOTAL_FORMS": "3", "child_links-1-child": world.summarise.pk})
    response = as_alice.post(change_url(world.planner), data)
    assert response.status_code == 302
    assert children_of(world.planner) == ["research_skill", "summarise_action"]


def test_a_child_that_makes_a_cycle_is_refused_at_the_child_field(as_alice, world):
    response = post_change(as_alice, world.research, {"child_links-1-child": world.planner.pk})
    assert response.status_code == 200
    errors = inline_forms(response, ChildLink)[1].errors["child"]
    # An agent under a skill breaks the type rule as well: both are told at the field.
    assert errors == [
        "“planner_agent” is an AGENT and cannot be a child of the SKILL "
        "“research_skill”: a child is never of a higher level than its parent "
        "(PROCESS, then AGENT, then SKILL, then ACTION)",
        "creates a cycle: research_skill → planner_agent → research_skill; "
        "an entity cannot be its own ancestor",
    ]
    assert "creates a cycle: research_skill → planner_agent → research_skill" in (
        response.content.decode()
    )
    assert children_of(world.research) == ["web_search_action"]
    assert versions_of(world.research) == ["1.0.0"]


def test_a_childs_version_is_saved_kept_and_checked_at_its_field(as_alice, world):
    response = post_change(as_alice, world.planner, {"child_links-0-version": "^1.0.0"})
    assert response.status_code == 302
    assert ChildLink.objects.get(parent=world.planner).version == "^1.0.0"
    # Saved again untouched: the version stays, and so does the entity's.
    assert post_change(as_alice, world.planner, {}).status_code == 302
    assert ChildLink.objects.get(parent=world.planner).version == "^1.0.0"
    assert versions_of(world.planner) == ["1.0.0", "1.0.1"]

    response = post_change(as_alice, world.planner, {"child_links-0-version": "^7.0.0"})
    assert response.status_code == 200
    assert inline_forms(response, ChildLink)[0].errors["version"] == [
        "no version of 'research_skill' matches ^7.0.0; it has only 1.0.0"
    ]
    assert ChildLink.objects.get(parent=world.planner).version == "^1.0.0"


def test_an_entity_as_its_own_child_is_refused_at_the_child_field(as_alice, world):
    response = post_change(as_alice, world.research, {"child_links-1-child": world.research.pk})
    assert response.status_code == 200
    assert inline_forms(response, ChildLink)[1].errors["child"] == [
        "an entity cannot be its own child"
    ]
    assert ChildLink.objects.filter(parent=world.research).count() == 1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("governance", "[]", "governance: must be an object (a section), not a list"),
        ("persona", '"be nice"', "must be an object, not a string"),
        (
            "logic_gate",
            '{"reasoning_config": {"reasoning_mode": "GUESSING"}}',
            "logic_gate.reasoning_config.reasoning_mode: 'GUESSING' is not allowed; use one "
            "of: REACT, CHAIN_OF_THOUGHT, REFLECTION, TREE_OF_THOUGHTS",
        ),
        ("observability", "{not json", "Enter a valid JSON."),
        (
            "name",
            "research_skill",
            "another entity of this workspace is already named 'research_skill'; names are "
            "unique within a workspace",
        ),
    ],
    ids=["section-not-an-object", "persona-not-an-object", "unknown-enum", "not-json", "dup-name"],
)
def test_a_bad_field_is_refused_at_that_field(as_alice, world, field, value, message):
    response = post_change(as_alice, world.summarise, {field: value})
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors[field] == [message]
    assert message in html.unescape(response.content.decode())  # its section is open
    entity = Entity.objects.get(pk=world.summarise.pk)
    assert entity.name == "summarise_action"
    assert versions_of(entity) == ["1.0.0"]


def test_a_plan_step_whose_target_is_not_a_child_is_refused_at_its_target(as_alice, world):
    data = change_form(as_alice, world.planner)
    data.update(
        {
            "plan_steps-TOTAL_FORMS": "2",
            "plan_steps-1-order": "2",
            "plan_steps-1-name": "Summarise",
            "plan_steps-1-type": "CHILD_ENTITY_INVOCATION",
            "plan_steps-1-required": "on",
            "plan_steps-1-target_entity": str(world.summarise.pk),
            "plan_steps-1-entity": str(world.planner.pk),
        }
    )
    response = as_alice.post(change_url(world.planner), data)
    assert response.status_code == 200
    steps = inline_forms(response, PlanStep)
    assert steps[1].errors["target_entity"] == [
        "'summarise_action' is not a child of this entity; add it under hierarchy.children first"
    ]
    assert not steps[0].errors
    assert world.planner.plan_steps.count() == 1
    assert versions_of(world.planner) == ["1.0.0"]


def test_plan_steps_typed_into_the_planning_json_are_refused(as_alice, world):
    planning = {"static_plan": {"enabled": True, "steps": [{"order": 1, "name": "x"}]}}
    response = post_change(as_alice, world.planner, {"planning": json.dumps(planning)})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["planning"] == [
        "static_plan.steps: edit the plan steps in the table below, not in this JSON"
    ]


def test_problems_of_several_sections_are_shown_together(as_alice, world):
    response = post_change(
        as_alice,
        world.summarise,
        {"governance": "[]", "logic_gate": '{"retry_policy": {"max_retries": 99}}'},
    )
    assert response.status_code == 200
    assert set(response.context["adminform"].form.errors) == {"governance", "logic_gate"}


def test_a_cycle_a_duplicate_name_and_a_bad_section_are_shown_together(as_alice, world):
    response = post_change(
        as_alice,
        world.research,
        {
            "child_links-1-child": world.planner.pk,
            "logic_gate": '{"retry_policy": {"max_retries": 99}}',
            "name": "web_search_action",
        },
    )
    assert response.status_code == 200
    assert set(response.context["adminform"].form.errors) == {"logic_gate", "name"}
    [type_rule, cycle] = inline_forms(response, ChildLink)[1].errors["child"]
    assert "is an AGENT and cannot be a child of the SKILL" in type_rule
    assert cycle.startswith("creates a cycle: ")


def test_changing_the_status_in_the_form_is_audited(as_alice, world):
    response = post_change(as_alice, world.summarise, {"status": "DEPRECATED"})
    assert response.status_code == 302
    assert Entity.objects.get(pk=world.summarise.pk).status == "DEPRECATED"
    change = EntityStatusChange.objects.filter(entity=world.summarise).latest("changed_at")
    assert (change.from_status, change.to_status, change.changed_by) == (
        "ACTIVE",
        "DEPRECATED",
        world.alice,
    )


def test_a_refused_status_transition_in_the_form_is_shown_at_the_status(as_alice, world):
    response = post_change(as_alice, world.sketch, {"status": "DEPRECATED"})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["status"] == [
        "cannot go from DRAFT to DEPRECATED; from DRAFT an entity can go to ACTIVE, ARCHIVED"
    ]
    assert Entity.objects.get(pk=world.sketch.pk).status == "DRAFT"


# Deleting


def test_an_entity_used_as_a_child_cannot_be_deleted(as_alice, world):
    url = reverse("admin:entities_entity_delete", args=[world.research.pk])
    protected = [str(p) for p in as_alice.get(url).context["protected"]]
    assert (
        "research_skill is a child of planner_agent; remove it from planner_agent's children first"
        in protected
    ), protected
    as_alice.post(url, {"post": "yes"})
    assert Entity.objects.filter(pk=world.research.pk).exists()


def test_a_designer_deletes_a_root_and_its_children_become_roots(as_alice, world):
    url = reverse("admin:entities_entity_delete", args=[world.planner.pk])
    assert as_alice.post(url, {"post": "yes"}).status_code == 302
    assert not Entity.objects.filter(pk=world.planner.pk).exists()
    depths = dict(
        Entity.objects.filter(workspace=world.acme).values_list("name", "composition_depth")
    )
    assert (depths["research_skill"], depths["web_search_action"]) == (0, 1)


# Who may do what


def test_a_viewer_sees_the_change_form_read_only(world, db, client):
    client.force_login(world.bob)
    response = client.get(change_url(world.planner))
    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    assert b'name="_save"' not in response.content
    assert b"research_skill" in response.content


def test_a_viewer_cannot_post_a_change(world, db, client):
    client.force_login(world.alice)
    data = change_form(client, world.planner)
    client.force_login(world.bob)
    response = client.post(change_url(world.planner), {**data, "description": "Bob was here"})
    assert response.status_code == 403
    assert Entity.objects.get(pk=world.planner.pk).description != "Bob was here"


def test_a_viewer_cannot_add(world, db, client):
    client.force_login(world.bob)
    assert client.get(reverse("admin:entities_entity_add")).status_code == 403
    assert client.get(reverse("admin:entities_entity_import")).status_code == 403


def test_the_add_form_offers_only_workspaces_the_user_designs_in(as_alice):
    response = as_alice.get(reverse("admin:entities_entity_add"))
    assert response.status_code == 200
    workspaces = response.context["adminform"].form.fields["workspace"].queryset
    assert [ws.slug for ws in workspaces] == ["acme"]
    assert b"Initech" not in response.content
    assert b"Globex" not in response.content


def test_a_designer_creates_an_entity_through_the_add_form(as_alice, world):
    response = as_alice.get(reverse("admin:entities_entity_add"))
    data = form_data(response.content, "entity_form")
    data.update(
        {
            "type": "ACTION",
            "status": "ACTIVE",
            "name": "translate_action",
            "description": "Translates a text",
            "tags": "language, text",
        }
    )
    response = as_alice.post(reverse("admin:entities_entity_add"), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    entity = Entity.objects.get(workspace=world.acme, name="translate_action")
    assert (entity.tags, entity.created_by, versions_of(entity)) == (
        ["language", "text"],
        world.alice,
        ["1.0.0"],
    )


def test_the_add_form_refuses_a_workspace_the_user_only_views(as_alice, world):
    response = as_alice.get(reverse("admin:entities_entity_add"))
    data = form_data(response.content, "entity_form")
    data.update(
        {
            "workspace": str(world.initech.pk),
            "type": "ACTION",
            "name": "sneaky_action",
            "description": "Should not exist",
        }
    )
    response = as_alice.post(reverse("admin:entities_entity_add"), data)
    assert response.status_code == 200
    assert "workspace" in response.context["adminform"].form.errors
    assert not Entity.objects.filter(name="sneaky_action").exists()


# Import


def upload(name: str, content: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/json")


def test_importing_the_demo_fixture_creates_its_entities(as_alice, world):
    response = as_alice.post(
        reverse("admin:entities_entity_import"),
        {"workspace": world.acme.pk, "file": upload("demo.json", FIXTURE.read_bytes())},
    )
    assert response.status_code == 302
    assert messages_of(response) == [
        "Imported 14 entities into Acme: 14 created, 0 updated, 0 unchanged."
    ]
    assert Entity.objects.filter(workspace=world.acme).count() == len(world.acme_names) + 14
    process = Entity.objects.get(workspace=world.acme, name="video_ad_creation_process")
    assert process.external_id == "proc-001"
    assert process.composition_depth == 0


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"this is not JSON", "notes.json is not valid JSON: Expecting value at line 1, column 1"),
        (b"[1, 2]", "entities[0]: a definition must be a JSON object"),
    ],
    ids=["not-json", "not-definitions"],
)
def test_a_bad_import_file_shows_the_problem_and_imports_nothing(as_alice, world, content, problem):
    response = as_alice.post(
        reverse("admin:entities_entity_import"),
        {"workspace": world.acme.pk, "file": upload("notes.json", content)},
    )
    assert response.status_code == 200
    problems = response.context["problems"]
    assert any(p.startswith(problem) for p in problems), problems
    assert b"Nothing was imported." in response.content
    assert Entity.objects.filter(workspace=world.acme).count() == len(world.acme_names)


def test_an_import_file_over_the_limit_is_refused(as_alice, world, settings):
    settings.HIERARCH_IMPORT_MAX_BYTES = 2 * 1024 * 1024
    demo = FIXTURE.read_bytes()
    big = demo + b" " * (3 * 1024 * 1024 - len(demo))  # valid JSON, only too large
    response = as_alice.post(
        reverse("admin:entities_entity_import"),
        {"workspace": world.acme.pk, "file": upload("huge.json", big)},
    )
    assert response.status_code == 200
    assert response.context["problems"] == ["huge.json is 3 MB; imports are limited to 2 MB"]
    assert b"Nothing was imported." in response.content
    assert Entity.objects.filter(workspace=world.acme).count() == len(world.acme_names)


def test_the_import_page_offers_only_workspaces_the_user_designs_in(as_alice, world):
    response = as_alice.get(reverse("admin:entities_entity_import"))
    assert [ws.slug for ws in response.context["workspaces"]] == ["acme"]
    refused = as_alice.post(
        reverse("admin:entities_entity_import"),
        {"workspace": world.initech.pk, "file": upload("demo.json", FIXTURE.read_bytes())},
    )
    assert refused.context["problems"] == ["Choose a workspace you design in."]
    assert not Entity.objects.filter(workspace=world.initech).exists()


# Versions


def version(entity: Entity, number: str) -> EntityVersion:
    return EntityVersion.objects.get(entity=entity, version=number)


def test_the_versions_admin_is_read_only(as_alice, world):
    first = version(world.planner, "1.0.0")
    url = reverse("admin:entities_entityversion_change", args=[first.pk])
    response = as_alice.get(url)
    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    assert b"Restore this version" in response.content
    assert as_alice.post(url, {"summary": "rewritten"}).status_code == 403
    assert as_alice.get(reverse("admin:entities_entityversion_add")).status_code == 403
    delete_url = reverse("admin:entities_entityversion_delete", args=[first.pk])
    assert as_alice.post(delete_url, {"post": "yes"}).status_code == 403
    assert EntityVersion.objects.get(pk=first.pk).summary == "created"


def test_restoring_a_version_creates_a_new_version_with_its_definition(as_alice, world):
    post_change(as_alice, world.planner, {"child_links-1-child": world.summarise.pk})
    assert versions_of(world.planner) == ["1.0.0", "1.1.0"]
    first = version(world.planner, "1.0.0")

    response = as_alice.post(reverse("admin:entities_entityversion_restore", args=[first.pk]))
    assert response.status_code == 302
    assert response["Location"] == change_url(world.planner)
    assert versions_of(world.planner) == ["1.0.0", "1.1.0", "1.1.1"]
    restored = version(world.planner, "1.1.1")
    assert restored.created_by == world.alice
    assert content(restored.definition) == content(first.definition)
    assert "Restored planner_agent 1.0.0 as version 1.1.1." in messages_of(response)


def test_restore_refuses_a_post_without_the_csrf_token(world, db):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.alice)
    first = version(world.planner, "1.0.0")
    response = client.post(reverse("admin:entities_entityversion_restore", args=[first.pk]))
    assert response.status_code == 403
    assert versions_of(world.planner) == ["1.0.0"]


def test_a_viewer_cannot_restore_a_version(world, db, client):
    client.force_login(world.bob)
    first = version(world.planner, "1.0.0")
    response = client.post(reverse("admin:entities_entityversion_restore", args=[first.pk]))
    assert response.status_code == 403


def test_another_workspaces_version_cannot_be_restored(as_alice, world):
    theirs = version(world.secret, "1.0.0")
    response = as_alice.post(reverse("admin:entities_entityversion_restore", args=[theirs.pk]))
    assert response.status_code == 404
    assert versions_of(world.secret) == ["1.0.0"]


# Status actions


def run_action(client: Client, action: str, *entities: Entity):
    return client.post(
        reverse("admin:entities_entity_changelist"),
        {"action": action, "_selected_action": [str(e.pk) for e in entities]},
        follow=True,
    )


def test_the_activate_action_audits_the_status_change(as_alice, world):
    response = run_action(as_alice, "activate", world.sketch)
    assert response.status_code == 200
    change = EntityStatusChange.objects.filter(entity=world.sketch).latest("changed_at")
    assert (change.from_status, change.to_status, change.changed_by) == (
        "DRAFT",
        "ACTIVE",
        world.alice,
    )
    assert Entity.objects.get(pk=world.sketch.pk).status == "ACTIVE"
    assert any(message.endswith(" now ACTIVE.") for message in messages_of(response))


def test_the_deprecate_and_archive_actions_audit_each_entity(as_alice, world):
    run_action(as_alice, "deprecate", world.summarise, world.search)
    run_action(as_alice, "archive", world.summarise)
    transitions = list(
        EntityStatusChange.objects.filter(entity__in=[world.summarise, world.search])
        .exclude(reason="created")
        .order_by("changed_at", "id")
        .values_list("entity__name", "from_status", "to_status")
    )
    assert sorted(transitions[:2]) == [
        ("summarise_action", "ACTIVE", "DEPRECATED"),
        ("web_search_action", "ACTIVE", "DEPRECATED"),
    ]
    assert transitions[2] == ("summarise_action", "DEPRECATED", "ARCHIVED")


def test_a_refused_transition_shows_an_error_and_changes_nothing(as_alice, world):
    response = run_action(as_alice, "deprecate", world.sketch)
    assert (
        "sketch_action: cannot go from DRAFT to DEPRECATED; from DRAFT an entity can go to "
        "ACTIVE, ARCHIVED" in messages_of(response)
    )
    assert Entity.objects.get(pk=world.sketch.pk).status == "DRAFT"
    assert not EntityStatusChange.objects.filter(entity=world.sketch, to_status="DEPRECATED")


def test_a_viewer_is_not_offered_the_status_actions(world, db, client):
    client.force_login(world.bob)
    page = client.get(reverse("admin:entities_entity_changelist"))
    assert b'value="archive"' not in page.content
    run_action(client, "archive", world.summarise)
    assert Entity.objects.get(pk=world.summarise.pk).status == "ACTIVE"
    assert not EntityStatusChange.objects.filter(entity=world.summarise, to_status="ARCHIVED")


# Tools


def tool_change(client: Client, tool: Tool, changes: dict):
    url = reverse("admin:tools_tool_change", args=[tool.pk])
    data = form_data(client.get(url).content, "tool_form")
    data.update(changes)
    return client.post(url, data)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "function_schema",
            '{"name": "echo", "parameters": []}',
            "function_schema.parameters: must be an object, not a list",
        ),
        (
            "function_schema",
            '{"name": "echo", "parameters": {"type": "no-such-type"}}',
            "function_schema.parameters.type: is not a valid JSON Schema",
        ),
        (
            "permissions",
            "ADMIN",
            "Select a valid choice. ADMIN is not one of the available choices.",
        ),
    ],
    ids=["parameters-not-an-object", "parameters-not-a-schema", "unknown-permission"],
)
def test_a_bad_tool_definition_is_refused_at_the_field(as_alice, world, field, value, message):
    tool = Tool.objects.get(workspace=world.acme, tool_id="echo")
    response = tool_change(as_alice, tool, {field: value})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors[field]
    assert any(error.startswith(message) for error in errors), errors
    tool.refresh_from_db()
    assert tool.permissions == "READ"
    assert tool.function_schema["parameters"]["type"] == "object"


def test_a_tool_used_by_an_entity_cannot_be_deleted(as_alice, world):
    tool = Tool.objects.get(workspace=world.acme, tool_id="echo")
    url = reverse("admin:tools_tool_delete", args=[tool.pk])
    page = as_alice.get(url)
    assert "Entity planner_agent lists tool echo in its capabilities" in page.content.decode()
    as_alice.post(url, {"post": "yes"})
    assert Tool.objects.filter(pk=tool.pk).exists()


def test_an_unused_tool_can_be_deleted(as_alice, world):
    tool = make_tool(world.acme, "spare")
    response = as_alice.post(reverse("admin:tools_tool_delete", args=[tool.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert not Tool.objects.filter(pk=tool.pk).exists()


# Members


def test_a_workspace_admin_adds_a_member_by_username(world, db, client):
    erin = UserFactory(username="erin")
    client.force_login(world.ada)
    url = reverse("admin:entities_membership_add")
    data = form_data(client.get(url).content, "membership_form")
    data.update({"workspace": str(world.acme.pk), "username": "erin", "role": "designer"})
    response = client.post(url, data)
    assert response.status_code == 302
    assert Membership.objects.filter(workspace=world.acme, user=erin, role="designer").exists()
    assert has_perm(erin, DESIGN, world.acme)


def test_adding_an_unknown_username_is_refused_at_the_field(world, db, client):
    client.force_login(world.ada)
    url = reverse("admin:entities_membership_add")
    data = form_data(client.get(url).content, "membership_form")
    data.update({"workspace": str(world.acme.pk), "username": "nobody", "role": "viewer"})
    response = client.post(url, data)
    assert response.context["adminform"].form.errors["username"] == ["There is no user 'nobody'."]


def test_a_workspace_admin_cannot_add_members_to_another_workspace(world, db, client):
    client.force_login(world.ada)
    url = reverse("admin:entities_membership_add")
    response = client.get(url)
    assert [ws.slug for ws in response.context["adminform"].form.fields["workspace"].queryset] == [
        "acme"
    ]
    data = form_data(response.content, "membership_form")
    data.update({"workspace": str(world.globex.pk), "username": "ada", "role": "admin"})
    response = client.post(url, data)
    assert response.status_code == 200
    assert not Membership.objects.filter(workspace=world.globex, user=world.ada).exists()


def test_a_designer_cannot_add_members(as_alice, world):
    url = reverse("admin:entities_membership_add")
    assert as_alice.get(url).status_code == 403
    response = as_alice.post(
        url, {"workspace": world.acme.pk, "username": "alice", "role": "admin"}
    )
    assert response.status_code == 403
    assert not Membership.objects.filter(user=world.alice, role="admin").exists()
