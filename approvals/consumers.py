"""The inbox's websocket: `/ws/approvals/` pushes the badge, and on the inbox page the list,
as htmx out-of-band fragments each time a request of the user's workspaces changes.

Authenticated by the session (AuthMiddlewareStack) and origin-checked (config/asgi.py); an
anonymous visitor is refused. It joins the inbox group of every workspace where the user
approves or administers, and before each push it reads the user again and checks that they
may still see the request: a role taken away since the socket opened stops the pushes.

The push re-renders the same partials as the page (`inbox-rows`, `inbox-badge`), so a new
request is inserted, a decided one removed and a changed one updated in one swap, in the
list's order and under its filters; a message the channel layer lost (it delivers at most
once) is made good by the next one.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, Literal, TypedDict

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth import get_user_model
from django.http import QueryDict
from django.template.loader import render_to_string

from approvals.forms import SORTS
from approvals.models import Risk, Trigger
from approvals.selectors import approvals_open_for, approvals_visible_to
from approvals.services import INBOX_GROUP
from approvals.views import _detail_context, inbox_context
from governance.permissions import ADMINISTER, APPROVE, workspaces_for

# Refused before the handshake completes: a browser sees the connection fail (HTTP 403).
NOT_SIGNED_IN = 4401
BAD_REQUEST = 4400

# The query string the pages open the socket with (the inbox's filters, `list=open`, or a
# request page's `detail`): each name once, each value one the page could have written. An
# id is ASCII digits (`str.isdigit()` also takes "²") within the id column's range.
ID = re.compile(r"[0-9]{0,19}")
LARGEST_ID = 2**63 - 1
CHOICES: dict[str, frozenset[str]] = {
    "list": frozenset({"open"}),
    "show": frozenset({"open", "decided"}),
    "trigger": frozenset({"", *Trigger.values}),
    "risk": frozenset({"", *Risk.values}),
    "sort": frozenset({"", *SORTS}),
}
IDS = ("workspace", "entity", "detail")


def socket_params(query_string: bytes) -> QueryDict | None:
    """The socket's parameters, or None when one is not what a page sends."""
    try:
        params = QueryDict(query_string.decode("ascii"))
    except (UnicodeError, ValueError):
        return None
    for name, values in params.lists():
        if len(values) != 1 or (name not in CHOICES and name not in IDS):
            return None
        value = values[0]
        if name in CHOICES and value not in CHOICES[name]:
            return None
        if name in IDS and not (ID.fullmatch(value) and int(value or 0) <= LARGEST_ID):
            return None
    return params


class ApprovalChanged(TypedDict):
    """What `approvals.services.broadcast_inbox` sends to a workspace's inbox group."""

    type: Literal["approval.changed"]
    approval_id: int
    workspace_id: int
    status: str


def inbox_groups(user: Any) -> list[str]:
    """The inbox groups of the workspaces where the user may decide something."""
    ids = set(workspaces_for(user, APPROVE).values_list("pk", flat=True))
    ids |= set(workspaces_for(user, ADMINISTER).values_list("pk", flat=True))
    return [INBOX_GROUP.format(workspace_id=pk) for pk in sorted(ids)]


def inbox_push(user_id: int, params: QueryDict, event: ApprovalChanged) -> str | None:
    """The fragments for one change, or None when the user may not see the request (or is
    no longer an active user)."""
    # A fresh user object: permissions are cached per object, and this one must be now's.
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None or not approvals_visible_to(user).filter(pk=event["approval_id"]).exists():
        return None
    badge = render_to_string(
        "approvals/_nav.html#inbox-badge",
        {"inbox_count": approvals_open_for(user).count(), "oob": True},
    )
    if params.get("detail") == str(event["approval_id"]):
        return decision_fragment(user, event["approval_id"]) + badge
    if params.get("list") != "open":
        return badge
    context = inbox_context(user, params, changed_id=event["approval_id"])
    return render_to_string("approvals/inbox.html#inbox-rows", {**context, "oob": True}) + badge


def decision_fragment(user: Any, approval_id: int) -> str:
    """The decision box of an open request page, as it is now for `user`: someone else's
    decision (or a timeout) replaces the forms without a reload."""
    approval = approvals_visible_to(user).get(pk=approval_id)
    context = _detail_context(SimpleNamespace(user=user), approval)
    return render_to_string("approvals/detail.html#approval-decision", {**context, "oob": True})


class InboxConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=NOT_SIGNED_IN)
            return
        self.user_id = user.pk
        # Checked before any group is joined: nothing is held for a refused socket.
        params = socket_params(self.scope.get("query_string", b""))
        if params is None:
            await self.close(code=BAD_REQUEST)
            return
        self.params = params
        self.joined: list[str] = []
        try:
            for group in await database_sync_to_async(inbox_groups)(user):
                # Recorded before it is joined: a join that fails half-way is still undone.
                self.joined.append(group)
                await self.channel_layer.group_add(group, self.channel_name)
            await self.accept()
        except BaseException:
            # Channels calls no disconnect() when connect() raises.
            await self._leave()
            raise

    async def disconnect(self, code: int) -> None:
        await self._leave()

    async def _leave(self) -> None:
        joined, self.joined = getattr(self, "joined", []), []
        for group in joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def approval_changed(self, event: ApprovalChanged) -> None:
        html = await database_sync_to_async(inbox_push)(self.user_id, self.params, event)
        if html is not None:
            await self.send(text_data=html)
