"""The designer's tree: the page, its lazy children and search, the writes from a node (add
a new or an existing child, remove, reorder) through the entity services, who may do what,
and the type rule (a child is never of a higher level than its parent) in every door."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from entities.definition import DefinitionInvalid
from entities.models import ChildLink, Entity, PlanStep
from entities.services import (
    entities_import,
    entity_link_child,
    entity_reorder_children,
    entity_unlink_child,
)
from governance.models import AuditRecord
from tests.factories import EntityFactory
from tests.support.clients import signed_in

pytestmark = pytest.mark.django_db


def url(name: str, ws: str = "acme", **kwargs) -> str:
    return reverse(f"designer:{name}", kwargs={"workspace": ws, **kwargs})


def children_of(entity: Entity) -> list[str]:
    return list(
        ChildLink.objects.filter(parent=entity)
        .order_by("order", "id")
        .values_list("child__name", flat=True)
    )


def steps_of(entity: Entity) -> list[tuple[int, str, str | None]]:
    return [
        (step.order, step.name, step.target_entity.name if step.target_entity else None)
        for step in PlanStep.objects.filter(entity=entity).select_related("target_entity")
    ]


@pytest.fixture
def video(acme):
    """campaign (PROCESS) → writer (AGENT) → draft (SKILL) → {outline, polish} (ACTIONs);
    `polish` is also under `review` (a SKILL root): a reused entity."""
    outline = EntityFactory(workspace=acme, name="outline")
    polish = EntityFactory(workspace=acme, name="polish", metadata={"tags": ["style"]})
    draft = EntityFactory(workspace=acme, name="draft", type="SKILL", children=[outline, polish])
    review = EntityFactory(workspace=acme, name="review", type="SKILL", children=[polish])
    writer = EntityFactory(
        workspace=acme,
        name="writer",
        type="AGENT",
        children=[draft],
        identity={"display_name": "Script <b>writer</b>", "description": "writes"},
    )
    campaign = EntityFactory(workspace=acme, name="campaign", type="PROCESS", children=[writer])
    return {e.name: e for e in (outline, polish, draft, review, writer, campaign)}


@pytest.fixture
def as_alice(alice):
    return signed_in(Client, alice)


@pytest.fixture
def as_bob(bob):
    return signed_in(Client, bob)


# The page and its partials


def test_the_page_lists_the_roots_processes_first(as_bob, video):
    response = as_bob.get(url("tree"))
    assert response.status_code == 200
    roots = [node["entity"].name for node in response.context["nodes"]]
    assert roots == ["campaign", "review"]
    assert "draft" not in response.content.decode()  # children load when a node opens


def test_a_node_shows_type_status_version_and_reuse(as_bob, video):
    response = as_bob.get(url("tree_children", pk=video["draft"].pk))
    assert response.status_code == 200
    page = response.content.decode()
    assert [n["entity"].name for n in response.context["nodes"]] == ["outline", "polish"]
    polish = response.context["nodes"][1]
    assert (polish["parent_count"], polish["position"]) == (2, 2)
    assert "used by 2 parents" in page
    assert "ACTION" in page and "active" in page and "v1.0.0" in page


def test_names_are_escaped(as_bob, video):
    page = as_bob.get(url("tree_children", pk=video["campaign"].pk)).content.decode()
    assert "Script &lt;b&gt;writer&lt;/b&gt;" in page
    assert "<b>writer</b>" not in page


def test_a_name_links_to_the_entitys_page(as_bob, video):
    page = as_bob.get(url("tree_children", pk=video["campaign"].pk)).content.decode()
    editor = reverse("designer:entity", kwargs={"workspace": "acme", "pk": video["writer"].pk})
    assert editor in page


def test_many_children_come_a_page_at_a_time(as_bob, acme):
    actions = [EntityFactory(workspace=acme, name=f"a{i:02}") for i in range(55)]
    skill = EntityFactory(workspace=acme, name="wide", type="SKILL", children=actions)
    first = as_bob.get(url("tree_children", pk=skill.pk))
    assert len(first.context["nodes"]) == 50
    assert "Show more (5 more)" in first.content.decode()
    more = as_bob.get(url("tree_children", pk=skill.pk) + "?offset=50")
    assert [n["entity"].name for n in more.context["nodes"]] == [f"a{i}" for i in range(50, 55)]
    assert "data-parent" not in more.content.decode()  # only rows, appended to the list


def test_search_finds_by_name_display_name_and_tag_with_the_path(as_bob, video):
    for text in ("polish", "style", "script"):
        response = as_bob.get(url("tree_search") + f"?q={text}")
        assert response.status_code == 200, text
        assert response.context["hits"], text
    hits = as_bob.get(url("tree_search") + "?q=polish").context["hits"]
    (entity, path) = hits[0]
    assert entity.name == "polish"
    assert [name for _, name in path] == ["campaign", "writer", "draft"]
    assert "campaign › writer › draft › polish" in (
        as_bob.get(url("tree_search") + "?q=polish").content.decode()
    )


def test_a_search_with_a_nul_character_finds_nothing(as_bob, video):
    response = as_bob.get(url("tree_search") + "?q=pol%00ish")
    assert response.status_code == 200
    assert response.context["hits"] == []


def test_another_workspaces_node_is_not_found(as_alice, globex):
    theirs = EntityFactory(workspace=globex, name="secret", type="SKILL")
    assert as_alice.get(url("tree_children", pk=theirs.pk)).status_code == 404
    # nor through this workspace's address
    assert as_alice.post(url("tree_unlink", pk=theirs.pk), {"child": theirs.pk}).status_code == 404
    assert as_alice.get(url("tree_children", "globex", pk=theirs.pk)).status_code == 404


def test_another_workspaces_entity_cannot_be_linked(as_alice, video, globex):
    theirs = EntityFactory(workspace=globex, name="secret")
    response = as_alice.post(url("tree_link", pk=video["review"].pk), {"child": theirs.pk})
    assert response.status_code == 404
    assert children_of(video["review"]) == ["polish"]


# Who may write


def test_a_viewer_sees_no_controls_and_cannot_post(as_bob, video):
    page = as_bob.get(url("tree_children", pk=video["draft"].pk)).content.decode()
    assert "Add child" not in page and "move-up" not in page
    for name, data in [
        ("tree_link", {"child": video["outline"].pk}),
        ("tree_create", {"type": "ACTION", "name": "sneaky"}),
        ("tree_unlink", {"child": video["polish"].pk}),
        ("tree_reorder", {"child": video["polish"].pk, "by": "-1"}),
    ]:
        assert as_bob.post(url(name, pk=video["review"].pk), data).status_code == 403, name
    assert as_bob.get(url("tree_candidates", pk=video["review"].pk)).status_code == 403
    assert children_of(video["review"]) == ["polish"]


def test_a_designer_sees_the_controls(as_alice, video):
    page = as_alice.get(url("tree_children", pk=video["draft"].pk)).content.decode()
    assert "move-up" in page and "Remove" in page
    # an action has no children: nothing to add under it
    assert "Add child" not in page


def test_writes_need_the_csrf_token(alice, video):
    client = signed_in(lambda: Client(enforce_csrf_checks=True), alice)
    response = client.post(url("tree_unlink", pk=video["review"].pk), {"child": video["polish"].pk})
    assert response.status_code == 403
    assert children_of(video["review"]) == ["polish"]
    # the page hands htmx the token for every request it sends
    page = client.get(url("tree"))
    token = str(page.context["csrf_token"])
    assert f'hx-headers=\'{{"X-CSRFToken": "{token}"}}\'' in page.content.decode()
    ok = client.post(
        url("tree_unlink", pk=video["review"].pk),
        {"child": video["polish"].pk},
        HTTP_X_CSRFTOKEN=token,
    )
    assert ok.status_code == 200
    assert children_of(video["review"]) == []


# Writes from a node: each is a save of the parent's definition


def test_a_new_child_is_created_as_a_draft_and_linked_in_one_save(as_alice, alice, video):
    response = as_alice.post(
        url("tree_create", pk=video["writer"].pk),
        {"type": "SKILL", "name": "storyboard", "description": "sketches the scenes"},
    )
    assert response.status_code == 200, response.content
    child = Entity.objects.get(name="storyboard")
    assert (child.type, child.status, child.description) == (
        "SKILL",
        "DRAFT",
        "sketches the scenes",
    )
    assert child.parent == video["writer"]  # its home parent
    assert children_of(video["writer"]) == ["draft", "storyboard"]
    writer = Entity.objects.get(pk=video["writer"].pk)
    assert list(writer.versions.values_list("version", flat=True)) == ["1.1.0", "1.0.0"]
    assert AuditRecord.objects.filter(object_id=str(writer.pk), action="entity.updated").exists()
    assert [n["entity"].name for n in response.context["nodes"]] == ["draft", "storyboard"]
    page = response.content.decode()
    assert "hx-swap-oob" in page and "v1.1.0" in page  # the parent's row learns its version


def test_a_new_agent_gets_a_starting_system_prompt(as_alice, video):
    as_alice.post(url("tree_create", pk=video["campaign"].pk), {"type": "AGENT", "name": "editor"})
    editor = Entity.objects.get(name="editor")
    assert editor.persona["system_prompt"].startswith("You are editor.")
    assert children_of(video["campaign"]) == ["writer", "editor"]


def test_a_new_child_of_a_higher_type_is_refused_at_the_node(as_alice, video):
    response = as_alice.post(
        url("tree_create", pk=video["draft"].pk), {"type": "AGENT", "name": "boss"}
    )
    assert response.status_code == 422
    assert "a SKILL may hold SKILL, ACTION" in response.content.decode()
    assert not Entity.objects.filter(name="boss").exists()
    assert children_of(video["draft"]) == ["outline", "polish"]


def test_a_taken_name_is_refused_and_nothing_is_saved(as_alice, video):
    before = list(video["review"].versions.values_list("version", flat=True))
    response = as_alice.post(
        url("tree_create", pk=video["review"].pk), {"type": "ACTION", "name": "outline"}
    )
    assert response.status_code == 422
    assert "already named &#x27;outline&#x27;" in response.content.decode()
    assert children_of(video["review"]) == ["polish"]
    assert list(video["review"].versions.values_list("version", flat=True)) == before


def test_an_existing_entity_is_added_as_the_last_child(as_alice, video):
    response = as_alice.post(
        url("tree_link", pk=video["review"].pk), {"child": video["outline"].pk}
    )
    assert response.status_code == 200
    assert children_of(video["review"]) == ["polish", "outline"]
    outline = next(n for n in response.context["nodes"] if n["entity"].name == "outline")
    assert outline["parent_count"] == 2


def test_a_cycle_is_refused_at_the_node(as_alice, acme):
    inner = EntityFactory(workspace=acme, name="inner", type="AGENT")
    outer = EntityFactory(workspace=acme, name="outer", type="AGENT", children=[inner])
    response = as_alice.post(url("tree_link", pk=inner.pk), {"child": outer.pk})
    assert response.status_code == 422
    assert "creates a cycle: inner → outer → inner" in response.content.decode()
    assert children_of(inner) == []


def test_a_higher_level_existing_child_is_refused_at_the_node(as_alice, video):
    response = as_alice.post(url("tree_link", pk=video["review"].pk), {"child": video["writer"].pk})
    assert response.status_code == 422
    assert (
        "“writer” is an AGENT and cannot be a child of the SKILL “review”: a child is never "
        "of a higher level than its parent"
    ) in response.content.decode()
    assert children_of(video["review"]) == ["polish"]


def test_the_candidates_leave_out_ancestors_higher_types_and_present_children(as_alice, video):
    response = as_alice.get(url("tree_candidates", pk=video["draft"].pk) + "?q=")
    names = sorted(e.name for e in response.context["candidates"])
    # not campaign (a PROCESS) nor writer (an AGENT, and an ancestor), nor draft itself, nor
    # outline and polish (already its children)
    assert names == ["review"]
    assert (
        as_alice.get(url("tree_candidates", pk=video["writer"].pk) + "?q=rev")
        .context["candidates"][0]
        .name
        == "review"
    )


def test_removing_a_child_keeps_the_entity(as_alice, video):
    response = as_alice.post(
        url("tree_unlink", pk=video["draft"].pk), {"child": video["polish"].pk}
    )
    assert response.status_code == 200
    assert children_of(video["draft"]) == ["outline"]
    assert Entity.objects.filter(pk=video["polish"].pk).exists()
    assert children_of(video["review"]) == ["polish"]


def test_removing_a_child_that_is_gone_says_so(as_alice, video):
    as_alice.post(url("tree_unlink", pk=video["draft"].pk), {"child": video["polish"].pk})
    response = as_alice.post(
        url("tree_unlink", pk=video["draft"].pk), {"child": video["polish"].pk}
    )
    assert response.status_code == 422
    assert "is not a child of" in response.content.decode()


def test_a_child_moves_up_and_down(as_alice, video):
    draft = video["draft"]
    response = as_alice.post(
        url("tree_reorder", pk=draft.pk), {"child": video["polish"].pk, "by": "-1"}
    )
    assert response.status_code == 200
    assert children_of(draft) == ["polish", "outline"]
    as_alice.post(url("tree_reorder", pk=draft.pk), {"child": video["polish"].pk, "by": "1"})
    assert children_of(draft) == ["outline", "polish"]
    # the last one cannot go further down: nothing changes, no new version
    versions = draft.versions.count()
    as_alice.post(url("tree_reorder", pk=draft.pk), {"child": video["polish"].pk, "by": "1"})
    assert children_of(draft) == ["outline", "polish"]
    assert draft.versions.count() == versions


def test_a_dragged_order_is_saved_and_a_stale_one_refused(as_alice, video):
    draft = video["draft"]
    order = f"{video['polish'].pk},{video['outline'].pk}"
    assert as_alice.post(url("tree_reorder", pk=draft.pk), {"order": order}).status_code == 200
    assert children_of(draft) == ["polish", "outline"]
    stale = f"{video['polish'].pk},{video['review'].pk}"
    response = as_alice.post(url("tree_reorder", pk=draft.pk), {"order": stale})
    assert response.status_code == 422
    assert "changed since the page was loaded" in response.content.decode()
    assert children_of(draft) == ["polish", "outline"]


# The static plan follows the children


@pytest.fixture
def planned(acme):
    """lead (AGENT, static plan ON): think (THOUGHT), then first, then second (children)."""
    first = EntityFactory(workspace=acme, name="first")
    second = EntityFactory(workspace=acme, name="second")
    EntityFactory(workspace=acme, name="third")
    lead = EntityFactory(
        workspace=acme,
        name="lead",
        type="AGENT",
        children=[first, second],
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [
                    {"order": 1, "name": "think", "type": "THOUGHT"},
                    {
                        "order": 2,
                        "name": "run first",
                        "type": "CHILD_ENTITY_INVOCATION",
                        "target": {"entity_id": "first"},
                        "exit_conditions": [
                            {"condition": {"==": [{"var": "done"}, True]}, "next_step": 3}
                        ],
                    },
                    {
                        "order": 3,
                        "name": "run second",
                        "type": "CHILD_ENTITY_INVOCATION",
                        "target": {"entity_id": "second"},
                    },
                ],
            },
            # Reordered, the jump from "run first" to "run second" goes back: a loop.
            "loop_control": {"max_iterations": 3},
        },
    )
    return lead


def test_a_linked_child_gets_a_step_when_the_static_plan_is_on(planned, alice):
    third = Entity.objects.get(name="third")
    entity_link_child(parent=planned, child=third, user=alice)
    assert steps_of(planned)[-1] == (4, "Invoke third", "third")


def test_an_unlinked_child_loses_its_step(planned, alice):
    entity_unlink_child(parent=planned, child=Entity.objects.get(name="first"), user=alice)
    assert steps_of(planned) == [(1, "think", None), (3, "run second", "second")]


def test_reordered_children_swap_their_steps_and_exit_conditions_follow(planned, alice):
    first, second = Entity.objects.get(name="first"), Entity.objects.get(name="second")
    entity_reorder_children(parent=planned, order=[second.pk, first.pk], user=alice)
    assert children_of(planned) == ["second", "first"]
    assert steps_of(planned) == [
        (1, "think", None),
        (2, "run second", "second"),
        (3, "run first", "first"),
    ]
    # "run first" jumped to "run second" (order 3); "run second" is order 2 now
    step = PlanStep.objects.get(entity=planned, name="run first")
    assert step.exit_conditions[0]["next_step"] == 2


# The type rule in every door: the API and import


def test_the_api_refuses_a_child_of_a_higher_level(alice, acme):
    from rest_framework.test import APIClient

    EntityFactory(workspace=acme, name="render", type="SKILL")
    api = signed_in(APIClient, alice)
    sent = {
        "workspace": "acme",
        "definition": {
            "metadata": {"type": "ACTION", "status": "DRAFT"},
            "identity": {"name": "upload", "description": "uploads"},
            "hierarchy": {"children": [{"child_id": "render"}]},
        },
    }
    response = api.post("/api/v1/entities", sent, format="json")
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert details["definition.hierarchy.children[0].child_id"].startswith(
        "“render” cannot be a child of the ACTION “upload”"
    )
    assert not Entity.objects.filter(name="upload").exists()


def test_import_refuses_a_child_of_a_higher_level_and_saves_nothing(acme):
    bundle = [
        {
            "metadata": {"id": "skill-1", "type": "SKILL"},
            "identity": {"name": "render", "description": "renders"},
            "hierarchy": {"children": [{"child_id": "agent-1"}]},
        },
        {
            "metadata": {"id": "agent-1", "type": "AGENT"},
            "identity": {
                "name": "script_writer",
                "description": "writes",
                "persona": {"system_prompt": "You write."},
            },
        },
    ]
    with pytest.raises(DefinitionInvalid) as refusal:
        entities_import(workspace=acme, definitions=bundle)
    (problem,) = refusal.value.problems
    assert (problem.entity, problem.path) == (
        "entities[0] (render)",
        "hierarchy.children[0].child_id",
    )
    assert problem.message == (
        "“script_writer” is an AGENT and cannot be a child of the SKILL “render”: a child is "
        "never of a higher level than its parent (PROCESS, then AGENT, then SKILL, then ACTION)"
    )
    assert not Entity.objects.filter(workspace=acme).exists()


def test_equal_levels_nest(acme):
    bundle = [
        {
            "metadata": {"type": "AGENT"},
            "identity": {
                "name": "lead",
                "description": "leads",
                "persona": {"system_prompt": "Lead."},
            },
            "hierarchy": {"children": [{"child_id": "helper"}]},
        },
        {
            "metadata": {"type": "AGENT"},
            "identity": {
                "name": "helper",
                "description": "helps",
                "persona": {"system_prompt": "Help."},
            },
        },
    ]
    entities_import(workspace=acme, definitions=bundle)
    assert children_of(Entity.objects.get(name="lead")) == ["helper"]


# At 1,111 entities (a 10,10,10 hierarchy): bounded queries, light pages


def test_a_designer_starts_a_new_entity_from_the_tree(alice, acme):
    page = signed_in(Client, alice).get(reverse("designer:tree", kwargs={"workspace": "acme"}))
    new = reverse("designer:entity_new", kwargs={"workspace": "acme"}) + "?type=PROCESS"
    assert f'href="{new}"' in page.content.decode()
