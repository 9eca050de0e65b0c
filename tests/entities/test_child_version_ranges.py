"""A child link's `version` (seed 000 §10.2): null for the newest, an exact version or an
npm-style range. A save refuses one that is not a range, naming the link and the text, and
one no saved version of the child satisfies, naming what it has; hostile text gets a plain
refusal too. A link without one keeps the definitions and snapshots exactly as before."""

from __future__ import annotations

from typing import Any

import pytest

from entities.definition import DefinitionInvalid, Problem
from entities.exchange import definition_of, export_workspace
from entities.models import ChildLink, Entity, EntityVersion
from entities.selectors import entity_definition, entity_upgrades
from entities.services import entities_import, entity_save
from entities.versioning import upgrade_of
from tests.factories import EntityFactory, definition

pytestmark = [pytest.mark.smoke, pytest.mark.django_db]


@pytest.fixture
def writer(acme) -> Entity:
    """Saved as 1.0.0, 1.0.1 (its prompt), 1.1.0 (a tool-less MINOR: an optional output
    field) and 2.0.0 (a MAJOR: a required input field)."""
    entity = EntityFactory(workspace=acme, name="writer")
    data = entity_definition(entity=entity)
    data["identity"]["persona"]["system_prompt"] = "Write better."
    entity_save(workspace=acme, entity=entity, definition=data)
    data["io_contract"]["output"]["schema"] = {
        "type": "object",
        "properties": {"draft": {"type": "string"}},
    }
    entity_save(workspace=acme, entity=entity, definition=data)
    data["io_contract"]["input"]["schema"] = {
        "type": "object",
        "properties": {"tone": {"type": "string"}},
        "required": ["tone"],
    }
    entity = entity_save(workspace=acme, entity=entity, definition=data).entity
    assert entity.version == "2.0.0"
    return entity


def lead(version: Any) -> dict:
    return definition("lead", "AGENT", children=[{"child_id": "writer", "version": version}])


def refused(acme, raw: dict) -> list[Problem]:
    before = (Entity.objects.count(), EntityVersion.objects.count(), ChildLink.objects.count())
    with pytest.raises(DefinitionInvalid) as refusal:
        entity_save(workspace=acme, definition=raw)
    after = (Entity.objects.count(), EntityVersion.objects.count(), ChildLink.objects.count())
    assert after == before
    return refusal.value.problems


@pytest.mark.parametrize("version", ["^1.0.0", "~1.0", ">=1.0.0 <2.0.0", "1.x", "1.0.1", "*"])
def test_a_range_some_saved_version_satisfies_is_saved_and_exported(acme, writer, version):
    saved = entity_save(workspace=acme, definition=lead(version)).entity

    assert ChildLink.objects.get(parent=saved).version == version
    (link,) = definition_of(saved)["hierarchy"]["children"]
    assert link["version"] == version
    exported = export_workspace(acme)["entities"]
    assert [c.get("version") for d in exported for c in d["hierarchy"]["children"]] == [version]


def test_a_link_without_a_version_is_written_as_before(acme, writer):
    saved = entity_save(workspace=acme, definition=lead(None)).entity
    (link,) = definition_of(saved)["hierarchy"]["children"]
    assert "version" not in link

    # Saving it again, with the null written out, is no change: no new version.
    again = entity_save(workspace=acme, entity=saved, definition=lead(None))
    assert again.version is None
    assert ChildLink.objects.get(parent=saved).version == ""


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("^^1", "'^^1' is not a version or a version range"),
        ("latest", "'latest' is not a version or a version range"),
        ("1.2.3.4", "'1.2.3.4' is not a version or a version range"),
        ("01.2.3", "'01.2.3' is not a version or a version range"),
        ("1 - x - 3", "'1 - x - 3' is not a version or a version range"),
        (" 07 - <", "' 07 - <' is not a version or a version range"),  # an AttributeError
        ("", "is empty"),
        ("   ", "is empty"),
        ("^1.0.0\t<2", "holds a control character"),
        ("^1." + "9" * 200, "is too long: at most 100 characters"),
        (5, "must be a string or null, not a number"),
        (["^1.0.0"], "must be a string or null, not a list"),
    ],
)
def test_a_malformed_range_is_refused_naming_the_link_and_the_text(acme, writer, version, message):
    (problem,) = refused(acme, lead(version))

    assert problem.path == "hierarchy.children[0].version"
    assert message in problem.message
    if isinstance(version, str) and len(version) < 100 and version.strip():
        assert "the link to 'writer'" in problem.message


def test_a_nul_byte_is_refused_before_anything_reads_it(acme, writer):
    problems = refused(acme, lead("^1.0.0\x00"))

    assert [p.path for p in problems] == ["hierarchy.children[0].version"]


@pytest.mark.parametrize(
    "version", ["^3.0.0", "0.x", "1.0.2", "^99999999999999999999999999999.0.0", ">2.0.0"]
)
def test_a_range_no_saved_version_satisfies_is_refused_naming_what_the_child_has(
    acme, writer, version
):
    (problem,) = refused(acme, lead(version))

    assert problem.path == "hierarchy.children[0].version"
    assert problem.message == f"no version of 'writer' matches {version}; it has 1.0.0–2.0.0"


def test_two_links_to_one_child_must_name_the_same_version(acme, writer):
    raw = definition(
        "lead",
        "AGENT",
        children=[
            {"child_id": "writer", "version": "^1.0.0"},
            {"child_id": "writer", "version": "^2.0.0"},
        ],
    )

    (problem,) = refused(acme, raw)

    assert problem.path == "hierarchy.children[1].version"
    assert "different versions (^1.0.0 and ^2.0.0)" in problem.message


def test_an_import_may_range_over_a_child_it_creates(acme):
    child = definition("fresh")
    parent = definition("boss", "AGENT", children=[{"child_id": "fresh", "version": "^1.0.0"}])
    entities_import(workspace=acme, definitions=[parent, child])
    assert ChildLink.objects.get(parent__name="boss").version == "^1.0.0"

    with pytest.raises(DefinitionInvalid) as refusal:
        entities_import(
            workspace=acme,
            definitions=[
                definition("boss2", "AGENT", children=[{"child_id": "fresh2", "version": "2.x"}]),
                definition("fresh2"),
            ],
        )
    (problem,) = refusal.value.problems
    assert problem.message == "no version of 'fresh2' matches 2.x; it has only 1.0.0"


def test_the_export_of_a_ranged_link_imports_back_unchanged(acme, writer):
    entity_save(workspace=acme, definition=lead("~1.0"))
    document = export_workspace(acme)

    results = entities_import(workspace=acme, definitions=document["entities"])

    assert all(result.version is None for result in results)
    assert ChildLink.objects.get(parent__name="lead").version == "~1.0"


def test_an_upgrade_is_what_the_range_misses_with_the_kind_of_bump(acme, writer):
    saved = entity_save(workspace=acme, definition=lead("^1.0.0")).entity

    (found,) = entity_upgrades(entity=saved)

    upgrade = found.upgrade
    assert (found.path, found.child.name) == ("hierarchy.children[0]", "writer")
    assert (upgrade.resolved, upgrade.newest, upgrade.change) == ("1.1.0", "2.0.0", "MAJOR")
    assert upgrade.summary == "input field 'tone' is now required"
    assert upgrade.widened == "^2.0.0"
    assert upgrade.text == (
        "pinned ^1.0.0 → 1.1.0; 2.0.0 available (MAJOR: breaks the io contract — input "
        "field 'tone' is now required)"
    )
    # The newest allowed, or no version named: nothing to upgrade.
    for version in ("^2.0.0", None):
        current = entity_save(workspace=acme, entity=saved, definition=lead(version)).entity
        assert entity_upgrades(entity=current) == []


def test_an_upgrade_names_the_smallest_bump_that_describes_it():
    saved = [
        ("1.0.0", "INITIAL", "created"),
        ("1.0.1", "PATCH", "identity changed"),
        ("1.1.0", "MINOR", "tool 'search' added"),
    ]
    assert upgrade_of("1.0.0", saved).change == "MINOR"
    assert upgrade_of("1.0.0", saved).summary == "tool 'search' added"
    assert upgrade_of("~1.0", saved).widened == "~1.1.0"
    assert upgrade_of("1.0.0", saved).widened == "1.1.0"
    assert upgrade_of("1.x", saved) is None
