"""The entities API: list and filters, detail, create and update through the admin's
validation and versioning, status, versions and rollback, export and import, and the
workspaces list, as alice (designer in Acme), bob (viewer in Acme) and charlie (designer in
Globex) see them."""

from __future__ import annotations

import copy
import json
import uuid

import pytest

from entities.exchange import definition_of
from entities.models import Entity, EntityVersion
from governance.models import AuditAction, AuditRecord
from tests.api.checks import error_of
from tests.factories import EntityFactory, WorkspaceFactory, definition, grant

pytestmark = pytest.mark.smoke

LIST = "/api/v1/entities"
WORKSPACES = "/api/v1/workspaces"


def detail(entity: Entity) -> str:
    return f"/api/v1/entities/{entity.pk}"


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["name"] for item in response.json()["results"]]


def versions_of(entity: Entity) -> list[str]:
    return list(
        EntityVersion.objects.filter(entity=entity)
        .order_by("created_at", "id")
        .values_list("version", flat=True)
    )


@pytest.fixture
def writer(acme) -> Entity:
    return EntityFactory(
        workspace=acme, name="writer", type="SKILL", metadata={"tags": ["content", "draft"]}
    )


@pytest.fixture
def team(acme, writer) -> Entity:
    return EntityFactory(workspace=acme, name="team", type="AGENT", children=[writer])


@pytest.fixture
def globex_bot(globex) -> Entity:
    return EntityFactory(workspace=globex, name="globex_bot")


# -- the list -----------------------------------------------------------------------------------


def test_the_list_shows_the_entities_of_the_users_workspaces_only(
    api, alice, charlie, team, globex_bot
):
    api.force_login(alice)
    assert names(api.get(LIST)) == ["team", "writer"]
    api.force_login(charlie)
    assert names(api.get(LIST)) == ["globex_bot"]


def test_the_list_says_what_each_entity_is(api, bob, acme, writer):
    api.force_login(bob)

    body = api.get(LIST).json()

    assert body["count"] == 1
    item = body["results"][0]
    assert item["id"] == str(writer.pk)
    assert item["url"] == detail(writer)
    assert item["workspace"] == {"id": acme.pk, "slug": "acme", "name": "Acme"}
    assert item["type"] == "SKILL" and item["status"] == "ACTIVE"
    assert item["version"] == "1.0.0"
    assert item["tags"] == ["content", "draft"]
    assert item["is_atomic"] is True and item["composition_depth"] == 0
    assert "definition" not in item


def test_the_list_filters_by_workspace_type_status_name_words_and_tag(
    api, alice, acme, team, writer
):
    other = WorkspaceFactory(name="Initech", slug="initech")
    grant(alice, other, "designer")
    EntityFactory(workspace=other, name="reporter", metadata={"status": "DRAFT"})
    api.force_login(alice)

    assert names(api.get(LIST, {"workspace": "acme"})) == ["team", "writer"]
    assert names(api.get(LIST, {"workspace": str(other.pk)})) == ["reporter"]
    assert names(api.get(LIST, {"type": "agent"})) == ["team"]
    assert names(api.get(LIST, {"type": "AGENT,SKILL"})) == ["team", "writer"]
    assert names(api.get(LIST, {"status": "DRAFT"})) == ["reporter"]
    assert names(api.get(LIST, {"name": "writer"})) == ["writer"]
    assert names(api.get(LIST, {"q": "TEA"})) == ["team"]
    assert names(api.get(LIST, {"q": "does one thing"})) == ["reporter", "team", "writer"]
    assert names(api.get(LIST, {"tag": "draft"})) == ["writer"]
    assert names(api.get(LIST, {"tag": "dra"})) == []
    assert names(api.get(LIST, {"workspace": "acme", "type": "ACTION"})) == []


def test_bad_filter_values_are_refused_with_a_clear_message(api, alice, writer):
    api.force_login(alice)

    body = error_of(
        api.get(LIST, {"type": "ROBOT", "status": "LIVE,ACTIVE"}), 400, "VALIDATION_ERROR"
    )

    assert body["error"]["details"] == {
        "type": "ROBOT is not a type; use ACTION, SKILL, AGENT, PROCESS",
        "status": "LIVE is not a status; use DRAFT, ACTIVE, DEPRECATED, ARCHIVED",
    }


def test_an_unknown_filter_is_refused_by_name(api, alice, writer):
    api.force_login(alice)

    body = error_of(api.get(LIST, {"kind": "SKILL"}), 400, "VALIDATION_ERROR")

    assert list(body["error"]["details"]) == ["kind"]
    assert "kind: unknown field" in body["error"]["message"]


def test_a_workspace_filter_for_another_workspace_is_refused_as_if_it_did_not_exist(
    api, alice, globex, globex_bot
):
    api.force_login(alice)

    theirs = error_of(api.get(LIST, {"workspace": "globex"}), 404, "NOT_FOUND")
    by_id = error_of(api.get(LIST, {"workspace": str(globex.pk)}), 404, "NOT_FOUND")
    nowhere = error_of(api.get(LIST, {"workspace": "nowhere"}), 404, "NOT_FOUND")

    assert theirs["error"]["details"] == {"workspace": 'no workspace "globex" among yours'}
    assert by_id["error"]["details"] == {"workspace": f'no workspace "{globex.pk}" among yours'}
    assert nowhere["error"]["details"] == {"workspace": 'no workspace "nowhere" among yours'}


def test_the_list_comes_in_pages_in_a_stable_order(api, alice, acme):
    for name in ["delta", "alpha", "charlie", "bravo", "echo"]:
        EntityFactory(workspace=acme, name=name)
    api.force_login(alice)

    first = api.get(LIST, {"page_size": 2}).json()
    second = api.get(LIST, {"page_size": 2, "page": 2}).json()
    third = api.get(LIST, {"page_size": 2, "page": 3}).json()

    assert first["count"] == 5 and "page=2" in first["next"]
    assert [e["name"] for e in first["results"] + second["results"] + third["results"]] == [
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
    ]
    assert third["next"] is None


def test_a_page_that_is_not_a_number_is_refused_and_one_past_the_end_is_not_found(
    api, alice, writer
):
    api.force_login(alice)

    wrong = error_of(api.get(LIST, {"page": "two"}), 400, "VALIDATION_ERROR")
    past = error_of(api.get(LIST, {"page": 5}), 404, "NOT_FOUND")

    assert wrong["error"]["details"] == {"page": "a whole number, 1 or more"}
    assert past["error"]["message"].startswith("page 5 does not exist")


def test_an_anonymous_client_is_asked_to_sign_in(api, writer):
    error_of(api.get(LIST), 401, "NOT_AUTHENTICATED")
    error_of(api.get(detail(writer)), 401, "NOT_AUTHENTICATED")
    error_of(api.post(LIST, {}), 401, "NOT_AUTHENTICATED")


# -- the detail ---------------------------------------------------------------------------------


def test_the_detail_shows_the_current_definition_in_the_exchange_format(api, bob, team, writer):
    api.force_login(bob)

    response = api.get(detail(team))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == str(team.pk) and body["name"] == "team" and body["type"] == "AGENT"
    assert body["version"] == "1.0.0" and body["status"] == "ACTIVE"
    assert body["definition"] == json.loads(json.dumps(definition_of(team)))
    assert body["definition"]["hierarchy"]["children"][0]["child_id"] == str(writer.pk)
    assert body["versions_url"] == f"{detail(team)}/versions"
    assert body["execute_url"] == f"{detail(team)}/execute"
    assert body["export_url"] == f"/api/v1/workspaces/acme/export?root={team.pk}"
    assert body["created_at"] and body["updated_at"]


def test_an_entity_of_another_workspace_is_not_found(api, alice, globex_bot):
    api.force_login(alice)

    theirs = error_of(api.get(detail(globex_bot)), 404, "NOT_FOUND")
    nowhere = error_of(api.get(f"{LIST}/{uuid.uuid4()}"), 404, "NOT_FOUND")

    assert theirs["error"] == {**nowhere["error"], "message": theirs["error"]["message"]}
    assert "globex_bot" not in json.dumps(theirs)


def test_an_id_that_is_not_a_uuid_is_not_an_address(api, alice):
    api.force_login(alice)

    body = error_of(api.get(f"{LIST}/proc-001"), 404, "NOT_FOUND")

    assert body["error"]["message"].startswith("no API endpoint at /api/v1/entities/proc-001")


def test_an_address_with_a_line_break_answers_in_the_error_object(api, alice, writer):
    api.force_login(alice)

    body = error_of(api.get(f"{detail(writer)}/versions/1.0\n0"), 404, "NOT_FOUND")

    assert body["error"]["message"].startswith("no API endpoint at")


# -- create -------------------------------------------------------------------------------------


def test_a_designer_creates_an_entity_validated_and_versioned_as_in_the_admin(api, alice, acme):
    api.force_login(alice)
    sent = definition("summarizer", "ACTION", metadata={"id": "act-007", "tags": ["nlp"]})

    response = api.post(LIST, {"workspace": "acme", "definition": sent})

    assert response.status_code == 201, response.content
    body = response.json()
    entity = Entity.objects.get(workspace=acme, name="summarizer")
    assert response["Location"] == detail(entity)
    assert body["id"] == str(entity.pk) and body["external_id"] == "act-007"
    assert body["version"] == "1.0.0" and body["tags"] == ["nlp"]
    assert body["saved_version"]["version"] == "1.0.0"
    assert body["saved_version"]["change"] == "INITIAL"
    assert body["saved_version"]["created_by"] == "alice"
    assert body["definition"]["identity"]["description"] == "summarizer does one thing well"
    assert versions_of(entity) == ["1.0.0"]
    assert entity.created_by == alice
    assert AuditRecord.objects.filter(
        action=AuditAction.ENTITY_CREATED, object_id=str(entity.pk)
    ).exists()


def test_the_workspace_may_be_given_by_id(api, alice, acme):
    api.force_login(alice)

    response = api.post(LIST, {"workspace": str(acme.pk), "definition": definition("by_id")})

    assert response.status_code == 201, response.content
    assert response.json()["workspace"]["slug"] == "acme"


def test_an_invalid_definition_answers_every_problem_by_its_path_and_saves_nothing(
    api, alice, writer
):
    api.force_login(alice)
    sent = definition(
        "Bad Name!",
        "ROBOT",
        children=["no_such_child"],
        governance={"cost_controls": {"max_cost_usd": -1}},
    )
    sent["colour"] = "red"

    body = error_of(
        api.post(LIST, {"workspace": "acme", "definition": sent}), 400, "VALIDATION_ERROR"
    )

    details = body["error"]["details"]
    assert "must start with a letter or digit" in details["definition.identity.name"]
    assert "ROBOT" in details["definition.metadata.type"]
    assert "is not a section" in details["definition.colour"]
    assert any(key.startswith("definition.governance.cost_controls") for key in details)
    assert all(key.startswith("definition") for key in details)
    assert Entity.objects.count() == 1


def test_a_reference_to_a_missing_child_is_named_by_its_path(api, alice, acme):
    api.force_login(alice)
    sent = definition("lead", "AGENT", children=["nobody"])

    body = error_of(
        api.post(LIST, {"workspace": "acme", "definition": sent}), 400, "VALIDATION_ERROR"
    )

    [(where, problem)] = body["error"]["details"].items()
    assert where.startswith("definition.hierarchy.children[0]")
    assert "nobody" in problem
    assert not Entity.objects.filter(name="lead").exists()


def test_a_name_already_taken_in_the_workspace_is_refused(api, alice, writer):
    api.force_login(alice)

    body = error_of(
        api.post(LIST, {"workspace": "acme", "definition": definition("writer")}),
        400,
        "VALIDATION_ERROR",
    )

    assert "definition.identity.name" in body["error"]["details"]
    assert Entity.objects.filter(name="writer").count() == 1


def test_a_body_with_unknown_or_missing_fields_is_refused_by_name(api, alice, acme):
    api.force_login(alice)

    unknown = error_of(
        api.post(LIST, {"workspace": "acme", "definition": definition("x"), "dry_run": True}),
        400,
        "VALIDATION_ERROR",
    )
    missing = error_of(api.post(LIST, {"workspace": "acme"}), 400, "VALIDATION_ERROR")

    assert list(unknown["error"]["details"]) == ["dry_run"]
    assert "unknown field; this takes definition, workspace" in unknown["error"]["message"]
    assert missing["error"]["details"] == {"definition": "This field is required."}
    assert not Entity.objects.exists()


def test_malformed_json_is_refused(api, alice, acme):
    api.force_login(alice)

    body = error_of(
        api.post(
            LIST, data='{"workspace": "acme", "definition": {', content_type="application/json"
        ),
        400,
        "MALFORMED_JSON",
    )

    assert "JSON parse error" in body["error"]["message"]


def test_text_the_database_cannot_store_is_refused_by_its_path(api, alice, acme):
    api.force_login(alice)
    sent = definition("nul_bytes", identity={"name": "nul_bytes", "description": "a\x00b"})

    body = error_of(
        api.post(LIST, {"workspace": "acme", "definition": sent}), 400, "VALIDATION_ERROR"
    )

    assert body["error"]["details"] == {
        "definition.identity.description": "text may not contain the NUL character (\\u0000)"
    }


def test_a_version_longer_than_its_column_is_refused_not_a_server_error(api, alice, acme):
    api.force_login(alice)
    sent = definition("long_version", metadata={"version": "1" * 25 + ".0.0"})

    created = error_of(
        api.post(LIST, {"workspace": "acme", "definition": sent}), 400, "VALIDATION_ERROR"
    )
    imported = error_of(api.post("/api/v1/workspaces/acme/import", [sent]), 400, "VALIDATION_ERROR")

    assert "at most 20 characters" in created["error"]["details"]["definition.metadata.version"]
    assert "at most 20 characters" in imported["error"]["details"]["entities[0].metadata.version"]
    assert not Entity.objects.exists()


def test_a_viewer_may_read_but_not_create(api, bob, acme):
    api.force_login(bob)

    body = error_of(
        api.post(LIST, {"workspace": "acme", "definition": definition("mine")}),
        403,
        "PERMISSION_DENIED",
    )

    assert body["error"]["message"] == (
        "bob may not create entities in Acme; the designer role (or admin) is needed"
    )
    assert not Entity.objects.exists()


def test_creating_in_another_workspace_is_refused_as_if_it_did_not_exist(api, alice, globex):
    api.force_login(alice)

    body = error_of(
        api.post(LIST, {"workspace": "globex", "definition": definition("spy")}),
        404,
        "NOT_FOUND",
    )

    assert body["error"]["details"] == {"workspace": 'no workspace "globex" among yours'}
    assert not Entity.objects.exists()


def test_a_body_over_the_import_limit_is_refused_before_it_is_read(api, alice, acme, settings):
    settings.HIERARCH_IMPORT_MAX_BYTES = 1000
    api.force_login(alice)
    sent = definition("big", identity={"name": "big", "description": "x" * 990})

    body = error_of(
        api.post(LIST, {"workspace": "acme", "definition": sent}), 413, "PAYLOAD_TOO_LARGE"
    )

    assert "the API takes up to 1,000 bytes" in body["error"]["message"]
    assert not Entity.objects.exists()


# -- update -------------------------------------------------------------------------------------


def test_a_designer_saves_a_changed_definition_as_a_new_version(api, alice, writer):
    api.force_login(alice)
    changed = api.get(detail(writer)).json()["definition"]
    changed["identity"]["description"] = "Writes the first draft"

    response = api.put(detail(writer), {"definition": changed})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["version"] == "1.0.1"
    assert body["saved_version"]["version"] == "1.0.1"
    assert body["saved_version"]["change"] == "PATCH"
    assert body["saved_version"]["summary"] == "identity changed"
    assert body["definition"]["identity"]["description"] == "Writes the first draft"
    writer.refresh_from_db()
    assert writer.description == "Writes the first draft"
    assert versions_of(writer) == ["1.0.0", "1.0.1"]


def test_saving_the_same_definition_keeps_the_version(api, alice, writer):
    api.force_login(alice)
    same = api.get(detail(writer)).json()["definition"]

    body = api.put(detail(writer), {"definition": same}).json()

    assert body["version"] == "1.0.0" and body["saved_version"] is None
    assert versions_of(writer) == ["1.0.0"]


def test_an_invalid_update_answers_the_problems_and_changes_nothing(api, alice, writer):
    api.force_login(alice)
    changed = api.get(detail(writer)).json()["definition"]
    changed["identity"]["description"] = "x" * 1001
    changed["observability"] = {"log_level": "LOUD"}

    body = error_of(api.put(detail(writer), {"definition": changed}), 400, "VALIDATION_ERROR")

    details = body["error"]["details"]
    assert "1000" in details["definition.identity.description"], details
    assert "known fields: logging" in details["definition.observability.log_level"], details
    writer.refresh_from_db()
    assert writer.description == "writer does one thing well"
    assert versions_of(writer) == ["1.0.0"]


def test_an_entitys_type_never_changes(api, alice, writer):
    api.force_login(alice)
    changed = api.get(detail(writer)).json()["definition"]
    changed["metadata"]["type"] = "AGENT"

    body = error_of(api.put(detail(writer), {"definition": changed}), 400, "VALIDATION_ERROR")

    assert body["error"]["details"] == {
        "definition.metadata.type": "cannot change from SKILL to AGENT: an entity's type never "
        "changes; create a new entity instead"
    }
    writer.refresh_from_db()
    assert writer.type == "SKILL"


def test_an_update_naming_another_entity_in_its_metadata_id_is_refused(api, alice, team, writer):
    api.force_login(alice)
    changed = api.get(detail(writer)).json()["definition"]
    changed["metadata"]["id"] = str(team.pk)

    body = error_of(api.put(detail(writer), {"definition": changed}), 400, "VALIDATION_ERROR")

    assert list(body["error"]["details"]) == ["definition.metadata.id"]
    assert versions_of(writer) == ["1.0.0"]


def test_an_update_takes_only_the_definition(api, alice, writer):
    api.force_login(alice)
    same = api.get(detail(writer)).json()["definition"]

    body = error_of(
        api.put(detail(writer), {"workspace": "acme", "definition": same}),
        400,
        "VALIDATION_ERROR",
    )

    assert list(body["error"]["details"]) == ["workspace"]


def test_a_viewer_may_not_update_and_another_workspace_is_not_found(
    api, bob, charlie, writer, globex_bot
):
    api.force_login(bob)
    same = api.get(detail(writer)).json()["definition"]
    same["identity"]["description"] = "bob was here"

    refused = error_of(api.put(detail(writer), {"definition": same}), 403, "PERMISSION_DENIED")
    api.force_login(charlie)
    hidden = error_of(api.put(detail(writer), {"definition": same}), 404, "NOT_FOUND")

    assert "the designer role" in refused["error"]["message"]
    assert "writer" not in json.dumps(hidden)
    writer.refresh_from_db()
    assert writer.description == "writer does one thing well"


# -- status -------------------------------------------------------------------------------------


def test_a_designer_moves_an_entity_to_another_status(api, alice, writer):
    api.force_login(alice)

    response = api.post(
        f"{detail(writer)}/status", {"status": "deprecated", "reason": "superseded"}
    )

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "DEPRECATED"
    writer.refresh_from_db()
    assert writer.status == "DEPRECATED"
    change = writer.status_changes.first()
    assert (change.from_status, change.to_status, change.reason) == (
        "ACTIVE",
        "DEPRECATED",
        "superseded",
    )


def test_a_status_the_entity_cannot_move_to_is_refused_naming_the_ones_it_can(api, alice, writer):
    api.force_login(alice)
    api.post(f"{detail(writer)}/status", {"status": "ARCHIVED"})

    # The status is a real one; the entity's current status refuses it: a conflict.
    wrong = error_of(api.post(f"{detail(writer)}/status", {"status": "ACTIVE"}), 409, "CONFLICT")
    again = error_of(api.post(f"{detail(writer)}/status", {"status": "ARCHIVED"}), 409, "CONFLICT")
    unknown = error_of(
        api.post(f"{detail(writer)}/status", {"status": "LIVE"}), 400, "VALIDATION_ERROR"
    )

    assert wrong["error"]["details"] == {
        "status": "cannot go from ARCHIVED to ACTIVE; from ARCHIVED an entity can go to DRAFT"
    }
    assert again["error"]["details"] == {"status": "the entity is already ARCHIVED"}
    assert unknown["error"]["details"] == {
        "status": '"LIVE" is not a status; use one of DRAFT, ACTIVE, DEPRECATED, ARCHIVED'
    }


def test_a_viewer_may_not_change_the_status(api, bob, writer):
    api.force_login(bob)

    error_of(api.post(f"{detail(writer)}/status", {"status": "DRAFT"}), 403, "PERMISSION_DENIED")

    writer.refresh_from_db()
    assert writer.status == "ACTIVE"


# -- versions and rollback ----------------------------------------------------------------------


@pytest.fixture
def revised(alice, writer) -> Entity:
    """The writer at 1.0.1, with a new description."""
    from entities.services import entity_save

    changed = definition_of(writer)
    changed["identity"]["description"] = "Writes the first draft"
    return entity_save(
        workspace=writer.workspace, definition=changed, user=alice, entity=writer
    ).entity


def test_the_version_history_is_listed_newest_first(api, bob, revised):
    api.force_login(bob)

    body = api.get(f"{detail(revised)}/versions").json()

    assert body["count"] == 2
    newest, oldest = body["results"]
    assert (newest["version"], newest["change"], newest["created_by"]) == (
        "1.0.1",
        "PATCH",
        "alice",
    )
    assert (oldest["version"], oldest["change"], oldest["created_by"]) == ("1.0.0", "INITIAL", None)
    assert newest["url"] == f"{detail(revised)}/versions/1.0.1"
    assert newest["created_at"] and newest["summary"] == "identity changed"


def test_a_version_shows_its_snapshot(api, bob, revised):
    api.force_login(bob)

    body = api.get(f"{detail(revised)}/versions/1.0.0").json()

    assert body["version"] == "1.0.0" and body["entity"] == str(revised.pk)
    assert body["definition"]["identity"]["description"] == "writer does one thing well"
    assert body["rollback_url"] == f"{detail(revised)}/versions/1.0.0/rollback"


def test_a_version_that_does_not_exist_is_not_found(api, bob, revised, globex_bot):
    api.force_login(bob)

    error_of(api.get(f"{detail(revised)}/versions/9.9.9"), 404, "NOT_FOUND")
    error_of(api.get(f"{detail(globex_bot)}/versions"), 404, "NOT_FOUND")
    error_of(api.get(f"{detail(globex_bot)}/versions/1.0.0"), 404, "NOT_FOUND")
    error_of(api.get(f"{detail(revised)}/versions/latest"), 404, "NOT_FOUND")


def test_a_rollback_restores_a_snapshot_as_a_new_version(api, alice, revised):
    api.force_login(alice)

    response = api.post(f"{detail(revised)}/versions/1.0.0/rollback")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["version"] == "1.0.2"
    assert body["saved_version"]["version"] == "1.0.2"
    assert body["definition"]["identity"]["description"] == "writer does one thing well"
    assert versions_of(revised) == ["1.0.0", "1.0.1", "1.0.2"]
    assert AuditRecord.objects.filter(
        action=AuditAction.ENTITY_ROLLED_BACK, object_id=str(revised.pk)
    ).exists()


def test_rolling_back_to_what_the_entity_already_is_writes_nothing(api, alice, revised):
    api.force_login(alice)

    body = api.post(f"{detail(revised)}/versions/1.0.1/rollback").json()

    assert body["version"] == "1.0.1" and body["saved_version"] is None
    assert versions_of(revised) == ["1.0.0", "1.0.1"]


def test_a_viewer_may_not_roll_back_and_another_workspace_is_not_found(api, bob, charlie, revised):
    api.force_login(bob)
    error_of(api.post(f"{detail(revised)}/versions/1.0.0/rollback"), 403, "PERMISSION_DENIED")
    api.force_login(charlie)
    error_of(api.post(f"{detail(revised)}/versions/1.0.0/rollback"), 404, "NOT_FOUND")

    assert versions_of(revised) == ["1.0.0", "1.0.1"]


# -- export and import --------------------------------------------------------------------------


def export(api, ref: str, **params) -> dict:
    response = api.get(f"/api/v1/workspaces/{ref}/export", params)
    assert response.status_code == 200, response.content
    return response.json()


def test_an_export_imports_into_another_workspace_and_exports_the_same(api, alice, acme, team):
    initech = WorkspaceFactory(name="Initech", slug="initech")
    grant(alice, initech, "designer")
    api.force_login(alice)
    document = export(api, "acme")

    response = api.post("/api/v1/workspaces/initech/import", document)

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["imported"], body["created"], body["updated"], body["unchanged"]) == (2, 2, 0, 0)
    assert body["workspace"]["slug"] == "initech"
    assert sorted(e["name"] for e in body["entities"]) == ["team", "writer"]
    again = export(api, str(initech.pk))

    def content(doc: dict) -> list[dict]:
        out = []
        for item in doc["entities"]:
            item = copy.deepcopy(item)
            for key in ("id", "created_at", "updated_at", "created_by"):
                item["metadata"].pop(key)
            item["hierarchy"]["children"] = [c["child_type"] for c in item["hierarchy"]["children"]]
            out.append(item)
        return out

    assert content(again) == content(document)
    copied = Entity.objects.get(workspace=initech, name="team")
    assert copied.child_links.get().child == Entity.objects.get(workspace=initech, name="writer")


def test_importing_an_export_into_its_own_workspace_changes_nothing(api, alice, team):
    api.force_login(alice)

    body = api.post("/api/v1/workspaces/acme/import", export(api, "acme")).json()

    assert (body["imported"], body["created"], body["updated"], body["unchanged"]) == (2, 0, 0, 2)
    assert versions_of(team) == ["1.0.0"]


def test_an_import_takes_a_list_of_definitions_and_updates_by_name(api, alice, writer):
    api.force_login(alice)
    changed = definition("writer", "SKILL", identity={"description": "Now imported"})

    body = api.post("/api/v1/workspaces/acme/import", [changed, definition("helper")]).json()

    assert (body["created"], body["updated"]) == (1, 1)
    writer.refresh_from_db()
    assert writer.description == "Now imported" and writer.version == "1.0.1"


def test_an_export_of_a_root_holds_it_and_everything_below_it(api, bob, acme, team, writer):
    EntityFactory(workspace=acme, name="loner")
    api.force_login(bob)

    by_id = export(api, "acme", root=str(team.pk))
    by_name = export(api, "acme", root="writer")

    assert [d["identity"]["name"] for d in by_id["entities"]] == ["team", "writer"]
    assert [d["identity"]["name"] for d in by_name["entities"]] == ["writer"]
    missing = error_of(
        api.get("/api/v1/workspaces/acme/export", {"root": "nobody"}), 404, "NOT_FOUND"
    )
    assert missing["error"]["details"] == {"root": 'no entity "nobody" in acme'}


def test_an_invalid_import_names_each_definitions_problems_and_saves_nothing(api, alice, writer):
    api.force_login(alice)
    bundle = {
        "entities": [
            definition("fine_one"),
            definition("Bad Name!"),
            definition("lead", "AGENT", children=["ghost"]),
        ]
    }

    body = error_of(api.post("/api/v1/workspaces/acme/import", bundle), 400, "VALIDATION_ERROR")

    details = body["error"]["details"]
    assert "entities[1].identity.name" in details
    assert "(Bad Name!)" in details["entities[1].identity.name"]
    assert any(key.startswith("entities[2].hierarchy.children[0]") for key in details)
    assert not any(key.startswith("entities[0]") for key in details)
    assert sorted(Entity.objects.values_list("name", flat=True)) == ["writer"]


def test_an_import_body_that_holds_no_definitions_is_refused(api, alice, acme):
    api.force_login(alice)

    empty = error_of(api.post("/api/v1/workspaces/acme/import", []), 400, "VALIDATION_ERROR")
    text = error_of(api.post("/api/v1/workspaces/acme/import", "hello"), 400, "VALIDATION_ERROR")
    broken = error_of(
        api.post("/api/v1/workspaces/acme/import", {"entities": "all"}), 400, "VALIDATION_ERROR"
    )

    assert empty["error"]["details"] == {"entities": "the body holds no entity definitions"}
    assert "must hold an entity definition" in text["error"]["details"]["entities"]
    assert broken["error"]["details"] == {
        "entities": '"entities" must be a list of entity definitions'
    }


def test_an_import_over_the_limit_is_refused(api, alice, acme, settings):
    settings.HIERARCH_IMPORT_MAX_BYTES = 500
    api.force_login(alice)

    body = error_of(
        api.post("/api/v1/workspaces/acme/import", [definition("a"), definition("b")]),
        413,
        "PAYLOAD_TOO_LARGE",
    )

    assert "500 bytes" in body["error"]["message"]
    assert not Entity.objects.exists()


def test_a_viewer_may_export_but_not_import(api, bob, writer):
    api.force_login(bob)

    assert export(api, "acme")["entities"][0]["identity"]["name"] == "writer"
    body = error_of(
        api.post("/api/v1/workspaces/acme/import", [definition("x")]), 403, "PERMISSION_DENIED"
    )
    assert "may not import entities in Acme" in body["error"]["message"]


def test_another_workspace_cannot_be_exported_or_imported_into(api, alice, globex, globex_bot):
    api.force_login(alice)

    error_of(api.get("/api/v1/workspaces/globex/export"), 404, "NOT_FOUND")
    error_of(api.get(f"/api/v1/workspaces/{globex.pk}/export"), 404, "NOT_FOUND")
    error_of(api.post("/api/v1/workspaces/globex/import", [definition("x")]), 404, "NOT_FOUND")
    assert list(Entity.objects.filter(workspace=globex)) == [globex_bot]


# -- workspaces ---------------------------------------------------------------------------------


def test_the_workspaces_list_shows_the_users_roles_and_what_they_allow(api, alice, acme, globex):
    initech = WorkspaceFactory(name="Initech", slug="initech")
    grant(alice, initech, "viewer", "operator")
    api.force_login(alice)

    body = api.get(WORKSPACES).json()

    assert body["results"] == [
        {
            "id": acme.pk,
            "slug": "acme",
            "name": "Acme",
            "roles": ["designer"],
            "can": ["view", "design"],
            "export_url": "/api/v1/workspaces/acme/export",
            "import_url": "/api/v1/workspaces/acme/import",
        },
        {
            "id": initech.pk,
            "slug": "initech",
            "name": "Initech",
            "roles": ["operator", "viewer"],
            "can": ["view", "operate"],
            "export_url": "/api/v1/workspaces/initech/export",
            "import_url": "/api/v1/workspaces/initech/import",
        },
    ]


def test_a_superuser_sees_every_workspace_and_may_do_everything(api, root, acme, globex):
    api.force_login(root)

    body = api.get(WORKSPACES).json()

    assert [w["slug"] for w in body["results"]] == ["acme", "globex"]
    assert body["results"][0]["roles"] == []
    assert body["results"][0]["can"] == ["view", "design", "operate", "approve", "administer"]


def test_the_documented_examples_are_accepted(api, alice, acme):
    api.force_login(alice)
    paths = api.get("/api/v1/schema/", {"format": "json"}).json()["paths"]

    def example(path: str, name: str) -> dict:
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]
        return body["examples"][name]["value"]

    created = api.post(LIST, example("/api/v1/entities", "AnAction"))
    imported = api.post(
        "/api/v1/workspaces/acme/import", example("/api/v1/workspaces/{ref}/import", "AnExport")
    )

    assert created.status_code == 201, created.content
    assert imported.status_code == 200, imported.content
    assert sorted(Entity.objects.values_list("name", flat=True)) == ["imported", "summarize_text"]
