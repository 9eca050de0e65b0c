"""Factories. Entities are made through the services, as every real entity is."""

from __future__ import annotations

import copy
from typing import Any

import factory
from django.contrib.auth import get_user_model
from factory.django import DjangoModelFactory

from entities.models import Entity, Workspace
from entities.services import entity_save
from governance.permissions import membership_grant
from tools.models import Tool
from tools.services import tool_upsert


class UserFactory(DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    is_staff = True
    password = factory.PostGenerationMethodCall("set_password", "password")

    @factory.post_generation
    def save_password(obj, create, extracted, **kwargs):  # noqa: N805
        if create:
            obj.save()


class WorkspaceFactory(DjangoModelFactory):
    class Meta:
        model = Workspace
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Workspace {n}")
    slug = factory.Sequence(lambda n: f"ws-{n}")


def grant(user: Any, workspace: Workspace, *roles: str) -> Any:
    for role in roles:
        membership_grant(workspace=workspace, user=user, role=role)
    return user


def definition(
    name: str,
    type: str = "ACTION",
    *,
    children: list[Any] = (),
    max_cost: float | None = None,
    max_depth: int | None = None,
    tools: list[Any] = (),
    **sections: Any,
) -> dict:
    """A small valid definition; `sections` are merged over it section by section."""
    children = [
        {"child_id": c if isinstance(c, str) else c.name} if not isinstance(c, dict) else c
        for c in children
    ]
    data: dict[str, Any] = {
        "metadata": {"type": type, "status": "ACTIVE", "tags": []},
        "identity": {
            "name": name,
            "description": f"{name} does one thing well",
            "persona": {"system_prompt": f"You are {name}."},
        },
        "hierarchy": {"children": children},
        "governance": {
            "cost_controls": {"max_cost_usd": max_cost},
            "execution_limits": {"max_recursion_depth": 5 if max_depth is None else max_depth},
        },
        "capabilities": {"tools": list(tools)},
    }
    for section, value in sections.items():
        merged = copy.deepcopy(data.get(section, {}))
        if isinstance(value, dict) and isinstance(merged, dict):
            merged.update(value)
        else:
            merged = value
        data[section] = merged
    return data


class EntityFactory(factory.Factory):
    """`EntityFactory(workspace=ws, name="a", type="AGENT", children=[b])` saves through
    `entity_save`; any other keyword is a definition section merged in."""

    class Meta:
        model = Entity

    workspace = factory.SubFactory(WorkspaceFactory)
    name = factory.Sequence(lambda n: f"entity_{n}")
    type = "ACTION"

    @classmethod
    def _create(cls, model_class, workspace, name, type, **kwargs):  # noqa: A002
        user = kwargs.pop("user", None)
        return entity_save(
            workspace=workspace, definition=definition(name, type, **kwargs), user=user
        ).entity

    @classmethod
    def _build(cls, model_class, workspace, name, type, **kwargs):  # noqa: A002
        return definition(name, type, **kwargs)


def tool_definition(tool_id: str = "echo", **overrides: Any) -> dict:
    data = {
        "tool_id": tool_id,
        "name": tool_id.replace("_", " ").title(),
        "description": f"The {tool_id} tool",
        "provider": "internal",
        "function_schema": {
            "name": tool_id,
            "description": f"Call {tool_id}",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
        "permissions": "READ",
    }
    data.update(overrides)
    return data


def make_tool(workspace: Workspace, tool_id: str = "echo", **overrides: Any) -> Tool:
    return tool_upsert(workspace=workspace, definition=tool_definition(tool_id, **overrides))


def paused_run(entity: Entity, **fields: Any) -> Any:
    """A root run of the entity's current version, PAUSED on a person (no executor involved)."""
    import uuid

    from runs.models import Run, RunStatus
    from runs.store import latest_version

    run_id = uuid.uuid4()
    return Run.objects.create(
        id=run_id,
        trace_id=run_id,
        workspace_id=entity.workspace_id,
        entity=entity,
        entity_version=latest_version(entity),
        status=RunStatus.PAUSED,
        **fields,
    )


def approval_request(run: Any, **fields: Any) -> Any:
    """A pending BEFORE_TOOL_CALL request of the run, as the engine asks one; `fields`
    override any column."""
    from approvals.models import Approval

    values: dict[str, Any] = {
        "key": f"BEFORE_TOOL_CALL:search:{Approval.objects.filter(run=run).count() + 1}",
        "checkpoint_trigger": "BEFORE_TOOL_CALL",
        "step_name": "search",
        "subject": "tool_arguments",
        "payload": {"query": "quarterly numbers"},
        "edit_schema": {
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 3}},
            "required": ["query"],
            "additionalProperties": False,
        },
        "reasoning_summary": "The agent wants to search the web before it writes the brief.",
        "requested_by": run.entity.name,
        "resume_status": "RUNNING",
    }
    values.update(fields)
    return Approval.objects.create(
        run=run, workspace_id=run.workspace_id, entity=run.entity, trace_id=run.trace_id, **values
    )
