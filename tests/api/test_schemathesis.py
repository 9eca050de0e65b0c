"""Schemathesis against the whole API: every operation of the OpenAPI schema at
/api/v1/schema/ (whatever endpoints exist when it runs), called through the WSGI application
by a signed-in user who designs, operates and approves in a workspace with entities, tools,
runs and a pending approval. Every answer must be something other than a 500, with a status
code the schema documents, the content type it documents, and a body valid against it.

Each generated request is sent as generated (mostly ids that exist nowhere: 404s, and bodies
that are wrong on purpose: 400s), then again with the path's ids swapped for the workspace's
real objects, so that the answers that carry data (200, 201, 409) are checked too.

Runs that execute or re-run start here stay PENDING: the test runs inside one database
transaction that is rolled back at its end, and the executors are only told about a run once
its transaction commits (`transaction.on_commit`, for the inline pool and Celery alike), so no
executor thread or worker ever touches these rows, and nothing is left behind. That is the
point of using `db` rather than `transactional_db` here; what a started run does is the
business of tests/runs and tests/reliability.

Bounded for CI: a few examples per operation, hypothesis derandomized (the same cases each
time), no shrinking deadline.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from config.wsgi import application
from tests.api.factories import approval_for
from tests.factories import (
    EntityFactory,
    UserFactory,
    WorkspaceFactory,
    grant,
    make_tool,
    paused_run,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

CONFIG = schemathesis.Config.from_dict(
    {
        "phases": {
            "examples": {"enabled": True},
            "coverage": {"enabled": False},
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": False},
        },
    }
)

CSRF_TOKEN = "schemathesis" + "x" * 20  # a 32-character secret, sent as cookie and header


@pytest.fixture
def world(db, settings_for_the_wsgi_app) -> dict:
    """A workspace with something in it, the user who works there, and a workspace of
    someone else's."""
    acme = WorkspaceFactory(name="Acme", slug="acme")
    globex = WorkspaceFactory(name="Globex", slug="globex")
    sam = grant(UserFactory(username="sam"), acme, "designer", "operator", "approver")
    tool = make_tool(acme, "echo")
    writer = EntityFactory(workspace=acme, name="writer", type="SKILL", tools=[{"tool_id": "echo"}])
    team = EntityFactory(workspace=acme, name="team", type="AGENT", children=[writer])
    run = paused_run(team)
    approval = approval_for(run)
    EntityFactory(workspace=globex, name="globex_bot")
    browser = Client()
    browser.force_login(sam)
    return {
        "ids": {
            "entities": str(team.pk),
            "runs": str(run.pk),
            "approvals": approval.pk,
            "tools": tool.pk,
            "workspaces": "acme",
        },
        "version": "1.0.0",
        "cookies": {"sessionid": browser.cookies["sessionid"].value, "csrftoken": CSRF_TOKEN},
        "headers": {"X-CSRFToken": CSRF_TOKEN},
    }


@pytest.fixture
def settings_for_the_wsgi_app(settings):
    # The WSGI handler closes the database connection around each request; inside the test's
    # transaction that would close it under the test. Django's own test client does the same.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    # The WSGI test client speaks to "localhost".
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "localhost"]
    # A synchronous execute waits for its run; these runs never start (see above).
    if "SYNC_WAIT_SECONDS" in getattr(settings, "HIERARCH_API", {}):
        settings.HIERARCH_API = {**settings.HIERARCH_API, "SYNC_WAIT_SECONDS": 0}
    # Generous throttles: the run sends a few hundred requests in a few seconds.
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "user": "100000/minute",
            "anon": "100000/minute",
        },
    }
    yield settings
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def openapi_document() -> dict:
    """The schema /api/v1/schema/ serves, generated as that view does."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    document = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(document))


# Loaded when the module is collected (schemathesis' lazy `from_fixture` does not run on
# pytest 9), so each operation is a test of its own.
schema = schemathesis.openapi.from_dict(openapi_document(), config=CONFIG)
schema.app = application


def real_ids(path: str, world: dict) -> dict | None:
    """The path's parameters pointing at the workspace's real objects, or None when the
    path has none this test knows."""
    found = re.match(r"^/api/v1/([a-z_]+)/\{(\w+)\}", path)
    if found is None:
        return None
    collection, name = found.groups()
    if collection not in world["ids"]:
        return None
    values = {name: world["ids"][collection]}
    if "{version}" in path:
        values["version"] = world["version"]
    return values


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@schema.parametrize()
def test_every_answer_of_the_api_is_documented_and_never_a_server_error(case, world):
    auth = {"cookies": world["cookies"], "headers": world["headers"]}

    response = case.call(**auth)
    case.validate_response(response, checks=CHECKS)

    real = real_ids(case.path, world)
    if real is not None:
        # The real objects, as the signed-in user: a generated token (the schema also offers
        # Bearer authentication) would be refused before the view is reached.
        case.path_parameters = {**(case.path_parameters or {}), **real}
        case.headers = {
            name: value
            for name, value in (case.headers or {}).items()
            if name.lower() != "authorization"
        }
        response = case.call(**auth)
        case.validate_response(response, checks=CHECKS)


def test_the_schema_run_reaches_the_real_objects(world):
    # The swap above needs each collection's path to be `/api/v1/<collection>/{…}`.
    assert real_ids("/api/v1/entities/{id}/versions/{version}", world) == {
        "id": world["ids"]["entities"],
        "version": "1.0.0",
    }
    assert real_ids("/api/v1/workspaces/{ref}/export", world) == {"ref": "acme"}
    assert real_ids(f"/api/v1/runs/{uuid.uuid4()}", world) is None
