"""The runs API's material, shared by its test modules: an entity to execute (`greeter`, with a
required input checked by a schema and a length rule) and input it accepts, the execute URL,
an operator to call it, a run ended a given time after it started, and a process whose child
makes one model call and one tool call (`picker_process`)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.utils import timezone

from entities.models import Entity
from runs.models import Run, RunStatus
from runs.store import latest_version
from tests.factories import EntityFactory, UserFactory, grant, tool_definition
from tests.support.runs import static_plan, step

JOB = (
    "We are seeking a Senior Software Engineer to design and build distributed systems and "
    "mentor engineers."
)
GREETER_IO = {
    "input": {
        "schema": {
            "type": "object",
            "properties": {
                "job_description": {"type": "string"},
                "company_name": {"type": "string", "maxLength": 40},
            },
            "required": ["job_description", "company_name"],
        },
        "validation_rules": [
            {
                "rule": "job_description must be at least 50 characters",
                "validator": "length_validator",
            }
        ],
    },
    "output": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}}},
}
GOOD_INPUT = {"job_description": JOB, "company_name": "TechCorp"}


def execute_url(entity: Entity | uuid.UUID) -> str:
    return f"/api/v1/entities/{getattr(entity, 'pk', entity)}/execute"


def greeter(workspace, name: str = "greeter") -> Entity:
    """An ACTION with a required input (two fields, one length rule): one model call."""
    return EntityFactory(workspace=workspace, name=name, io_contract=GREETER_IO)


def operator(workspace, username: str = "olive"):
    return grant(UserFactory(username=username), workspace, "operator")


def finished_run(entity: Entity, *, ms: int, status: str = RunStatus.COMPLETED, **fields) -> Run:
    """A root run of the entity that ended `ms` after it started."""
    run_id = uuid.uuid4()
    now = timezone.now()
    return Run.objects.create(
        id=run_id,
        trace_id=run_id,
        workspace_id=entity.workspace_id,
        entity=entity,
        entity_version=latest_version(entity),
        status=status,
        started_at=now - timedelta(milliseconds=ms),
        completed_at=now,
        execution_time_ms=ms,
        **fields,
    )


def pick_tool() -> dict:
    """`pick`: json_extract of `data` by an `expression` the model must choose ("a")."""
    return tool_definition(
        "pick",
        implementation="json_extract",
        function_schema={
            "name": "pick",
            "parameters": {
                "type": "object",
                "properties": {
                    "data": {"type": "object"},
                    "expression": {"type": "string", "enum": ["a"]},
                },
                "required": ["data", "expression"],
            },
        },
    )


def picker_process(workspace):
    """process → picker: the picker's one step is a tool call whose arguments the model fills
    (one LLM call and one tool call)."""
    picker = EntityFactory(
        workspace=workspace,
        name="picker",
        tools=[pick_tool()],
        planning=static_plan(step(1, "Pick", "TOOL_CALL", tool_id="pick")),
    )
    return EntityFactory(workspace=workspace, name="chooser", type="PROCESS", children=[picker])
