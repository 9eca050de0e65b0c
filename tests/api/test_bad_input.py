"""Bad input is a clear 4xx with seed 001's error object, never a 500, on every endpoint that
takes a JSON body, and nothing saved changes: nesting thousands of levels deep, NUL and lone
surrogates in a value or a key, infinite numbers, bodies over the limit, and numbers past
what the columns and the engine hold."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from approvals.models import Approval
from entities.models import Entity, EntityVersion, PlanStep
from runs.models import Run
from tests.api.checks import error_of
from tests.api.factories import approval_for
from tests.factories import EntityFactory, UserFactory, definition, grant, paused_run

SLOT = "@@"  # where the bad JSON text goes in an endpoint's body


@dataclass(frozen=True)
class Endpoint:
    """One JSON-taking endpoint: who calls it and a body with a slot for the bad value."""

    name: str
    method: str
    url: Callable[[dict], str]
    user: str
    body: str
    field: str  # where the slot is, as the details name it


ENDPOINTS = [
    Endpoint(
        "create an entity",
        "post",
        lambda o: "/api/v1/entities",
        "alice",
        json.dumps(
            {
                "workspace": "acme",
                "definition": definition(
                    "fresh", identity={"name": "fresh", "description": "SLOT"}
                ),
            }
        ).replace('"SLOT"', SLOT),
        "definition.identity.description",
    ),
    Endpoint(
        "replace a definition",
        "put",
        lambda o: f"/api/v1/entities/{o['writer'].pk}",
        "alice",
        json.dumps({"definition": {"identity": {"name": "writer", "description": "x"}}}).replace(
            '"x"', SLOT
        ),
        "definition.identity.description",
    ),
    Endpoint(
        "move an entity's status",
        "post",
        lambda o: f"/api/v1/entities/{o['writer'].pk}/status",
        "alice",
        '{"status": @@}',
        "status",
    ),
    Endpoint(
        "import",
        "post",
        lambda o: "/api/v1/workspaces/acme/import",
        "alice",
        '{"entities": [{"identity": {"name": "imported", "description": @@}}]}',
        "entities[0].identity.description",
    ),
    Endpoint(
        "execute",
        "post",
        lambda o: f"/api/v1/entities/{o['writer'].pk}/execute",
        "olive",
        '{"input_data": {"text": @@}, "context": {"why": "test"}}',
        "input_data.text",
    ),
    Endpoint(
        "execute's context",
        "post",
        lambda o: f"/api/v1/entities/{o['writer'].pk}/execute",
        "olive",
        '{"input_data": {}, "context": {"why": @@}}',
        "context.why",
    ),
    Endpoint(
        "decide a request",
        "post",
        lambda o: f"/api/v1/approvals/{o['request'].pk}/decision",
        "dave",
        '{"decision": "edit", "payload": {"subject": @@}}',
        "payload.subject",
    ),
]

DEEP = "[" * 5000 + "]" * 5000  # RecursionError in the decoder
BAD_VALUES = {
    "nested thousands deep": (DEEP, None),
    "nested just past the limit": ("[" * 70 + "]" * 70, "nested deeper than 64 levels"),
    "a NUL in text": ('"a\\u0000b"', "NUL"),
    "a NUL in a key": ('{"a\\u0000b": 1}', "NUL"),
    "a lone surrogate": ('"\\ud800"', "surrogates"),
    "a lone surrogate in a key": ('{"\\udfff": 1}', "surrogates"),
    "an infinite number": ("1e999", "finite"),
}


@pytest.fixture
def world(acme, alice, dave):
    writer = EntityFactory(workspace=acme, name="writer")
    return {
        "writer": writer,
        "request": approval_for(paused_run(EntityFactory(workspace=acme, name="poster"))),
        "alice": alice,
        "dave": dave,
        "olive": grant(UserFactory(username="olive"), acme, "operator"),
    }


def saved() -> tuple:
    """What a refused request must leave as it was."""
    return (
        sorted(Entity.objects.values_list("pk", "name", "status", "version", "updated_at")),
        EntityVersion.objects.count(),
        PlanStep.objects.count(),
        Run.objects.count(),
        sorted(Approval.objects.values_list("pk", "status", "decision", "approved_payload")),
    )


def send(api, world, endpoint: Endpoint, body: str):
    api.force_login(world[endpoint.user])
    call = getattr(api, endpoint.method)
    return call(endpoint.url(world), body.encode("utf-8"), content_type="application/json")


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.name)
@pytest.mark.parametrize("bad", BAD_VALUES, ids=str)
def test_bad_json_is_refused_naming_where_and_nothing_changes(api, world, endpoint, bad):
    text, says = BAD_VALUES[bad]
    before = saved()

    answer = error_of(
        send(api, world, endpoint, endpoint.body.replace(SLOT, text)), 400, "VALIDATION_ERROR"
    )

    details = answer["error"]["details"]
    if says is not None:
        assert any(where.startswith(endpoint.field) for where in details), details
        assert says in answer["error"]["message"], answer
    assert saved() == before


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.name)
def test_a_body_over_the_limit_is_413_on_every_endpoint(api, world, endpoint, settings):
    settings.HIERARCH_IMPORT_MAX_BYTES = 2000
    before = saved()

    answer = error_of(
        send(api, world, endpoint, endpoint.body.replace(SLOT, json.dumps("x" * 3000))),
        413,
        "PAYLOAD_TOO_LARGE",
    )

    assert "the API takes up to 2,000 bytes" in answer["error"]["message"]
    assert saved() == before


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_a_body_over_djangos_own_limit_at_execute_is_413_not_a_plain_400(
    api, world, settings, content_type
):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    settings.HIERARCH_IMPORT_MAX_BYTES = 10_000
    api.force_login(world["olive"])

    before = saved()

    response = api.post(
        f"/api/v1/entities/{world['writer'].pk}/execute",
        json.dumps({"input_data": {"text": "x" * 5000}}),
        content_type="application/json",
    )

    error_of(response, 413, "PAYLOAD_TOO_LARGE")
    assert saved() == before


def test_a_body_that_is_not_utf8_is_malformed(api, world):
    api.force_login(world["olive"])
    response = api.post(
        f"/api/v1/entities/{world['writer'].pk}/execute",
        b'{"input_data": {"text": "\xff"}}',
        content_type="application/json",
    )
    error_of(response, 400, "MALFORMED_JSON")


# -- numbers past what the columns and the engine hold -------------------------------------------


@pytest.mark.parametrize(
    ("sections", "field"),
    [
        (
            {
                "planning": {
                    "static_plan": {"steps": [{"order": 10**20, "name": "one", "type": "THOUGHT"}]},
                }
            },
            "definition.planning.static_plan.steps[0].order",
        ),
        (
            {"governance": {"execution_limits": {"max_llm_calls": 10**20}}},
            "definition.governance.execution_limits.max_llm_calls",
        ),
        (
            {"governance": {"execution_limits": {"max_tool_calls": 2**31}}},
            "definition.governance.execution_limits.max_tool_calls",
        ),
        (
            {"governance": {"cost_controls": {"cumulative_cost_usd": 1e308}}},
            "definition.governance.cost_controls.cumulative_cost_usd",
        ),
        (
            {"governance": {"cost_controls": {"max_cost_usd": 1e30}}},
            "definition.governance.cost_controls.max_cost_usd",
        ),
        (
            {"governance": {"execution_limits": {"timeout_ms": 10**12}}},
            "definition.governance.execution_limits.timeout_ms",
        ),
        (
            {"capabilities": {"context_engineering": {"max_context_tokens": 10**15}}},
            "definition.capabilities.context_engineering.max_context_tokens",
        ),
        (
            {"logic_gate": {"reasoning_config": {"max_tokens": 10**15}}},
            "definition.logic_gate.reasoning_config.max_tokens",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
@pytest.mark.parametrize("method", ["post", "put"])
def test_a_number_past_what_the_columns_hold_is_refused_naming_the_field(
    api, world, sections, field, method
):
    before = saved()
    api.force_login(world["alice"])
    if method == "post":
        response = api.post(
            "/api/v1/entities", {"workspace": "acme", "definition": definition("big", **sections)}
        )
    else:
        sent = definition("writer", **sections)
        response = api.put(f"/api/v1/entities/{world['writer'].pk}", {"definition": sent})

    answer = error_of(response, 400, "VALIDATION_ERROR")

    assert field in answer["error"]["details"], answer
    assert "at most" in answer["error"]["details"][field]
    assert saved() == before


def test_a_jsonlogic_condition_written_as_deeply_nested_text_is_refused(api, world):
    deep = "[" * 5000 + "]" * 5000
    sections = {
        "planning": {
            "static_plan": {
                "steps": [
                    {
                        "order": 1,
                        "name": "one",
                        "type": "THOUGHT",
                        "exit_conditions": [{"condition": deep, "next_step": "END"}],
                    }
                ]
            },
        }
    }
    before = saved()
    api.force_login(world["alice"])

    answer = error_of(
        api.post(
            "/api/v1/entities", {"workspace": "acme", "definition": definition("deep", **sections)}
        ),
        400,
        "VALIDATION_ERROR",
    )

    where = "definition.planning.static_plan.steps[0].exit_conditions[0].condition"
    assert "nested deeper than" in answer["error"]["details"].get(where, ""), answer
    assert saved() == before
