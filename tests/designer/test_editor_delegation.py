"""The editor's Delegation section: an agent is allowed to hire subordinates from templates
of its workspace, saved as `capabilities.delegation` and shown again; a template that is not
in the workspace is named at the field and nothing is saved.

POST data is what a browser would send for the rendered page (`page_form`)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from entities.models import Entity
from tests.factories import EntityFactory
from tests.support.clients import signed_in
from tests.support.page_form import form_data

pytestmark = pytest.mark.django_db


def url(entity: Entity) -> str:
    return reverse("designer:entity", kwargs={"workspace": entity.workspace.slug, "pk": entity.pk})


@pytest.fixture
def designer(alice):
    return signed_in(Client, alice)


@pytest.fixture
def coordinator(acme):
    EntityFactory(workspace=acme, name="specialist", type="SKILL")
    return EntityFactory(
        workspace=acme,
        name="coordinator",
        type="AGENT",
        identity={"name": "coordinator", "persona": {"system_prompt": "You coordinate."}},
    )


def test_an_agent_is_allowed_to_hire_and_it_is_shown_again(designer, coordinator):
    page = form_data(designer.get(url(coordinator)).content, "editor")
    assert page.get("delegation-enabled") is None  # an unticked checkbox sends nothing
    data = page | {
        "delegation-enabled": "on",
        "delegation-templates": "specialist",
        "delegation-max_subordinates": "3",
        "delegation-max_budget_usd_each": "0.25",
        "op": "save",
    }
    response = designer.post(url(coordinator), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    coordinator.refresh_from_db()
    assert coordinator.capabilities["delegation"] == {
        "enabled": True,
        "templates": ["specialist"],
        "max_subordinates": 3,
        "max_budget_usd_each": 0.25,
    }
    again = form_data(designer.get(url(coordinator)).content, "editor")
    assert again["delegation-enabled"] == "on"
    assert again["delegation-templates"] == "specialist"
    assert again["delegation-max_budget_usd_each"] == "0.25"


def test_a_template_not_in_the_workspace_is_named_at_its_field(designer, coordinator):
    version = coordinator.version
    page = form_data(designer.get(url(coordinator)).content, "editor")
    data = page | {"delegation-enabled": "on", "delegation-templates": "nobody", "op": "save"}
    response = designer.post(url(coordinator), data)
    assert response.status_code == 422  # the page again, with the problem at its field
    body = response.content.decode()
    assert "there is no entity &#x27;nobody&#x27; in this workspace to hire from" in body
    coordinator.refresh_from_db()
    assert coordinator.version == version
    assert not coordinator.capabilities.get("delegation", {}).get("enabled")
