"""`io_contract.state_contract.reads_from` at design time: where a definition shows a
child's input mapping (a child link's, a static plan step's), the mapping reads only the
state keys the child declares it reads; a refused save names the mapping field, the keys
and what the child declares, and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from entities.definition import DefinitionInvalid
from entities.models import Entity
from entities.services import entities_import, entity_save
from tests.factories import EntityFactory, definition

pytestmark = [pytest.mark.smoke]


def reader(workspace: Any, reads: list[str], name: str = "writer") -> Entity:
    return EntityFactory(
        workspace=workspace,
        name=name,
        io_contract={
            "input": {"schema": {"type": "object", "properties": {"topic": {"type": "string"}}}},
            "state_contract": {"reads_from": reads},
        },
    )


def lead(mapping: dict[str, Any], *, in_plan: bool = False) -> dict[str, Any]:
    link: dict[str, Any] = {"child_id": "writer"}
    sections: dict[str, Any] = {}
    if in_plan:
        sections["planning"] = {
            "static_plan": {
                "enabled": True,
                "steps": [
                    {
                        "step_id": "s1",
                        "order": 1,
                        "name": "Write",
                        "type": "CHILD_ENTITY_INVOCATION",
                        "target": {"entity_id": "writer"},
                        "input_mapping": mapping,
                    }
                ],
            }
        }
    else:
        link["input_mapping"] = mapping
    return definition("lead", "AGENT", children=[link], **sections)


def problems_of(workspace: Any, raw: dict[str, Any]) -> dict[str, str]:
    before = Entity.objects.count()
    with pytest.raises(DefinitionInvalid) as refusal:
        entity_save(workspace=workspace, definition=raw)
    assert Entity.objects.count() == before
    return {p.path: p.message for p in refusal.value.problems}


def test_a_link_mapping_reading_an_undeclared_key_is_refused(acme):
    reader(acme, ["topic"])
    found = problems_of(acme, lead({"topic": {"cat": [{"var": "tone"}, {"var": "input.x"}]}}))
    assert found == {
        "hierarchy.children[0].input_mapping.topic": "reads 'tone', 'x' from the state, which "
        "'writer' does not declare in io_contract.state_contract.reads_from (topic); declare "
        "it there or map from a key it declares"
    }


def test_a_plan_step_mapping_is_checked_too(acme):
    reader(acme, ["topic"])
    found = problems_of(acme, lead({"topic": {"var": ""}}, in_plan=True))
    (path,) = found
    assert path == "planning.static_plan.steps[0].input_mapping.topic"
    assert found[path].startswith("reads keys it does not name (a computed or whole-state var)")


def test_declared_keys_and_children_that_declare_nothing_pass(acme):
    reader(acme, ["topic", "tone"])
    saved = entity_save(
        workspace=acme,
        definition=lead({"topic": {"cat": [{"var": "topic"}, {"var": "input.tone"}]}}),
    )
    assert saved.entity.name == "lead"
    reader(acme, [], name="open")
    open_lead = definition(
        "open_lead",
        "AGENT",
        children=[{"child_id": "open", "input_mapping": {"topic": {"var": "anything"}}}],
    )
    assert entity_save(workspace=acme, definition=open_lead).entity.name == "open_lead"


def test_a_bundle_is_checked_against_its_own_children(acme):
    """An import of parent and child together: the child's contract as imported counts."""
    child = definition(
        "writer",
        io_contract={
            "input": {"schema": {"type": "object", "properties": {"topic": {"type": "string"}}}},
            "state_contract": {"reads_from": ["topic"]},
        },
    )
    with pytest.raises(DefinitionInvalid) as refusal:
        entities_import(workspace=acme, definitions=[child, lead({"topic": {"var": "tone"}})])
    assert [p.path for p in refusal.value.problems] == ["hierarchy.children[0].input_mapping.topic"]
    assert not Entity.objects.filter(workspace=acme).exists()


@pytest.mark.parametrize(
    "io_contract",
    [
        "not an object",
        {"state_contract": "nope"},
        {"state_contract": {"reads_from": "topic"}},
        {"state_contract": {"reads_from": [1, None]}},
    ],
)
def test_a_broken_contract_is_named_not_a_server_error(acme, io_contract):
    """Checked beside the rest of the workspace, a contract the section check refused is
    read as far as it goes: the save names the problem, nothing breaks."""
    reader(acme, ["topic"])
    raw = lead({"topic": {"var": "topic"}})
    raw["io_contract"] = io_contract
    found = problems_of(acme, raw)
    assert any(path.startswith("io_contract") for path in found), found
