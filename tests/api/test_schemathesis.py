"""Schemathesis against the whole API, with every check it has: every operation of the
OpenAPI schema at /api/v1/schema/ (whatever endpoints exist when it runs), called through the
WSGI application with an API token of a user who designs, operates and approves in a
workspace with entities, tools, runs and a pending approval.

Every answer must be something other than a 500, with a status code, content type, headers
and body the schema documents; a request the schema calls valid must not be refused as
invalid (400), and one it calls invalid must be refused; an operation that needs
authentication must refuse a request without the token, or with a wrong one (the
`ignored_auth` check sends both); a method the path does not have is a 405 with `Allow`.
The coverage phase adds the boundary cases (page 0, a missing required field, a value just
outside an enum) to the examples and the fuzzed cases.

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
from hypothesis import HealthCheck, Phase, settings
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import positive_data_acceptance

from config.json_input import NOT_FINITE, NUL, SURROGATE
from config.wsgi import application
from governance.tokens import api_token_create
from tests.api.factories import approval_for
from tests.factories import (
    EntityFactory,
    UserFactory,
    WorkspaceFactory,
    grant,
    make_tool,
    paused_run,
)

# Every check is on (schemathesis' default, as `--checks all`), the phases of a CLI run
# except the stateful one: it follows links between operations, and the checks only it runs
# are about deleting (`use_after_free`: the API deletes nothing) and about reading back what a
# POST created (`ensure_resource_availability`), which tests/api/test_entities_api.py does.
CONFIG = schemathesis.Config.from_dict(
    {
        "phases": {
            "examples": {"enabled": True},
            "coverage": {"enabled": True},
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": False},
        },
        # The token is the test's (below), not one schemathesis makes up: a made-up token is
        # refused before the view is reached, and the request tests nothing else.
        "generation": {"with-security-parameters": False},
    }
)

# Fields the API checks against what is stored or what the network says, which no OpenAPI
# schema can know: a run's input against its entity's io_contract, an edit against the
# request's edit_schema, a definition against its section schemas and the rest of the
# workspace (references, cycles, budgets, expressions), a clone's name against the names
# taken, a webhook address against DNS (it must be public). A schema-valid request refused
# with a 400 that names only these fields is the API doing its job; a 400 naming anything
# else fails `positive_data_acceptance` as usual.
CHECKED_AGAINST_STORED_DATA = {
    "POST /api/v1/entities/{id}/execute": ("input_data", "execution_options.webhook_url"),
    "POST /api/v1/approvals/{id}/decision": ("payload",),
    "POST /api/v1/entities": ("definition",),
    "PUT /api/v1/entities/{id}": ("definition",),
    # a name is unique in the workspace (and a child's copy's too)
    "POST /api/v1/entities/{id}/clone": ("name", "children"),
    "POST /api/v1/workspaces/{ref}/import": ("entities",),
}


def _names_only(details: dict, fields: tuple[str, ...]) -> bool:
    return bool(details) and all(
        any(re.match(rf"^{re.escape(field)}(\b|\[|\.|$)", where) for field in fields)
        for where in details
    )


# What the API refuses in any JSON it takes, whatever the schema says (config/json_input.py,
# the README's "Bad input is refused"): text PostgreSQL cannot store (NUL, lone surrogates),
# numbers no encoder holds, nesting past the limit. OpenAPI has no way to say it of every
# string and key, so a schema-valid request refused for these alone, each named where it is,
# is the API doing its job.
UNSTORABLE = (NUL, SURROGATE, NOT_FINITE)


def _unstorable_only(details: dict) -> bool:
    return bool(details) and all(
        isinstance(what, str)
        and (what.removeprefix("a key: ") in UNSTORABLE or what.startswith("is nested deeper"))
        for what in details.values()
    )


def schema_valid_requests_are_accepted(ctx, response, case):
    """`positive_data_acceptance`, except a 400 about the fields above, or about text and
    numbers the API refuses everywhere."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        fields = CHECKED_AGAINST_STORED_DATA.get(f"{case.method.upper()} {case.path}", ())
        if response.status_code == 400:
            details = response.json().get("error", {}).get("details", {})
            if (fields and _names_only(details, fields)) or _unstorable_only(details):
                return None
        raise


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
    _, token = api_token_create(user=sam, name="schemathesis")
    return {
        "ids": {
            "entities": str(team.pk),
            "runs": str(run.pk),
            "approvals": approval.pk,
            "tools": tool.pk,
            "workspaces": "acme",
        },
        "version": "1.0.0",
        "headers": {"Authorization": f"Bearer {token}"},
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
    # `ignored_auth` sends wrong tokens on purpose, a few hundred of them: a login lockout
    # (django-axes, when installed) must not lock the test's client out of its real token.
    settings.AXES_ENABLED = False
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
    every_check = {
        "headers": world["headers"],
        # Replaced by the narrower check above, which runs it.
        "excluded_checks": [positive_data_acceptance],
        "additional_checks": [schema_valid_requests_are_accepted],
    }

    case.call_and_validate(**every_check)

    real = real_ids(case.path, world)
    if real is not None:
        case.path_parameters = {**(case.path_parameters or {}), **real}
        case.call_and_validate(**every_check)


def test_the_schema_run_reaches_the_real_objects(world):
    # The swap above needs each collection's path to be `/api/v1/<collection>/{…}`.
    assert real_ids("/api/v1/entities/{id}/versions/{version}", world) == {
        "id": world["ids"]["entities"],
        "version": "1.0.0",
    }
    assert real_ids("/api/v1/workspaces/{ref}/export", world) == {"ref": "acme"}
    assert real_ids(f"/api/v1/runs/{uuid.uuid4()}", world) is None
