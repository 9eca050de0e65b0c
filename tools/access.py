"""Who may call a tool: its `permissions` against the role of the user who started the run.

- READ: anyone who may run the entity (starting a run needs the operator role already).
- WRITE: the caller holds OPERATE in the tool's workspace (the operator or admin role).
- EXECUTE: the caller holds an explicit `ToolGrant` on the tool, given by an admin of the
  workspace; without one, the engine asks a person in the approvals inbox first
  (`lacks_grant`), and the call goes through with the approver's name
  (`ToolInvocation.approved_by`).

The caller is the user who started the run's trace (`ToolInvocation.caller_id`); a child
run calls with its root's starter. A system run (caller None: `manage.py run_entity`, the
sweeper, a test driving the engine) was started by someone with shell access to the server,
who could do anything a tool does; it may call every tool. A superuser may too, as Django's
convention has it. Refusals are permanent PERMISSION_DENIED errors naming the tool, the user
and what is missing.

Each answer is kept in this process for `ttl_s` seconds (5 by default), so a step costs no
query for a caller seen a moment ago; a role or grant taken away takes effect within that
time in every worker, and at once in the process that changed it (`forget`, called on every
membership and grant change).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from entities.models import Workspace
from governance.permissions import OPERATE, has_perm
from runs.engine.ports import PERMISSION_DENIED, VALIDATION_ERROR, ToolError, ToolInvocation
from tools.models import ToolGrant, ToolPermission

PERMISSIONS = tuple(ToolPermission.values)


@dataclass(frozen=True)
class _Caller:
    """What this process knows of one user in one workspace."""

    name: str
    exists: bool = True
    active: bool = True
    superuser: bool = False
    operates: bool = False


class ToolAccess:
    """Checks a call against the caller's role and grants, with a short per-process cache."""

    def __init__(self, *, ttl_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self.clock = clock
        self._callers: dict[tuple[Any, int], tuple[float, _Caller]] = {}
        self._grants: dict[tuple[Any, int, str], tuple[float, bool]] = {}
        self._lock = threading.Lock()

    def check(self, invocation: ToolInvocation, *, tool_id: str) -> None:
        """Return when the caller may make the call; raise PERMISSION_DENIED otherwise."""
        permission = invocation.tool.get("permissions") or ToolPermission.READ
        if permission == ToolPermission.READ:
            return
        if permission not in PERMISSIONS:
            raise ToolError(
                f"tool {tool_id}: permissions {permission!r} is not one of "
                f"{', '.join(PERMISSIONS)}",
                permanent=True,
                code=VALIDATION_ERROR,
            )
        caller_id = invocation.caller_id
        if caller_id is None:
            return  # a system run: see the module's docstring
        workspace_id = invocation.workspace_id
        caller = self._caller(caller_id, workspace_id)
        if caller.superuser and caller.active:
            return
        if not caller.exists:
            raise self._refusal(
                tool_id,
                permission,
                f"the user who started this run (id {caller_id}) no longer exists",
            )
        if not caller.active:
            raise self._refusal(
                tool_id, permission, f"{caller.name}, who started this run, is deactivated"
            )
        if permission == ToolPermission.WRITE:
            if not caller.operates:
                raise self._refusal(
                    tool_id,
                    permission,
                    f"{caller.name}, who started this run, needs the operator or admin role in "
                    f"workspace {_workspace_name(workspace_id)} to call it",
                )
            return
        if invocation.approved_by is not None:
            return  # a person with the approver role approved this one call in the inbox
        if not self._granted(caller_id, workspace_id, tool_id):
            raise self._refusal(
                tool_id,
                permission,
                f"{caller.name}, who started this run, needs an explicit grant on it: an admin "
                f"of workspace {_workspace_name(workspace_id)} adds one under Tool grants on "
                "the tool's admin page",
            )

    def lacks_grant(self, tool: dict, workspace_id: int, caller_id: Any) -> str | None:
        """Why an EXECUTE call needs a person's approval (the run's starter holds no grant
        on the tool); None when it does not. Refusals of other kinds (a deleted or
        deactivated starter) stay refusals: `check` raises them."""
        if (tool.get("permissions") or ToolPermission.READ) != ToolPermission.EXECUTE:
            return None
        if caller_id is None:
            return None
        caller = self._caller(caller_id, workspace_id)
        if not caller.exists or not caller.active or caller.superuser:
            return None
        tool_id = str(tool.get("tool_id", "?"))
        if self._granted(caller_id, workspace_id, tool_id):
            return None
        return (
            f"{caller.name}, who started this run, holds no grant on the EXECUTE tool "
            f"{tool_id}, so a person approves this call"
        )

    def forget(self, user_id: Any = None) -> None:
        """Drop what this process knows of one user (every user: None)."""
        with self._lock:
            if user_id is None:
                self._callers.clear()
                self._grants.clear()
                return
            user_id = str(user_id)
            for key in [k for k in self._callers if str(k[0]) == user_id]:
                del self._callers[key]
            for key in [k for k in self._grants if str(k[0]) == user_id]:
                del self._grants[key]

    def _caller(self, caller_id: Any, workspace_id: int) -> _Caller:
        key = (caller_id, workspace_id)
        now = self.clock()
        cached = self._callers.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        user = get_user_model().objects.filter(pk=caller_id).first()
        if user is None:
            caller = _Caller(name=f"user {caller_id}", exists=False)
        else:
            caller = _Caller(
                name=user.get_username(),
                active=user.is_active,
                superuser=user.is_superuser,
                # has_perm reads only the workspace's key: no need to load the row.
                operates=has_perm(user, OPERATE, Workspace(pk=workspace_id)),
            )
        with self._lock:
            self._callers[key] = (now + self.ttl_s, caller)
        return caller

    def _granted(self, caller_id: Any, workspace_id: int, tool_id: str) -> bool:
        key = (caller_id, workspace_id, tool_id)
        now = self.clock()
        cached = self._grants.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        granted = ToolGrant.objects.filter(
            tool__workspace_id=workspace_id, tool__tool_id=tool_id, user_id=caller_id
        ).exists()
        with self._lock:
            self._grants[key] = (now + self.ttl_s, granted)
        return granted

    @staticmethod
    def _refusal(tool_id: str, permission: str, why: str) -> ToolError:
        article = "an" if permission[:1] in "AEIOU" else "a"
        return ToolError(
            f"tool {tool_id} is {article} {permission} tool: {why}",
            permanent=True,
            code=PERMISSION_DENIED,
        )


def _workspace_name(workspace_id: int) -> str:
    slug = Workspace.objects.filter(pk=workspace_id).values_list("slug", flat=True).first()
    return repr(slug) if slug else str(workspace_id)


DEFAULT_ACCESS = ToolAccess()


def forget_on_change(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Signal receiver: a membership or grant changed, so this process's answers for its user
    are stale. Dropped now, and again after the commit (a check in between, on another
    connection, still saw the old rows)."""
    user_id = getattr(instance, "user_id", None)
    DEFAULT_ACCESS.forget(user_id)
    transaction.on_commit(lambda: DEFAULT_ACCESS.forget(user_id))
