"""Writes to the tool registry that are not tool definitions: the grants on EXECUTE tools."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from entities.definition import DefinitionInvalid, normalize_tool
from entities.models import Membership, Workspace
from governance.audit import audit_record
from governance.models import AuditAction
from governance.permissions import ADMINISTER, has_perm
from tools.models import Tool, ToolGrant

logger = logging.getLogger(__name__)


class GrantRefused(ValueError):
    """A grant that cannot be given; the message says why."""


def tool_grant_add(*, tool: Tool, user: Any, granted_by: Any = None) -> ToolGrant:
    """Let `user` call the EXECUTE tool `tool` in runs they start (idempotent).

    `granted_by` (None: the system) must administer the tool's workspace; `user` must be a
    member of it."""
    if granted_by is not None and not has_perm(granted_by, ADMINISTER, tool.workspace):
        raise GrantRefused(
            f"{granted_by.get_username()} may not grant tools in workspace "
            f"{tool.workspace.slug!r}; the admin role is needed"
        )
    if not Membership.objects.filter(workspace_id=tool.workspace_id, user=user).exists():
        raise GrantRefused(
            f"{user.get_username()} is not a member of workspace {tool.workspace.slug!r}; "
            "give them a role there first"
        )
    with transaction.atomic():
        grant, created = ToolGrant.objects.get_or_create(
            tool=tool, user=user, defaults={"granted_by": _user_or_none(granted_by)}
        )
        if created:
            audit_record(
                workspace=tool.workspace_id,
                action=AuditAction.TOOL_GRANTED,
                actor=granted_by,
                object_type="tool",
                object_id=tool.tool_id,
                object_label=tool.tool_id,
                after={"user": user.get_username(), "permission": "EXECUTE"},
            )
    if created:
        logger.info(
            "tool %s of workspace %s: %s may execute it (granted by %s)",
            tool.tool_id,
            tool.workspace_id,
            user.get_username(),
            granted_by.get_username() if granted_by is not None else "the system",
        )
    return grant


def tool_grant_revoke(*, grant: ToolGrant, revoked_by: Any = None) -> None:
    """Take a grant back; the user's next call of the tool is refused (within the access
    cache's few seconds in other processes)."""
    tool = grant.tool
    if revoked_by is not None and not has_perm(revoked_by, ADMINISTER, tool.workspace):
        raise GrantRefused(
            f"{revoked_by.get_username()} may not revoke grants in workspace "
            f"{tool.workspace.slug!r}; the admin role is needed"
        )
    with transaction.atomic():
        grant.delete()
        audit_record(
            workspace=tool.workspace_id,
            action=AuditAction.TOOL_GRANT_REVOKED,
            actor=revoked_by,
            object_type="tool",
            object_id=tool.tool_id,
            object_label=tool.tool_id,
            before={"user": grant.user.get_username(), "permission": "EXECUTE"},
        )
    logger.info(
        "tool %s of workspace %s: grant of %s revoked by %s",
        tool.tool_id,
        tool.workspace_id,
        grant.user.get_username(),
        revoked_by.get_username() if revoked_by is not None else "the system",
    )


def _user_or_none(user: Any) -> Any:
    return user if getattr(user, "is_authenticated", False) else None


def tool_upsert(*, workspace: Workspace, definition: Any) -> Tool:
    """Create or update a tool of the workspace's registry from its definition."""
    tool_definition, problems = normalize_tool(definition)
    if problems:
        raise DefinitionInvalid(problems)
    fields = {
        "name": tool_definition["name"],
        "description": tool_definition["description"],
        "provider": tool_definition["provider"],
        "authentication": tool_definition["authentication"],
        "function_schema": tool_definition["function_schema"],
        "rate_limit": tool_definition["rate_limit"],
        "permissions": tool_definition["permissions"],
        "sandbox_mode": tool_definition["sandbox_mode"],
        "implementation": tool_definition["implementation"],
        "output_schema": tool_definition["output_schema"],
    }
    tool, created = Tool.objects.get_or_create(
        workspace=workspace, tool_id=tool_definition["tool_id"], defaults=fields
    )
    if not created and any(getattr(tool, k) != v for k, v in fields.items()):
        for key, value in fields.items():
            setattr(tool, key, value)
        tool.save()
    return tool
