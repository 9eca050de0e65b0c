"""Versions a run runs, through the API and the trace page: each node says the version it
ran, pinned for the whole tree when the root started (a child edited mid-run keeps running
the version the run pinned), and execute may ask for an older version of the root."""

from __future__ import annotations

import pytest
from django.db import transaction

from entities.models import Entity
from entities.selectors import entity_definition
from entities.services import entity_save
from runs.models import LLMCall, Run
from runs.services import run_start
from tests.api.checks import error_of
from tests.factories import EntityFactory
from tests.support.queued_runs import Driver
from tests.support.runs import io
from tests.support.runs_api import GOOD_INPUT, execute_url, greeter, operator


def edited(entity: Entity, prompt: str) -> Entity:
    data = entity_definition(entity=entity)
    data["identity"]["persona"]["system_prompt"] = prompt
    return entity_save(workspace=entity.workspace, entity=entity, definition=data).entity


def test_each_node_says_the_version_its_trace_pinned(api, acme, alice, client):
    EntityFactory(workspace=acme, name="first", io_contract=io(None, ok="boolean"))
    second = EntityFactory(workspace=acme, name="second", io_contract=io(None, ok="boolean"))
    lead = EntityFactory(workspace=acme, name="lead", type="AGENT", children=["first", second])
    driver = Driver()
    with transaction.atomic():
        run = run_start(entity=lead, input_data={})
    driver.engine.advance(str(run.pk))  # the lead starts its first child and waits
    assert edited(second, "You are someone else now.").version == "1.0.1"
    driver.queue.append(str(run.pk))
    driver.drain()

    api.force_login(alice)
    document = api.get(f"/api/v1/runs/{run.pk}").json()
    assert document["status"] == "COMPLETED"
    assert document["entity_version"] == "1.0.0"
    assert [c["entity_version"] for c in document["child_runs"]] == ["1.0.0", "1.0.0"]
    tree = api.get(f"/api/v1/runs/{run.pk}/trace").json()["trace_tree"]
    assert [c["node"]["entity_version"] for c in tree["children"]] == ["1.0.0", "1.0.0"]
    second_run = Run.objects.get(parent=run, entity=second)
    (prompt,) = LLMCall.objects.filter(run=second_run).values_list("input_prompt", flat=True)
    assert "You are second." in prompt
    assert "You are someone else now." not in prompt

    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert page.count(">v1.0.0</span>") == 3


@pytest.fixture
def olive(acme):
    return operator(acme)


def test_execute_runs_the_version_asked_for(api, acme, olive):
    entity = greeter(acme)
    edited(entity, "A newer prompt.")
    api.force_login(olive)

    asked = api.post(
        execute_url(entity),
        {"input_data": GOOD_INPUT, "execution_options": {"version": "1.0.0"}},
        format="json",
    )
    newest = api.post(execute_url(entity), {"input_data": GOOD_INPUT}, format="json")

    assert asked.status_code == newest.status_code == 202, asked.content
    versions = {
        body["run_id"]: api.get(f"/api/v1/runs/{body['run_id']}").json()["entity_version"]
        for body in (asked.json(), newest.json())
    }
    assert versions == {asked.json()["run_id"]: "1.0.0", newest.json()["run_id"]: "1.0.1"}


@pytest.mark.parametrize(
    ("version", "status", "code"),
    [
        ("9.9.9", 404, "NOT_FOUND"),  # a SemVer it never had
        ("0.0.0", 404, "NOT_FOUND"),
        ("1.0", 400, "VALIDATION_ERROR"),  # no SemVer at all
        ("latest", 400, "VALIDATION_ERROR"),
        ("1.0.0\x00", 400, "VALIDATION_ERROR"),
        ("1" * 40, 400, "VALIDATION_ERROR"),
    ],
)
def test_a_version_it_never_had_is_named_and_nothing_starts(
    api, acme, olive, version, status, code
):
    entity = greeter(acme)
    api.force_login(olive)
    answer = api.post(
        execute_url(entity),
        {"input_data": GOOD_INPUT, "execution_options": {"version": version}},
        format="json",
    )
    error = error_of(answer, status, code)["error"]
    assert "execution_options.version" in error["details"]
    assert not Run.objects.exists()
