"""Opening an entity in the editor and saving it as shown changes nothing: every field shows
the value the definition holds, in the unit and the form the definition keeps it in.

A field that showed its value wrongly (a timeout of 300 s shown as "3") would rewrite the
definition each time a designer saved any other section; this walks every entity of the
demo hierarchy and definitions with the values that are easy to show wrongly."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from entities.models import Entity
from entities.selectors import entity_definition
from tests.factories import EntityFactory
from tests.support.clients import signed_in
from tests.support.designer import shown, url

pytestmark = pytest.mark.django_db


def without_metadata(data: dict) -> dict:
    return {key: value for key, value in data.items() if key != "metadata"}


def without_field_order(data: object) -> object:
    """The definition without the `x-order` the editor writes into each contract field: it
    keeps the fields in the order the designer gave them (PostgreSQL's jsonb keeps keys in an
    order of its own), and is the one thing the editor adds to a definition it did not make."""
    if isinstance(data, dict):
        return {k: without_field_order(v) for k, v in data.items() if k != "x-order"}
    if isinstance(data, list):
        return [without_field_order(item) for item in data]
    return data


def saved_as_shown(client: Client, entity: Entity) -> dict:
    """The definition after the editor's form is posted back exactly as the page showed it."""
    response = client.post(url(entity), shown(client, url(entity)) | {"op": "save"})
    assert response.status_code == 302, response.content.decode()[:3000]
    return entity_definition(entity=Entity.objects.get(pk=entity.pk))


def test_every_demo_entity_is_saved_unchanged(admin_user):
    call_command("setup_demo", stdout=StringIO())
    client = signed_in(Client, admin_user)
    entities = list(Entity.objects.filter(workspace__slug="demo").order_by("name"))
    assert len(entities) > 5
    for entity in entities:
        before = without_metadata(entity_definition(entity=entity))
        after = without_metadata(saved_as_shown(client, entity))
        assert without_field_order(after) == without_field_order(before), entity.name


@pytest.mark.parametrize(
    "timeout_ms", [1, 1_500, 10_000, 60_000, 300_000, 3_600_000, 2_147_483_647]
)
def test_limits_and_waits_keep_their_value(alice, acme, timeout_ms):
    checkpoint = {
        "trigger": "BEFORE_EXECUTION",
        "condition": None,
        "approval_required": True,
        "notification_channels": ["IN_APP"],
        "timeout_ms": max(timeout_ms, 1_000),
        "timeout_action": "ABORT",
    }
    entity = EntityFactory(
        workspace=acme,
        name="timed",
        type="SKILL",
        governance={
            "execution_limits": {"timeout_ms": timeout_ms, "max_llm_calls": 100},
            "cost_controls": {"max_cost_usd": 10.0, "alert_threshold_usd": 0.5},
            "human_oversight": {"hitl_checkpoints": [checkpoint]},
        },
    )
    before = without_metadata(entity_definition(entity=entity))
    after = without_metadata(saved_as_shown(signed_in(Client, alice), entity))
    assert after == before
    assert after["governance"]["execution_limits"]["timeout_ms"] == timeout_ms
