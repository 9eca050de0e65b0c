"""The OpenAPI schema documents every endpoint, the decision body and the error object, and
the documentation page serves Swagger UI from our own static files."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command


@pytest.fixture
def schema(api, db) -> dict:
    response = api.get("/api/v1/schema/", {"format": "json"})
    assert response.status_code == 200, response.content[:500]
    return response.json()


def test_the_schema_lists_the_approvals_endpoints(schema):
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) >= {
        "/api/v1/approvals",
        "/api/v1/approvals/{id}",
        "/api/v1/approvals/{id}/decision",
    }
    listing = schema["paths"]["/api/v1/approvals"]["get"]
    assert {p["name"] for p in listing["parameters"]} == {
        "status",
        "workspace",
        "run",
        "page",
        "page_size",
    }


def test_the_schema_documents_one_decision_body_per_decision(schema):
    operation = schema["paths"]["/api/v1/approvals/{id}/decision"]["post"]
    assert operation["requestBody"]["required"] is True
    body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request = schema["components"]["schemas"][body.rsplit("/", 1)[1]]
    kinds = {
        kind: schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
        for kind, ref in request["discriminator"]["mapping"].items()
    }

    assert request["discriminator"]["propertyName"] == "decision"
    assert request["required"] == ["decision"]
    assert list(kinds) == ["approve", "edit", "reject", "lock_constraint"]
    assert set(kinds["edit"]["required"]) == {"decision", "payload"}
    assert set(kinds["lock_constraint"]["required"]) == {"decision", "constraint"}
    assert set(kinds["approve"]["properties"]) == {"decision", "notes"}
    assert all(kind["additionalProperties"] is False for kind in kinds.values())


def lists(schema: dict) -> list[tuple[str, dict]]:
    return [
        (path, methods["get"])
        for path, methods in schema["paths"].items()
        if "get" in methods and any(p["name"] == "page" for p in methods["get"]["parameters"])
    ]


def test_every_list_says_pages_start_at_1_and_documents_the_404_past_the_last(schema):
    assert len(lists(schema)) == 6

    for path, operation in lists(schema):
        pages = {p["name"]: p["schema"] for p in operation["parameters"]}
        assert pages["page"]["minimum"] == 1, path
        assert pages["page_size"]["minimum"] == 1, path
        assert "404" in operation["responses"], path


def test_every_choice_filter_lists_its_values(schema):
    filters = {
        (path, p["name"]): p["schema"]
        for path, operation in lists(schema)
        for p in operation["parameters"]
        if p["name"] in {"status", "type", "permission"}
    }

    assert set(filters) == {
        ("/api/v1/approvals", "status"),
        ("/api/v1/runs", "status"),
        ("/api/v1/entities", "status"),
        ("/api/v1/entities", "type"),
        ("/api/v1/tools", "permission"),
    }
    for where, value in filters.items():
        assert value["type"] == "array", where
        assert value["items"]["enum"], where
    assert "FAILED" in filters["/api/v1/runs", "status"]["items"]["enum"]


def test_every_request_body_refuses_fields_it_does_not_know(schema):
    bodies = [
        name
        for name, component in schema["components"]["schemas"].items()
        if name.endswith("Request") and "properties" in component
    ]
    assert len(bodies) >= 6

    for name in bodies:
        assert schema["components"]["schemas"][name]["additionalProperties"] is False, name


def test_error_details_may_be_null(schema):
    details = schema["components"]["schemas"]["ErrorBody"]["properties"]["details"]

    assert details["additionalProperties"] == {"type": "string", "nullable": True}


def test_the_schema_documents_the_error_object_on_every_error_answer(schema):
    error = schema["components"]["schemas"]["Error"]
    assert set(error["properties"]) == {"error", "retryable", "backoffSec"}
    body = schema["components"]["schemas"]["ErrorBody"]
    assert set(body["properties"]) == {"code", "message", "details"}

    answers = schema["paths"]["/api/v1/approvals/{id}/decision"]["post"]["responses"]
    assert set(answers) == {"200", "400", "401", "403", "404", "409", "429"}
    for status, answer in answers.items():
        if status != "200":
            ref = answer["content"]["application/json"]["schema"]["$ref"]
            assert ref == "#/components/schemas/Error", status


def test_the_schema_generates_without_warnings(tmp_path, db):
    # --fail-on-warn: a serializer the generator cannot read fails here, not in a client.
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml")
    )


def test_the_docs_page_serves_swagger_ui_from_our_own_static_files(api, db):
    response = api.get("/api/v1/docs/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "/api/v1/schema/" in page
    scripts = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', page)
    assert any("drf_spectacular_sidecar/swagger-ui-dist/" in s for s in scripts), scripts
    assert not [s for s in scripts if s.startswith(("http:", "https:", "//"))], scripts
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
