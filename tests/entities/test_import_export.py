"""Import and export in the seed's JSON format, and the commands around them."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from entities.definition import DefinitionInvalid
from entities.exchange import (
    ImportFileError,
    export_workspace,
    read_import_bytes,
    read_import_file,
)
from entities.models import ChildLink, Entity, EntityVersion, Membership, Workspace
from entities.services import entities_import
from governance.permissions import DESIGN, OPERATE, VIEW, has_perm
from tests.factories import definition
from tools.models import Tool

pytestmark = [pytest.mark.smoke]

FIXTURE = Path(__file__).resolve().parents[2] / "entities" / "fixtures" / "video_ad_process.json"
DEMO_NAMES = {
    "video_ad_creation_process",
    "content_analyst_agent",
    "creative_director_agent",
    "video_production_agent",
    "information_extraction_skill",
    "selling_points_skill",
    "script_writing_skill",
    "video_rendering_skill",
    "nlp_parsing_action",
    "validate_extracted_data_action",
    "selling_points_reasoning_action",
    "script_generation_action",
    "video_render_action",
    "asset_upload_action",
}


def run(command: str, *args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def export(slug: str, *args: str) -> str:
    return run("export_entities", "--workspace", slug, *args)[0]


def names(document: dict) -> set[str]:
    return {entity["identity"]["name"] for entity in document["entities"]}


def write(tmp_path: Path, content: Any, name: str = "bundle.json") -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


@pytest.fixture
def demo(db) -> Workspace:
    workspace = Workspace.objects.create(name="Demo", slug="demo")
    entities_import(workspace=workspace, definitions=read_import_file(FIXTURE))
    return workspace


# Round trip


def test_the_demo_fixture_round_trips_through_a_new_workspace(db, tmp_path):
    run("import_entities", str(FIXTURE), "--workspace", "first")
    first = export("first")
    run("import_entities", write(tmp_path, first), "--workspace", "second")

    second = export("second")

    assert second == first
    document = json.loads(first)
    assert names(document) == DEMO_NAMES
    assert Entity.objects.filter(workspace__slug="second").count() == len(DEMO_NAMES)
    assert Tool.objects.filter(workspace__slug="second").count() == 5


def test_the_export_keeps_the_fixtures_string_ids_and_links(demo):
    document = export_workspace(demo)

    by_name = {e["identity"]["name"]: e for e in document["entities"]}
    process = by_name["video_ad_creation_process"]
    assert process["metadata"]["id"] == "proc-001"
    assert [c["child_id"] for c in process["hierarchy"]["children"]] == [
        "agent-001",
        "agent-002",
        "agent-003",
    ]
    assert [s["target"]["entity_id"] for s in process["planning"]["static_plan"]["steps"]] == [
        "agent-001",
        "agent-002",
        "agent-003",
    ]
    assert Entity.objects.get(workspace=demo, name="content_analyst_agent").external_id == (
        "agent-001"
    )


def test_the_export_normalises_the_seeds_property_level_required(demo):
    by_name = {e["identity"]["name"]: e for e in export_workspace(demo)["entities"]}

    schema = by_name["video_ad_creation_process"]["io_contract"]["input"]["schema"]
    assert schema["required"] == ["job_description", "company_name"]
    assert all("required" not in prop for prop in schema["properties"].values())


def test_reimporting_the_same_file_changes_nothing(demo):
    before = export_workspace(demo)
    versions = EntityVersion.objects.count()

    results = entities_import(workspace=demo, definitions=read_import_file(FIXTURE))

    assert not any(result.changed for result in results)
    assert EntityVersion.objects.count() == versions
    assert export_workspace(demo) == before


def test_reimporting_an_export_changes_nothing(demo):
    before = export_workspace(demo)
    versions = EntityVersion.objects.count()

    results = entities_import(workspace=demo, definitions=before["entities"])

    assert not any(result.changed for result in results)
    assert EntityVersion.objects.count() == versions
    assert export_workspace(demo) == before


def test_an_export_with_a_root_contains_only_that_subtree(demo):
    document = json.loads(export("demo", "--root", "content_analyst_agent"))

    assert names(document) == {
        "content_analyst_agent",
        "information_extraction_skill",
        "selling_points_skill",
        "nlp_parsing_action",
        "validate_extracted_data_action",
        "selling_points_reasoning_action",
    }
    assert document["entities"][0]["identity"]["name"] == "content_analyst_agent"


def test_an_export_of_a_leaf_contains_only_the_leaf(demo):
    document = json.loads(export("demo", "--root", "nlp_parsing_action"))

    assert names(document) == {"nlp_parsing_action"}
    (tool,) = document["entities"][0]["capabilities"]["tools"]
    assert tool["tool_id"] == "nlp_parser"
    assert tool["function_schema"]["parameters"]["type"] == "object"


# What a file may hold


@pytest.mark.parametrize(
    "shape",
    ["one entity", "a list", "a bundle"],
)
def test_it_imports_one_entity_a_list_or_a_bundle(acme, shape):
    entities = [definition("solo")]
    document = {
        "one entity": entities[0],
        "a list": entities,
        "a bundle": {"entities": entities},
    }[shape]

    definitions = read_import_bytes(json.dumps(document).encode())
    entities_import(workspace=acme, definitions=definitions)

    assert list(Entity.objects.filter(workspace=acme).values_list("name", flat=True)) == ["solo"]


def test_it_accepts_a_file_with_a_byte_order_mark(tmp_path):
    path = write(tmp_path, "\ufeff" + json.dumps([definition("bom")]), "bom.json")

    assert read_import_file(path)[0]["identity"]["name"] == "bom"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"entities": [', "is not valid JSON: Expecting value at line 1, column 15"),
        (b"", "is not valid JSON"),
        (b"   \n", "is not valid JSON"),
        ('{"identity": {"name": "café"}}'.encode("latin-1"), "is not UTF-8 text"),
        (b"[]", "holds no entity definitions"),
        (b'{"entities": []}', "holds no entity definitions"),
        (b'{"entities": {"name": "x"}}', '"entities" must be a list'),
        (b'"just a string"', "must hold an entity definition"),
    ],
    ids=[
        "broken JSON",
        "empty",
        "blank",
        "latin-1",
        "empty list",
        "empty bundle",
        "entities not a list",
        "a string",
    ],
)
def test_it_refuses_a_file_it_cannot_read_as_definitions(tmp_path, raw, message):
    path = write(tmp_path, raw, "bad.json")

    with pytest.raises(ImportFileError, match=message):
        read_import_file(path)


def test_it_refuses_a_file_over_the_size_limit(settings, tmp_path):
    settings.HIERARCH_IMPORT_MAX_BYTES = 1000
    path = write(
        tmp_path,
        json.dumps([definition("big", identity={"name": "big", "description": "x" * 1000})]),
        "big.json",
    )

    with pytest.raises(ImportFileError) as refusal:
        read_import_file(path)

    message = str(refusal.value)
    assert "imports are limited to 1,000 bytes" in message
    assert f"is {Path(path).stat().st_size:,} bytes" in message


def test_it_states_a_limit_of_whole_megabytes_in_megabytes(settings):
    settings.HIERARCH_IMPORT_MAX_BYTES = 5 * 1024 * 1024  # the default
    raw = b" " * (5 * 1024 * 1024 + 1)

    with pytest.raises(ImportFileError) as refusal:
        read_import_bytes(raw, name="upload.json")

    # Just over the limit: in rounded megabytes this read "5.0 MB; limited to 5 MB".
    assert str(refusal.value) == "upload.json is 5,242,881 bytes; imports are limited to 5 MB"


def test_it_accepts_a_file_at_the_size_limit(settings, tmp_path):
    content = json.dumps([definition("fits")])
    settings.HIERARCH_IMPORT_MAX_BYTES = len(content.encode())

    assert read_import_file(write(tmp_path, content))[0]["identity"]["name"] == "fits"


# All or nothing


def test_a_bundle_with_one_bad_entity_saves_nothing(acme):
    bad = definition("broken", "GADGET")
    with pytest.raises(DefinitionInvalid) as refusal:
        entities_import(
            workspace=acme,
            definitions=[definition("fine", tools=[]), bad, definition("fine_too")],
        )

    assert [(p.entity, p.path) for p in refusal.value.problems] == [
        ("entities[1] (broken)", "metadata.type")
    ]
    assert "entities[1] (broken): metadata.type: 'GADGET' is not allowed" in str(refusal.value)
    assert not Entity.objects.exists()
    assert not EntityVersion.objects.exists()


def test_a_bundle_whose_last_entity_breaks_a_link_saves_nothing(demo):
    before = export_workspace(demo)
    tools = Tool.objects.count()
    definitions = read_import_file(FIXTURE)
    process = definitions[0]
    process["identity"]["description"] = "changed, but must not be saved"
    definitions[-1]["hierarchy"]["children"] = [{"child_id": "proc-001"}]

    with pytest.raises(DefinitionInvalid) as refusal:
        entities_import(workspace=demo, definitions=definitions)

    # An action under nothing but itself: the type rule refuses the link too, at the action.
    last = len(definitions) - 1
    (typed,) = [p for p in refusal.value.problems if "creates a cycle" not in p.message]
    assert typed.entity == f"entities[{last}] (asset_upload_action)"
    assert typed.message.startswith("“video_ad_creation_process” cannot be a child of")
    problems = [p for p in refusal.value.problems if p is not typed]
    assert {p.entity for p in problems} == {  # every entity on the loop is told
        "entities[0] (video_ad_creation_process)",
        "entities[10] (video_production_agent)",
        "entities[11] (video_rendering_skill)",
        f"entities[{last}] (asset_upload_action)",
    }
    (own,) = [p for p in problems if p.entity.endswith("(asset_upload_action)")]
    assert own.path == "hierarchy.children[0].child_id"
    assert own.message.startswith(
        "creates a cycle: asset_upload_action → video_ad_creation_process → "
        "video_production_agent → video_rendering_skill → asset_upload_action"
    )
    assert export_workspace(demo) == before
    assert Tool.objects.count() == tools


def test_it_refuses_two_definitions_with_one_name_in_a_bundle(acme):
    with pytest.raises(DefinitionInvalid) as refusal:
        entities_import(workspace=acme, definitions=[definition("twin"), definition("twin")])

    (problem,) = refusal.value.problems
    assert (problem.entity, problem.path) == ("entities[1] (twin)", "identity.name")
    assert "entity entities[0] (twin) of this workspace is already named 'twin'" in (
        problem.message
    )
    assert not Entity.objects.exists()


# import_entities


def test_the_import_command_prints_what_it_created(db):
    out, _ = run("import_entities", str(FIXTURE), "--workspace", "fresh")

    lines = out.splitlines()
    assert lines[0] == "created workspace fresh"
    assert "created: video_ad_creation_process PROCESS 1.0.0" in lines
    assert "created: nlp_parsing_action ACTION 1.0.0" in lines
    assert len(lines) == 1 + len(DEMO_NAMES)


def test_the_import_command_reports_unchanged_and_updated_entities(demo, tmp_path):
    definitions = read_import_file(FIXTURE)
    definitions[0]["identity"]["description"] = "Makes video ads for job postings"

    out, _ = run("import_entities", write(tmp_path, definitions), "--workspace", "demo")

    assert "updated (patch): video_ad_creation_process PROCESS 1.0.1" in out.splitlines()
    assert "unchanged: content_analyst_agent AGENT 1.0.0" in out.splitlines()
    assert "created workspace" not in out


def test_the_import_command_lists_every_problem_and_imports_nothing(db, tmp_path):
    bundle = [definition("ok"), definition("bad", "GADGET")]
    bundle[0]["planing"] = {}
    err = StringIO()

    with pytest.raises(CommandError, match=r"nothing imported: 2 problem\(s\) in ") as refusal:
        call_command(
            "import_entities",
            write(tmp_path, bundle),
            "--workspace",
            "new",
            stdout=StringIO(),
            stderr=err,
        )

    assert "bundle.json" in str(refusal.value)
    assert err.getvalue().splitlines() == [
        "entities[0] (ok): planing: is not a section of an entity definition; "
        "did you mean 'planning'?",
        "entities[1] (bad): metadata.type: 'GADGET' is not allowed; use one of: ACTION, SKILL, "
        "AGENT, PROCESS",
    ]
    assert not Workspace.objects.filter(slug="new").exists()
    assert not Entity.objects.exists()


def test_the_import_command_refuses_a_file_that_is_not_json(db, tmp_path):
    with pytest.raises(CommandError, match="is not valid JSON"):
        run("import_entities", write(tmp_path, "not json"), "--workspace", "new")

    assert not Workspace.objects.exists()


def test_the_import_command_refuses_a_file_over_the_limit(db, settings, tmp_path):
    settings.HIERARCH_IMPORT_MAX_BYTES = 100

    with pytest.raises(CommandError, match="imports are limited to 100 bytes"):
        run("import_entities", str(FIXTURE), "--workspace", "new")

    assert not Workspace.objects.exists()


def test_the_import_command_refuses_a_missing_file(db, tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        run("import_entities", str(tmp_path / "nowhere.json"), "--workspace", "new")


def test_the_import_command_refuses_a_bad_workspace_slug(db):
    with pytest.raises(CommandError, match="not a valid workspace slug"):
        run("import_entities", str(FIXTURE), "--workspace", "no spaces")

    assert not Workspace.objects.exists()


# export_entities


def test_the_export_command_prints_the_workspace_as_json(demo):
    document = json.loads(export("demo"))

    assert document == json.loads(json.dumps(export_workspace(demo)))
    assert ChildLink.objects.filter(parent__workspace=demo).count() == sum(
        len(e["hierarchy"]["children"]) for e in document["entities"]
    )


def test_the_export_command_refuses_an_unknown_workspace(db):
    with pytest.raises(CommandError, match="there is no workspace 'nowhere'"):
        export("nowhere")


def test_the_export_command_refuses_an_unknown_root(demo):
    with pytest.raises(CommandError, match="no entity named 'ghost' in workspace 'demo'"):
        export("demo", "--root", "ghost")


def test_the_export_command_does_not_export_another_workspaces_root(demo, globex):
    with pytest.raises(CommandError, match="no entity named 'content_analyst_agent'"):
        export("globex", "--root", "content_analyst_agent")


# add_member


def test_add_member_creates_the_user_and_grants_the_role(acme):
    out, _ = run(
        "add_member", "dora", "--workspace", "acme", "--role", "designer", "--password", "pw-123"
    )

    assert out.strip() == "created user dora: designer of acme"
    dora = get_user_model().objects.get(username="dora")
    assert dora.check_password("pw-123")
    assert has_perm(dora, VIEW, acme)
    assert has_perm(dora, DESIGN, acme)
    assert not has_perm(dora, OPERATE, acme)


def test_add_member_without_a_password_makes_a_user_who_cannot_sign_in(acme):
    run("add_member", "erin", "--workspace", "acme", "--role", "viewer")

    assert not get_user_model().objects.get(username="erin").has_usable_password()


def test_add_member_is_idempotent(acme):
    run("add_member", "dora", "--workspace", "acme", "--role", "operator")

    out, _ = run("add_member", "dora", "--workspace", "acme", "--role", "operator")

    assert out.strip() == "user dora: operator of acme"
    assert get_user_model().objects.filter(username="dora").count() == 1
    assert list(Membership.objects.values_list("role", flat=True)) == ["operator"]


def test_add_member_grants_a_second_role_to_an_existing_user(alice, acme):
    run("add_member", "alice", "--workspace", "acme", "--role", "operator")

    assert set(Membership.objects.filter(user=alice).values_list("role", flat=True)) == {
        "designer",
        "operator",
    }
    assert has_perm(alice, OPERATE, acme)
    assert alice.check_password("password")


def test_add_member_refuses_an_unknown_role(acme):
    with pytest.raises(CommandError, match="invalid choice: 'owner'"):
        run("add_member", "dora", "--workspace", "acme", "--role", "owner")

    assert not get_user_model().objects.filter(username="dora").exists()


def test_add_member_refuses_an_unknown_workspace(db):
    with pytest.raises(CommandError, match="there is no workspace 'nowhere'"):
        run("add_member", "dora", "--workspace", "nowhere", "--role", "viewer")

    assert not get_user_model().objects.filter(username="dora").exists()
    assert not Workspace.objects.exists()
