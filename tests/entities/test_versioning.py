"""Versions (seed 000 §10.1) and status (§3.1): SemVer bumps, immutable snapshots, rollback,
audited status transitions."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from entities.definition import DefinitionInvalid
from entities.models import Entity, EntityStatusChange, EntityVersion
from entities.services import entity_rollback, entity_save, entity_set_status
from entities.versioning import classify
from tests.factories import EntityFactory, definition, make_tool


def base() -> dict:
    """v1.0.0 of `writer`: one optional input, one guaranteed output, no tools or children."""
    return definition(
        "writer",
        "SKILL",
        io_contract={
            "input": {"schema": {"type": "object", "properties": {"topic": {"type": "string"}}}},
            "output": {
                "schema": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}, "words": {"type": "integer"}},
                    "required": ["text"],
                }
            },
        },
    )


@pytest.fixture
def writer(acme) -> Entity:
    return entity_save(workspace=acme, definition=base()).entity


def save(entity: Entity, raw: dict) -> EntityVersion | None:
    """Save a change to `entity` as a fresh form or request would: from the stored row.

    Returns the new version, or None when nothing changed.
    """
    stored = Entity.objects.get(pk=entity.pk)
    return entity_save(workspace=stored.workspace, definition=raw, entity=stored).version


def changed(**edits: Any) -> dict:
    """The base definition with `edits` applied: `{"io_contract.input.schema": {...}}`."""
    raw = base()
    for dotted, value in edits.items():
        *parents, last = dotted.split(".")
        node = raw
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return raw


def input_schema(**properties: Any) -> dict:
    return {"type": "object", "properties": properties}


def test_a_new_entity_starts_at_its_initial_version(writer):
    (version,) = writer.versions.all()

    assert (writer.version, version.version, version.change) == ("1.0.0", "1.0.0", "INITIAL")
    assert version.definition["identity"]["name"] == "writer"


# MAJOR: the io_contract breaks callers


def test_a_new_required_input_field_is_a_major_change(writer):
    schema = input_schema(topic={"type": "string"}, tone={"type": "string"})
    schema["required"] = ["tone"]

    version = save(writer, changed(**{"io_contract.input.schema": schema}))

    assert (version.version, version.change) == ("2.0.0", "MAJOR")
    assert "input field 'tone' is now required" in version.summary
    assert Entity.objects.get(pk=writer.pk).version == "2.0.0"


def test_making_an_optional_input_field_required_is_a_major_change(writer):
    schema = input_schema(topic={"type": "string"})
    schema["required"] = ["topic"]

    version = save(writer, changed(**{"io_contract.input.schema": schema}))

    assert (version.version, version.change) == ("2.0.0", "MAJOR")


def test_a_removed_output_field_is_a_major_change(writer):
    output = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    version = save(writer, changed(**{"io_contract.output.schema": output}))

    assert (version.version, version.change) == ("2.0.0", "MAJOR")
    assert "output field 'words' was removed" in version.summary


def test_a_changed_field_type_is_a_major_change(writer):
    schema = input_schema(topic={"type": "integer"})

    version = save(writer, changed(**{"io_contract.input.schema": schema}))

    assert (version.version, version.change) == ("2.0.0", "MAJOR")
    assert "type changed from string to integer" in version.summary


def test_a_breaking_change_outweighs_an_added_capability(acme, writer):
    make_tool(acme, "echo")
    raw = changed(**{"io_contract.input.schema": input_schema()})
    raw["capabilities"]["tools"] = [{"tool_id": "echo"}]

    version = save(writer, raw)

    assert (version.version, version.change) == ("2.0.0", "MAJOR")


# MINOR: capabilities added


def test_an_added_tool_is_a_minor_change(acme, writer):
    make_tool(acme, "echo")
    raw = base()
    raw["capabilities"]["tools"] = [{"tool_id": "echo"}]

    version = save(writer, raw)

    assert (version.version, version.change) == ("1.1.0", "MINOR")
    assert "tool 'echo' added" in version.summary


def test_an_added_child_is_a_minor_change(acme, writer):
    helper = EntityFactory(workspace=acme, name="helper")
    raw = base()
    raw["hierarchy"]["children"] = [{"child_id": "helper"}]

    version = save(writer, raw)

    assert (version.version, version.change) == ("1.1.0", "MINOR")
    assert f"child {helper.ref!r} added" in version.summary


def test_an_added_plan_step_is_a_minor_change(writer):
    raw = base()
    raw["planning"] = {
        "static_plan": {
            "enabled": True,
            "steps": [
                {
                    "step_id": "draft",
                    "order": 1,
                    "name": "Draft",
                    "type": "THOUGHT",
                    "target": {"prompt_template": "Write about {topic}"},
                }
            ],
        }
    }

    version = save(writer, raw)

    assert (version.version, version.change) == ("1.1.0", "MINOR")
    assert "plan step 'Draft' added" in version.summary


def test_an_added_optional_input_field_is_a_minor_change(writer):
    schema = input_schema(topic={"type": "string"}, tone={"type": "string"})

    version = save(writer, changed(**{"io_contract.input.schema": schema}))

    assert (version.version, version.change) == ("1.1.0", "MINOR")
    assert "optional input field 'tone' added" in version.summary


# PATCH: anything else


def test_a_description_change_is_a_patch(writer):
    version = save(writer, changed(**{"identity.description": "Writes short texts"}))

    assert (version.version, version.change) == ("1.0.1", "PATCH")
    assert Entity.objects.get(pk=writer.pk).description == "Writes short texts"


def test_a_temperature_change_is_a_patch(writer):
    version = save(writer, changed(**{"logic_gate.reasoning_config": {"temperature": 0.1}}))

    assert (version.version, version.change) == ("1.0.1", "PATCH")
    assert version.definition["logic_gate"]["reasoning_config"]["temperature"] == 0.1


def test_patches_and_minors_accumulate(acme, writer):
    make_tool(acme, "echo")
    save(writer, changed(**{"identity.description": "one"}))
    raw = changed(**{"identity.description": "one"})
    raw["capabilities"]["tools"] = [{"tool_id": "echo"}]
    save(writer, raw)
    raw["identity"]["description"] = "two"
    save(writer, raw)

    assert list(writer.versions.order_by("id").values_list("version", flat=True)) == [
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "1.1.1",
    ]


def test_an_unchanged_save_makes_no_new_version(writer):
    save(writer, changed(**{"identity.description": "edited"}))
    stored = Entity.objects.get(pk=writer.pk)

    result = entity_save(
        workspace=writer.workspace,
        definition=changed(**{"identity.description": "edited"}),
        entity=stored,
    )

    assert result.version is None
    assert not result.changed
    assert writer.versions.count() == 2
    assert Entity.objects.get(pk=writer.pk).version == "1.0.1"


def test_the_rules_do_not_need_a_database():
    old = base()
    new = copy.deepcopy(old)
    new["metadata"]["version"] = "9.9.9"
    new["metadata"]["status"] = "DEPRECATED"
    assert classify(old, new).kind == "NONE"

    new["identity"]["display_name"] = "Writer"
    assert classify(old, new).kind == "PATCH"

    new["io_contract"]["output"]["schema"]["required"] = []
    assert classify(old, new).kind == "MAJOR"
    assert "output field 'text' is no longer guaranteed" in classify(old, new).summary


# Status: audited, never a version


def test_a_status_only_save_makes_no_version(writer):
    version = save(writer, changed(**{"metadata.status": "DEPRECATED"}))

    assert version is None
    assert writer.versions.count() == 1
    assert Entity.objects.get(pk=writer.pk).status == "DEPRECATED"


def test_a_status_change_in_a_saved_definition_is_audited(writer):
    save(writer, changed(**{"metadata.status": "DEPRECATED"}))

    latest = writer.status_changes.order_by("-id").first()
    assert (latest.from_status, latest.to_status) == ("ACTIVE", "DEPRECATED")


def test_a_new_entity_records_its_first_status(writer):
    (change,) = writer.status_changes.all()

    assert (change.from_status, change.to_status, change.reason) == ("", "ACTIVE", "created")


def test_setting_a_status_is_audited_without_a_version(writer, alice):
    change = entity_set_status(entity=writer, status="DEPRECATED", user=alice, reason="replaced")

    assert (change.from_status, change.to_status) == ("ACTIVE", "DEPRECATED")
    assert change.changed_by == alice
    assert change.reason == "replaced"
    assert Entity.objects.get(pk=writer.pk).status == "DEPRECATED"
    assert writer.versions.count() == 1


@pytest.mark.parametrize(
    ("path", "target"),
    [
        (["DRAFT"], "ACTIVE"),
        (["DRAFT"], "ARCHIVED"),
        ([], "DRAFT"),
        ([], "DEPRECATED"),
        ([], "ARCHIVED"),
        (["DEPRECATED"], "ACTIVE"),
        (["DEPRECATED"], "ARCHIVED"),
        (["ARCHIVED"], "DRAFT"),
    ],
)
def test_it_allows_each_permitted_status_transition(writer, path, target):
    for status in path:
        entity_set_status(entity=writer, status=status)
    source = Entity.objects.get(pk=writer.pk).status

    entity_set_status(entity=writer, status=target)

    latest = writer.status_changes.order_by("-id").first()
    assert (latest.from_status, latest.to_status) == (source, target)


def test_it_refuses_archived_to_active_naming_the_allowed_transitions(writer):
    entity_set_status(entity=writer, status="ARCHIVED")
    audited = writer.status_changes.count()

    with pytest.raises(DefinitionInvalid) as refusal:
        entity_set_status(entity=writer, status="ACTIVE")

    (problem,) = refusal.value.problems
    assert problem.path == "metadata.status"
    assert problem.message == (
        "cannot go from ARCHIVED to ACTIVE; from ARCHIVED an entity can go to DRAFT"
    )
    assert Entity.objects.get(pk=writer.pk).status == "ARCHIVED"
    assert writer.status_changes.count() == audited


def test_it_refuses_draft_to_deprecated(writer):
    entity_set_status(entity=writer, status="DRAFT")

    with pytest.raises(DefinitionInvalid, match="from DRAFT an entity can go to ACTIVE, ARCHIVED"):
        entity_set_status(entity=writer, status="DEPRECATED")


def test_it_refuses_a_status_transition_in_a_saved_definition(writer):
    entity_set_status(entity=writer, status="ARCHIVED")
    archived = Entity.objects.get(pk=writer.pk)

    with pytest.raises(DefinitionInvalid) as refusal:
        save(archived, changed(**{"metadata.status": "ACTIVE"}))

    assert [(p.path, p.message) for p in refusal.value.problems] == [
        (
            "metadata.status",
            "cannot go from ARCHIVED to ACTIVE; from ARCHIVED an entity can go to DRAFT",
        )
    ]
    assert Entity.objects.get(pk=writer.pk).status == "ARCHIVED"


# A caller may hold an Entity read before another change: the service works from the row.


def test_a_stale_instance_cannot_revive_an_archived_entity(writer):
    entity_set_status(entity=writer, status="ARCHIVED")  # `writer` still says ACTIVE

    with pytest.raises(DefinitionInvalid, match="cannot go from ARCHIVED to ACTIVE"):
        entity_save(
            workspace=writer.workspace,
            definition=changed(**{"identity.description": "edited in a tab opened earlier"}),
            entity=writer,
        )

    assert Entity.objects.get(pk=writer.pk).status == "ARCHIVED"


def test_two_saves_through_one_instance_each_bump_the_version(writer):
    for description in ("first edit", "second edit"):
        entity_save(
            workspace=writer.workspace,
            definition=changed(**{"identity.description": description}),
            entity=writer,
        )

    assert Entity.objects.get(pk=writer.pk).version == "1.0.2"


def test_it_refuses_a_status_that_does_not_exist(writer):
    with pytest.raises(DefinitionInvalid, match="'LIVE' is not a status"):
        entity_set_status(entity=writer, status="LIVE")


def test_it_refuses_the_status_an_entity_already_has(writer):
    with pytest.raises(DefinitionInvalid, match="already ACTIVE"):
        entity_set_status(entity=writer, status="ACTIVE")


# Snapshots and rollback


def test_a_version_snapshot_cannot_be_saved_again(writer):
    snapshot = writer.versions.get()
    snapshot.summary = "rewritten history"

    with pytest.raises(ValueError, match="immutable"):
        snapshot.save()

    assert EntityVersion.objects.get(pk=snapshot.pk).summary == "created"


def test_a_snapshot_keeps_the_definition_it_was_taken_from(writer):
    first = writer.versions.get()
    taken = copy.deepcopy(first.definition)

    save(writer, changed(**{"identity.description": "later"}))

    assert EntityVersion.objects.get(pk=first.pk).definition == taken
    assert taken["identity"]["description"] == "writer does one thing well"


def first_version(entity: Entity) -> EntityVersion:
    """The initial snapshot, loaded on its own as the admin's restore action loads it."""
    return EntityVersion.objects.get(entity_id=entity.pk, change="INITIAL")


def test_rollback_restores_a_snapshot_as_a_new_version(writer):
    first = first_version(writer)
    save(writer, changed(**{"identity.description": "later"}))
    save(writer, changed(**{"identity.description": "later still"}))

    result = entity_rollback(version=first)

    assert (result.version.version, result.version.change) == ("1.0.3", "PATCH")
    assert result.entity.description == "writer does one thing well"
    assert result.version.definition["identity"] == first.definition["identity"]
    assert list(writer.versions.order_by("id").values_list("version", flat=True)) == [
        "1.0.0",
        "1.0.1",
        "1.0.2",
        "1.0.3",
    ]


def test_rollback_across_a_breaking_change_is_itself_a_major_change(writer):
    first = first_version(writer)
    schema = input_schema(topic={"type": "string"}, tone={"type": "string"})
    save(writer, changed(**{"io_contract.input.schema": schema}))  # 1.1.0

    result = entity_rollback(version=first)

    assert (result.version.version, result.version.change) == ("2.0.0", "MAJOR")
    assert "input field 'tone' was removed" in result.version.summary
    stored = Entity.objects.get(pk=writer.pk)
    assert stored.io_contract["input"]["schema"]["properties"] == {"topic": {"type": "string"}}


def test_rollback_keeps_the_current_status(writer):
    first = first_version(writer)
    save(writer, changed(**{"identity.description": "later"}))
    entity_set_status(entity=writer, status="DEPRECATED")

    result = entity_rollback(version=first)

    assert result.entity.status == "DEPRECATED"
    assert EntityStatusChange.objects.filter(entity=writer).count() == 2
