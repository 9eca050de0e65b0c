"""A schema reference that loops back to itself without reading the value (issue 16): the
entity API refuses it by its path, and one forced into the database is a validation error at
execute, in the run start form and for an approval's edit, never a 500."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from approvals.models import Approval
from entities.models import Entity, EntityVersion
from runs.models import Run
from runs.store import latest_version
from tests.api.factories import approval_for
from tests.factories import EntityFactory, definition, paused_run
from tests.support.clients import signed_in

LOOP = "refers back to itself without reading any of the value (an endless loop)"
LOOPING = {
    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
    "type": "object",
    "properties": {"x": {"$ref": "#/$defs/a"}},
}


def test_the_entity_api_refuses_a_looping_reference_by_its_path(acme, alice):
    sent = definition("looper", io_contract={"input": {"schema": LOOPING}})

    answer = signed_in(APIClient, alice).post(
        "/api/v1/entities", {"workspace": "acme", "definition": sent}, format="json"
    )

    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    base = "definition.io_contract.input.schema.$defs"
    assert error["details"][f"{base}.a.$ref"] == f"this reference {LOOP}"
    assert error["details"][f"{base}.b.allOf[0].$ref"] == f"this reference {LOOP}"
    assert not Entity.objects.exists()


def test_a_looping_reference_saved_before_the_check_is_a_validation_error_at_execute(acme, olive):
    entity = EntityFactory(
        workspace=acme,
        name="looper",
        io_contract={"input": {"schema": {"type": "object", "properties": {"x": {}}}}},
    )
    version = latest_version(entity)
    snapshot = version.definition
    snapshot["io_contract"]["input"]["schema"] = LOOPING
    EntityVersion.objects.filter(pk=version.pk).update(definition=snapshot)

    answer = signed_in(APIClient, olive).post(
        f"/api/v1/entities/{entity.pk}/execute", {"input_data": {"x": 1}}, format="json"
    )
    form = signed_in(Client, olive).post(
        reverse("runs:start_entity", args=[entity.pk]),
        {"x": "1"},
        headers={"HX-Request": "true"},
    )

    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert error["details"]["input_data"] == (
        f"the schema cannot be checked: its reference at $defs.a.$ref {LOOP}"
    )
    assert form.status_code == 422
    assert "refers back to itself" in form.content.decode()
    assert not Run.objects.exists()


def test_an_edit_against_a_looping_schema_is_refused_with_a_validation_error(acme, dave):
    approval = approval_for(paused_run(EntityFactory(workspace=acme, name="poster")))
    Approval.objects.filter(pk=approval.pk).update(edit_schema={"$ref": "#"})

    answer = signed_in(APIClient, dave).post(
        f"/api/v1/approvals/{approval.pk}/decision",
        {"decision": "edit", "payload": {"text": "hi"}},
        format="json",
    )

    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] == "VALIDATION_ERROR"
    assert LOOP in str(answer.json()["error"]["details"])
    assert Approval.objects.get(pk=approval.pk).status == approval.status
