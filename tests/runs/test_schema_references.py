"""A JSON Schema `$ref` never fetches anything (issue 16, item 2): a user schema resolves
references only inside itself. A remote or file reference is refused at design time by its
field; one forced into the database is a validation error at run time, the server it names
sees no request, and nothing of the file shows."""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from approvals.models import Approval
from entities.definition import DefinitionInvalid
from entities.models import Entity, EntityVersion
from entities.services import entities_import
from runs.models import TERMINAL, Run
from runs.store import latest_version
from tests.api.factories import approval_for
from tests.factories import EntityFactory, definition, paused_run
from tests.support.clients import signed_in
from tests.support.counting_server import CANARY, counting_server

FILE_CANARY = "file-canary-4b1d9e"


@pytest.fixture
def server():
    with counting_server() as running:
        yield running


@pytest.fixture
def secret_file(tmp_path) -> str:
    """A file a reference could name: a schema holding a canary, so reading it would show."""
    path = tmp_path / "secret.json"
    path.write_text(json.dumps({"type": "string", "const": FILE_CANARY}))
    return path.as_uri()


def referring_input(ref: str) -> dict:
    return {
        "input": {
            "schema": {
                "$defs": {"doc": {"type": "string"}},
                "type": "object",
                "properties": {"doc": {"$ref": ref}},
                "required": ["doc"],
            }
        }
    }


def forced(entity: Entity, section_path: tuple[str, ...], value) -> None:
    """Put `value` into the entity's current version as if it had been saved before the
    design-time check existed."""
    version = latest_version(entity)
    snapshot = version.definition
    node = snapshot
    for key in section_path[:-1]:
        node = node[key]
    node[section_path[-1]] = value
    EntityVersion.objects.filter(pk=version.pk).update(definition=snapshot)


@pytest.mark.parametrize("kind", ["http", "file"])
def test_a_remote_or_file_reference_is_refused_at_design_time_by_its_field(
    acme, alice, server, kind
):
    ref = server.url("/x.json") if kind == "http" else "file:///etc/hostname"
    sent = definition("fetcher", io_contract=referring_input(ref))
    api = signed_in(APIClient, alice)

    created = api.post("/api/v1/entities", {"workspace": "acme", "definition": sent}, format="json")
    imported = api.post("/api/v1/workspaces/acme/import", [sent], format="json")
    with pytest.raises(DefinitionInvalid) as refusal:
        entities_import(workspace=acme, definitions=[sent])

    path = "io_contract.input.schema.properties.doc.$ref"
    assert created.status_code == 400 and imported.status_code == 400
    for problem in (
        created.json()["error"]["details"][f"definition.{path}"],
        imported.json()["error"]["details"][f"entities[0].{path}"],
    ):
        assert repr(ref) in problem and "does not resolve inside the schema" in problem
    assert [p.path for p in refusal.value.problems] == [path]
    assert server.paths == []
    assert not Entity.objects.exists()


@pytest.mark.parametrize("kind", ["http", "file"])
def test_a_reference_forced_into_the_database_is_a_validation_error_and_fetches_nothing(
    acme, olive, server, secret_file, kind
):
    ref = server.url("/x.json") if kind == "http" else secret_file
    entity = EntityFactory(
        workspace=acme, name="fetcher", io_contract=referring_input("#/$defs/doc")
    )
    forced(entity, ("io_contract", "input", "schema", "properties", "doc"), {"$ref": ref})

    api = signed_in(APIClient, olive)
    answer = api.post(
        f"/api/v1/entities/{entity.pk}/execute", {"input_data": {"doc": "x"}}, format="json"
    )
    form = signed_in(Client, olive).post(
        reverse("runs:start_entity", args=[entity.pk]),
        {"doc": '"x"'},  # a field of no declared type takes JSON
        headers={"HX-Request": "true"},
    )

    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "VALIDATION_ERROR"
    assert (
        "does not resolve inside the schema" in answer.json()["error"]["details"]["input_data.doc"]
    )
    assert form.status_code == 422
    assert "does not resolve inside the schema" in form.content.decode()
    assert server.paths == []
    for text in (answer.content.decode(), form.content.decode()):
        assert CANARY not in text and FILE_CANARY not in text
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_an_output_reference_forced_into_the_database_fails_the_run_and_fetches_nothing(
    acme, olive, server, settings
):
    settings.HIERARCH_EXECUTOR = "inline"
    output = {"type": "object", "properties": {"text": {"type": "string"}}}
    entity = EntityFactory(
        workspace=acme, name="teller", io_contract={"output": {"schema": output}}
    )
    forced(
        entity,
        ("io_contract", "output", "schema", "properties", "text"),
        {"$ref": server.url("/x.json")},
    )

    answer = signed_in(APIClient, olive).post(
        f"/api/v1/entities/{entity.pk}/execute",
        {"input_data": {}, "execution_options": {"async": False}},
        format="json",
    )

    # The call waits for the end, up to its limit; on a busy machine the run may end later.
    assert answer.status_code in (200, 202), answer.content
    run = Run.objects.get()
    deadline = time.monotonic() + 60
    while run.status not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.05)
        run.refresh_from_db()
    assert run.status == "FAILED"
    assert "does not resolve inside the schema" in run.error_message
    assert server.paths == []
    assert CANARY not in answer.content.decode() and CANARY not in json.dumps(run.output_data)


def test_an_edit_against_a_schema_with_a_remote_reference_is_refused_and_fetches_nothing(
    acme, dave, server, secret_file
):
    schema = {
        "type": "object",
        "properties": {"channel": {"$ref": server.url("/x.json")}, "text": {"$ref": secret_file}},
    }
    approval = approval_for(paused_run(EntityFactory(workspace=acme, name="poster")))
    Approval.objects.filter(pk=approval.pk).update(edit_schema=schema)

    answer = signed_in(APIClient, dave).post(
        f"/api/v1/approvals/{approval.pk}/decision",
        {"decision": "edit", "payload": {"channel": "news", "text": "hi"}},
        format="json",
    )

    assert answer.status_code == 400
    details = answer.json()["error"]["details"]
    assert set(details) == {"payload.channel", "payload.text"}
    assert all("does not resolve inside the schema" in problem for problem in details.values())
    assert server.paths == []
    assert CANARY not in answer.content.decode() and FILE_CANARY not in answer.content.decode()


def test_local_references_keep_working(acme, olive):
    io = {
        "input": {
            "schema": {
                "$defs": {"code": {"type": "string", "pattern": "^[a-z]{3}$"}},
                "type": "object",
                "properties": {"code": {"$ref": "#/$defs/code"}},
                "required": ["code"],
            }
        }
    }
    entity = EntityFactory(workspace=acme, name="local", io_contract=io)
    api = signed_in(APIClient, olive)
    url = f"/api/v1/entities/{entity.pk}/execute"

    wrong = api.post(url, {"input_data": {"code": "ABCD"}}, format="json")
    right = api.post(url, {"input_data": {"code": "abc"}}, format="json")

    assert wrong.status_code == 400
    assert "does not match" in wrong.json()["error"]["details"]["input_data.code"]
    assert right.status_code == 202, right.content
