"""An entity that asks a person at the checkpoints it is given: its one step renders a
template through a tool (`tool_entity`), so a BEFORE_TOOL_CALL checkpoint pauses it with the
call's arguments to approve, edit or reject."""

from __future__ import annotations

from tests.factories import EntityFactory

TEXT_OUT = {"output": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}}}}


def tool_entity(acme, *checkpoints, name="careful"):
    render = {
        "tool_id": "render",
        "name": "Render",
        "implementation": "template_render",
        "function_schema": {
            "name": "render",
            "parameters": {
                "type": "object",
                "properties": {"template": {"type": "string", "minLength": 2}},
                "required": ["template"],
                "additionalProperties": False,
            },
        },
    }
    step = {
        "step_id": "s1",
        "order": 1,
        "name": "Render",
        "type": "TOOL_CALL",
        "target": {"tool_id": "render"},
        "input_mapping": {"template": "hello"},
    }
    return EntityFactory(
        workspace=acme,
        name=name,
        tools=[render],
        io_contract=TEXT_OUT,
        planning={"static_plan": {"enabled": True, "steps": [step]}},
        governance={
            "human_oversight": {"hitl_checkpoints": list(checkpoints)},
            "execution_limits": {"max_recursion_depth": 5},
        },
    )
