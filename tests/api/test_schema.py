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


def test_the_schema_documents_the_decision_body(schema):
    operation = schema["paths"]["/api/v1/approvals/{id}/decision"]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request = schema["components"]["schemas"][body.rsplit("/", 1)[1]]

    assert set(request["properties"]) == {"decision", "notes", "payload", "constraint"}
    assert request["required"] == ["decision"]
    decisions = schema["components"]["schemas"]["DecisionEnum"]["enum"]
    assert decisions == ["approve", "edit", "reject", "lock_constraint"]


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
