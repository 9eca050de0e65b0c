"""A child link's `version` range through the API (run on PostgreSQL in CI): a run started by
POST .../execute takes the newest version of the child its link's range allows among those
saved when it started (a child edited mid-way is not taken, nor a version the range
excludes); the entity's detail lists the upgrades its links miss; a hostile `version` is a
400 naming the field."""

from __future__ import annotations

import pytest

from entities.models import Entity
from entities.selectors import entity_definition
from entities.services import entity_save
from runs.models import LLMCall, Run
from tests.api.checks import error_of
from tests.factories import EntityFactory
from tests.support.queued_runs import Driver
from tests.support.runs import io
from tests.support.runs_api import execute_url, operator


def edited(entity: Entity, *, prompt: str = "", tone: bool = False) -> str:
    """A new version of `entity`: a PATCH (its prompt) or a MAJOR (a required input)."""
    data = entity_definition(entity=entity)
    if prompt:
        data["identity"]["persona"]["system_prompt"] = prompt
    if tone:
        data["io_contract"]["input"]["schema"] = {
            "type": "object",
            "properties": {"tone": {"type": "string"}},
            "required": ["tone"],
        }
    return entity_save(workspace=entity.workspace, entity=entity, definition=data).entity.version


def versions_run(api, run_id: str) -> list[str]:
    document = api.get(f"/api/v1/runs/{run_id}").json()
    assert document["status"] == "COMPLETED", document
    return [child["entity_version"] for child in document["child_runs"]]


def test_a_run_takes_the_newest_version_its_links_range_allowed_at_its_start(api, acme):
    EntityFactory(workspace=acme, name="gate", io_contract=io(None, ok="boolean"))
    writer = EntityFactory(workspace=acme, name="writer", io_contract=io(None, ok="boolean"))
    lead = EntityFactory(
        workspace=acme,
        name="lead",
        type="AGENT",
        children=["gate", {"child_id": "writer", "version": "^1.0.0"}],
    )
    api.force_login(operator(acme))
    driver = Driver()

    started = api.post(execute_url(lead), {"input_data": {}}, format="json")
    assert started.status_code == 202, started.content
    first = started.json()["run_id"]
    driver.engine.advance(first)  # the lead starts the gate, and waits on it
    # Mid-way: a PATCH the range allows, then a MAJOR it excludes.
    assert edited(writer, prompt="You write anew.") == "1.0.1"
    assert edited(writer, tone=True) == "2.0.0"
    driver.queue.append(first)
    driver.drain()

    assert versions_run(api, first) == ["1.0.0", "1.0.0"]  # pinned at its start
    writer_run = Run.objects.get(parent_id=first, entity=writer)
    (prompt,) = LLMCall.objects.filter(run=writer_run).values_list("input_prompt", flat=True)
    assert "You are writer." in prompt
    assert "You write anew." not in prompt

    again = api.post(execute_url(lead), {"input_data": {}}, format="json").json()["run_id"]
    driver.queue.append(again)
    driver.drain()
    assert versions_run(api, again) == ["1.0.0", "1.0.1"]  # the range keeps 2.0.0 out

    detail = api.get(f"/api/v1/entities/{lead.pk}").json()
    assert detail["definition"]["hierarchy"]["children"][1]["version"] == "^1.0.0"
    assert "version" not in detail["definition"]["hierarchy"]["children"][0]
    assert detail["upgrades"] == [
        {
            "link": "hierarchy.children[1]",
            "child_id": str(writer.pk),
            "child_name": "writer",
            "range": "^1.0.0",
            "resolved_version": "1.0.1",
            "newest_version": "2.0.0",
            "bump": "MAJOR",
            "summary": "input field 'tone' is now required",
            "widened_range": "^2.0.0",
        }
    ]


@pytest.mark.parametrize(
    ("version", "said"),
    [
        ("^^1", "is not a version or a version range"),
        ("^3.0.0", "no version of 'writer' matches ^3.0.0; it has only 1.0.0"),
        ("1" * 10_000, "is too long"),
        ("^1.0.0\u0000", "NUL"),
        ("^" + "9" * 90 + ".0.0", "no version of 'writer' matches"),
        (12, "must be a string or null"),
        ({"gte": "1.0.0"}, "must be a string or null"),
    ],
)
def test_a_hostile_version_is_a_400_naming_the_field(api, acme, alice, version, said):
    EntityFactory(workspace=acme, name="writer")
    lead = EntityFactory(workspace=acme, name="lead", type="AGENT", children=["writer"])
    data = entity_definition(entity=lead)
    data["hierarchy"]["children"][0]["version"] = version
    api.force_login(alice)

    answer = api.put(f"/api/v1/entities/{lead.pk}", {"definition": data}, format="json")

    details = error_of(answer, 400, "VALIDATION_ERROR")["error"]["details"]
    assert said in details["definition.hierarchy.children[0].version"], details
    lead.refresh_from_db()
    assert lead.version == "1.0.0"
