"""A designer's regular expression cannot freeze the server (issue 16, item 1): every user
pattern runs on RE2 in linear time, and a pattern RE2 cannot take is refused at design time
with the field named. Requests at the same moment as a catastrophic one are not delayed."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from entities.definition import DefinitionInvalid
from entities.models import Entity
from entities.services import entities_import
from runs.models import Run
from tests.factories import EntityFactory, definition, tool_definition
from tests.support.clients import signed_in
from tools.services import tool_upsert

CATASTROPHIC = "^(a+)+$"
ATTACK = "a" * 40 + "!"  # 2**40 ways for Python's `re` to split the a's before it gives up
# Backtracking through 2**40 splits takes hours; a linear-time match, milliseconds. The bound
# sits far from both, so a busy machine (two requests at once on two shared cores) cannot
# fail it while a backtracking engine always would.
PROMPTLY_S = 5.0


def guarded_io(pattern: str) -> dict:
    return {
        "input": {
            "schema": {
                "type": "object",
                "properties": {"code": {"type": "string", "pattern": pattern}},
                "required": ["code"],
            }
        }
    }


def at_the_same_moment(*requests):
    """Run each request in its own thread, released together; each answer with the seconds
    it took from the release."""
    barrier = threading.Barrier(len(requests))

    def timed(request):
        try:
            barrier.wait(timeout=10)
            started = time.perf_counter()
            response = request()
            return response, time.perf_counter() - started
        finally:
            connections.close_all()  # this thread's own connections

    with ThreadPoolExecutor(len(requests)) as pool:
        futures = [pool.submit(timed, request) for request in requests]
        return [future.result(timeout=60) for future in futures]


@pytest.fixture
def guarded(acme) -> Entity:
    return EntityFactory(workspace=acme, name="guarded", io_contract=guarded_io(CATASTROPHIC))


@pytest.mark.django_db(transaction=True)
def test_a_catastrophic_pattern_answers_the_execute_endpoint_at_once_and_delays_no_other(
    guarded, olive
):
    attacker, neighbour = signed_in(APIClient, olive), signed_in(APIClient, olive)
    url = f"/api/v1/entities/{guarded.pk}/execute"
    assert neighbour.get("/api/v1/entities").status_code == 200  # warm: first-request costs

    (refused, refused_in), (listed, listed_in) = at_the_same_moment(
        lambda: attacker.post(url, {"input_data": {"code": ATTACK}}, format="json"),
        lambda: neighbour.get("/api/v1/entities"),
    )

    assert refused.status_code == 400, refused.content
    error = refused.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert "does not match" in error["details"]["input_data.code"]
    assert listed.status_code == 200
    assert refused_in < PROMPTLY_S and listed_in < PROMPTLY_S, (refused_in, listed_in)
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_catastrophic_pattern_answers_the_run_start_form_at_once_and_delays_no_other(
    guarded, olive
):
    attacker, neighbour = signed_in(Client, olive), signed_in(Client, olive)
    url = reverse("runs:start_entity", args=[guarded.pk])
    assert neighbour.get(url).status_code == 200

    (refused, refused_in), (page, page_in) = at_the_same_moment(
        lambda: attacker.post(url, {"code": ATTACK}, headers={"HX-Request": "true"}),
        lambda: neighbour.get(url),
    )

    assert refused.status_code == 422
    assert "does not match" in refused.content.decode()
    assert page.status_code == 200
    assert refused_in < PROMPTLY_S and page_in < PROMPTLY_S, (refused_in, page_in)
    assert not Run.objects.exists()


def test_an_existing_valid_pattern_still_validates_and_still_refuses_a_non_matching_value(
    acme, olive
):
    entity = EntityFactory(
        workspace=acme, name="coded", io_contract=guarded_io("^[A-Z]{3}-\\d{4}$")
    )
    api = signed_in(APIClient, olive)
    url = f"/api/v1/entities/{entity.pk}/execute"

    wrong = api.post(url, {"input_data": {"code": "abc-1"}}, format="json")
    right = api.post(url, {"input_data": {"code": "ABC-1234"}}, format="json")

    assert wrong.status_code == 400
    assert "does not match" in wrong.json()["error"]["details"]["input_data.code"]
    assert right.status_code == 202, right.content


# Every place a designer writes a pattern, with the path its refusal names.
PLACES = {
    "input pattern": (
        {"io_contract": guarded_io(r"(a)\1")},
        "io_contract.input.schema.properties.code.pattern",
    ),
    "output patternProperties": (
        {
            "io_contract": {
                "output": {"schema": {"type": "object", "patternProperties": {"(?<=x)y": {}}}}
            }
        },
        "io_contract.output.schema.patternProperties.(?<=x)y",
    ),
    "tool parameters": (
        {
            "tools": [
                tool_definition(
                    "lookup",
                    function_schema={
                        "name": "lookup",
                        "parameters": {
                            "type": "object",
                            "properties": {"q": {"type": "string", "pattern": r"(a)\1"}},
                        },
                    },
                )
            ]
        },
        "capabilities.tools[0].function_schema.parameters.properties.q.pattern",
    ),
    "review criterion": (
        {
            "logic_gate": {
                "review_mechanism": {
                    "enabled": True,
                    "success_criteria": [
                        {"criterion": "twice", "validation_type": "REGEX", "validator": r"(a)\1"}
                    ],
                }
            }
        },
        "logic_gate.review_mechanism.success_criteria[0].validator",
    ),
    "validation rule": (
        {
            "io_contract": {
                "input": {
                    "schema": {"type": "object", "properties": {"code": {"type": "string"}}},
                    "validation_rules": [{"rule": "code repeats", "validator": r"(a)\1"}],
                }
            }
        },
        "io_contract.input.validation_rules[0].validator",
    ),
}


@pytest.mark.parametrize("place", PLACES)
def test_a_backreference_is_refused_at_design_time_with_the_field_named(acme, alice, place):
    sections, path = PLACES[place]
    sent = definition("repeats", **sections)
    api = signed_in(APIClient, alice)

    created = api.post("/api/v1/entities", {"workspace": "acme", "definition": sent}, format="json")
    imported = api.post("/api/v1/workspaces/acme/import", [sent], format="json")
    with pytest.raises(DefinitionInvalid) as refusal:
        entities_import(workspace=acme, definitions=[sent])

    assert created.status_code == 400 and imported.status_code == 400
    created_problem = created.json()["error"]["details"][f"definition.{path}"]
    imported_problem = imported.json()["error"]["details"][f"entities[0].{path}"]
    expected = "lookbehinds" if "(?<=" in path else "backreferences"
    assert expected in created_problem and expected in imported_problem
    assert [p.path for p in refusal.value.problems] == [path]
    assert not Entity.objects.exists()


def test_a_registry_tool_with_a_refused_pattern_is_refused_with_the_field_named(acme):
    sent = tool_definition(
        "lookup",
        implementation="simulated",
        output_schema={"type": "object", "properties": {"id": {"pattern": "a{5000}"}}},
    )
    with pytest.raises(DefinitionInvalid) as refusal:
        tool_upsert(workspace=acme, definition=sent)
    [problem] = refusal.value.problems
    assert problem.path == "output_schema.properties.id.pattern"
    assert "repetition count above 1000" in problem.message
