"""The designer's pages: who sees which workspace."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import grant
from tests.support.clients import signed_in

pytestmark = pytest.mark.django_db


def test_the_designer_asks_for_a_sign_in(client):
    response = client.get(reverse("designer:index"))
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_one_workspace_opens_its_hierarchy(alice, acme):
    response = signed_in(Client, alice).get(reverse("designer:index"))
    assert response.status_code == 302
    assert response["Location"] == reverse("designer:tree", kwargs={"workspace": "acme"})


def test_several_workspaces_are_listed_to_pick_from(alice, acme, globex):
    grant(alice, globex, "viewer")
    response = signed_in(Client, alice).get(reverse("designer:index"))
    assert response.status_code == 200
    assert [w.slug for w in response.context["workspaces"]] == ["acme", "globex"]


def test_another_workspace_is_not_found(alice, globex):
    response = signed_in(Client, alice).get(
        reverse("designer:tree", kwargs={"workspace": globex.slug})
    )
    assert response.status_code == 404
