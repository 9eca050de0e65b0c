"""Workspace roles, and the one helper that scopes every read (governance/permissions.py).

alice designs in Acme, bob views Acme, charlie designs in Globex, root is a superuser.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.http import Http404

from entities.models import ChildLink, Entity, EntityVersion, Membership, Workspace
from entities.selectors import entity_get, entity_list, version_list, workspace_get
from governance.permissions import (
    ADMINISTER,
    APPROVE,
    DESIGN,
    OPERATE,
    VIEW,
    has_any_membership,
    has_perm,
    membership_grant,
    membership_revoke,
    roles_of,
    scope,
    workspaces_for,
)
from tests.factories import EntityFactory, UserFactory, grant

ALL = {VIEW, DESIGN, OPERATE, APPROVE, ADMINISTER}


@pytest.fixture
def entities(acme, globex):
    """Two entities in each workspace, linked parent → child."""
    made = {}
    for workspace in (acme, globex):
        child = EntityFactory(workspace=workspace, name=f"{workspace.slug}_child")
        made[workspace.slug] = EntityFactory(
            workspace=workspace, name=f"{workspace.slug}_parent", type="SKILL", children=[child]
        )
        made[f"{workspace.slug}_child"] = child
    return made


def perms(user, workspace: Workspace) -> set[str]:
    # Permissions are cached on the user object for its request, as Django's own are; read
    # them through a fresh object, as the next request would.
    fresh = type(user).objects.get(pk=user.pk) if getattr(user, "pk", None) else user
    return {perm for perm in ALL if has_perm(fresh, perm, workspace)}


def names(queryset) -> set[str]:
    return set(queryset.values_list("name", flat=True))


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("viewer", {VIEW}),
        ("designer", {VIEW, DESIGN}),
        ("operator", {VIEW, OPERATE}),
        ("approver", {VIEW, APPROVE}),
        ("admin", ALL),
    ],
)
def test_each_role_grants_its_permissions_in_its_workspace_only(acme, globex, role, expected):
    user = grant(UserFactory(username="dora"), acme, role)

    assert perms(user, acme) == expected
    assert perms(user, globex) == set()
    assert roles_of(user, acme) == [role]


def test_roles_add_up(acme):
    user = grant(UserFactory(username="dora"), acme, "operator", "approver")

    assert perms(user, acme) == {VIEW, OPERATE, APPROVE}


def test_granting_a_role_twice_keeps_one_membership(acme, alice):
    membership_grant(workspace=acme, user=alice, role="designer")

    assert Membership.objects.filter(user=alice).count() == 1


def test_it_refuses_a_role_that_does_not_exist(acme, alice):
    with pytest.raises(ValueError, match="'owner' is not a role"):
        membership_grant(workspace=acme, user=alice, role="owner")

    assert roles_of(alice, acme) == ["designer"]


def test_alice_sees_acmes_entities_and_not_globexs(alice, entities):
    assert names(entity_list(user=alice)) == {"acme_parent", "acme_child"}
    assert names(scope(Entity.objects.all(), alice)) == {"acme_parent", "acme_child"}


def test_charlie_sees_globexs_entities_and_not_acmes(charlie, entities):
    assert names(entity_list(user=charlie)) == {"globex_parent", "globex_child"}


def test_the_superuser_sees_everything(root, entities):
    assert names(entity_list(user=root)) == {
        "acme_parent",
        "acme_child",
        "globex_parent",
        "globex_child",
    }
    assert set(workspaces_for(root, ADMINISTER).values_list("slug", flat=True)) == {
        "acme",
        "globex",
    }
    assert perms(root, Workspace.objects.get(slug="globex")) == ALL


def test_workspaces_for_lists_only_the_users_workspaces(alice, bob, charlie):
    assert list(workspaces_for(alice).values_list("slug", flat=True)) == ["acme"]
    assert list(workspaces_for(charlie).values_list("slug", flat=True)) == ["globex"]
    assert list(workspaces_for(alice, DESIGN).values_list("slug", flat=True)) == ["acme"]
    assert not workspaces_for(bob, DESIGN).exists()
    assert has_any_membership(bob)


def test_scope_narrows_by_the_permission_asked(alice, bob, entities):
    assert names(entity_list(user=bob)) == {"acme_parent", "acme_child"}
    assert not entity_list(user=bob, perm=DESIGN).exists()
    assert names(entity_list(user=alice, perm=DESIGN)) == {"acme_parent", "acme_child"}
    assert not entity_list(user=alice, perm=OPERATE).exists()


def test_scope_follows_a_lookup_to_the_workspace(alice, entities):
    links = scope(ChildLink.objects.all(), alice, field="parent__workspace")
    assert list(links.values_list("parent__name", "child__name")) == [("acme_parent", "acme_child")]

    versions = version_list(user=alice)
    assert {v.entity.name for v in versions} == {"acme_parent", "acme_child"}
    assert EntityVersion.objects.count() == 4

    assert list(scope(Workspace.objects.all(), alice, field="").values_list("slug", flat=True)) == [
        "acme"
    ]


def test_an_anonymous_visitor_sees_nothing(entities):
    anonymous = AnonymousUser()

    assert not entity_list(user=anonymous).exists()
    assert not workspaces_for(anonymous).exists()
    assert not scope(Entity.objects.all(), None).exists()
    assert perms(anonymous, Workspace.objects.get(slug="acme")) == set()
    assert not has_any_membership(anonymous)


@pytest.mark.parametrize("persona", ["alice", "root"])
def test_an_inactive_user_sees_nothing(request, entities, persona):
    user = request.getfixturevalue(persona)
    user.is_active = False
    user.save(update_fields=["is_active"])

    assert not entity_list(user=user).exists()
    assert not workspaces_for(user).exists()
    assert perms(user, Workspace.objects.get(slug="acme")) == set()


def test_a_user_without_a_role_sees_nothing(db, entities):
    stranger = UserFactory(username="stranger")

    assert not entity_list(user=stranger).exists()
    assert not has_any_membership(stranger)


def test_entity_get_answers_404_for_another_workspaces_entity(alice, charlie, entities):
    theirs = entities["globex"]

    with pytest.raises(Http404):
        entity_get(user=alice, pk=theirs.pk)

    assert entity_get(user=charlie, pk=theirs.pk) == theirs
    assert entity_get(user=alice, pk=entities["acme"].pk) == entities["acme"]


def test_entity_get_answers_404_without_the_permission_asked(bob, entities):
    ours = entities["acme"]

    assert entity_get(user=bob, pk=ours.pk) == ours
    with pytest.raises(Http404):
        entity_get(user=bob, pk=ours.pk, perm=DESIGN)


def test_entity_get_answers_404_for_an_entity_that_does_not_exist(alice, entities):
    with pytest.raises(Http404):
        entity_get(user=alice, pk="00000000-0000-0000-0000-000000000000")


def test_workspace_get_answers_404_for_another_workspace(alice, charlie):
    assert workspace_get(user=alice, slug="acme").slug == "acme"
    with pytest.raises(Http404):
        workspace_get(user=alice, slug="globex")


def test_permissions_are_read_once_per_user_object(alice, acme, django_assert_num_queries):
    has_perm(alice, VIEW, acme)
    with django_assert_num_queries(0):
        assert has_perm(alice, VIEW, acme)
        assert has_perm(alice, DESIGN, acme)
        assert scope(Workspace.objects.all(), alice, VIEW, field="").query is not None


def test_revoking_one_role_keeps_what_another_role_still_grants(acme):
    dora = grant(UserFactory(username="dora"), acme, "designer", "operator", "viewer")

    membership_revoke(membership=Membership.objects.get(user=dora, role="designer"))

    assert perms(dora, acme) == {VIEW, OPERATE}
    assert sorted(roles_of(dora, acme)) == ["operator", "viewer"]

    membership_revoke(membership=Membership.objects.get(user=dora, role="operator"))

    assert perms(dora, acme) == {VIEW}


def test_revoking_the_last_role_takes_every_permission_away(acme, bob):
    membership_revoke(membership=Membership.objects.get(user=bob))

    assert perms(bob, acme) == set()
    assert not entity_list(user=bob).exists()
    assert not has_any_membership(bob)


def test_revoking_a_role_in_one_workspace_keeps_the_other(acme, globex):
    dora = grant(UserFactory(username="dora"), acme, "admin")
    grant(dora, globex, "admin")

    membership_revoke(membership=Membership.objects.get(user=dora, workspace=acme))

    assert perms(dora, acme) == set()
    assert perms(dora, globex) == ALL
