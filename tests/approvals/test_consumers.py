"""The inbox websocket: who may connect, what each person is sent, and what they are not."""

from __future__ import annotations

import re

import pytest
from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser
from django.db import transaction
from django.test import Client

from approvals.consumers import BAD_REQUEST, NOT_SIGNED_IN, InboxConsumer
from approvals.models import Approval, ApprovalStatus
from approvals.services import broadcast_inbox
from config.middleware import RememberLoop
from config.routing import websocket_urlpatterns
from entities.models import Membership
from governance.permissions import membership_revoke
from tests.factories import approval_request

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True), pytest.mark.smoke]

TIMEOUT = 3


def served():
    """The websocket stack as config/asgi.py serves it."""
    return RememberLoop(
        AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
    )


async def connected(user, path: str = "/ws/approvals/") -> WebsocketCommunicator:
    # As config/asgi.py serves it: the server's loop is where in-memory layer sends must go.
    communicator = WebsocketCommunicator(RememberLoop(InboxConsumer.as_asgi()), path)
    communicator.scope["user"] = user
    accepted, _ = await communicator.connect()
    assert accepted
    return communicator


@database_sync_to_async
def ask(run, **fields) -> Approval:
    """A new request, announced after its transaction commits, as the run store does it."""
    with transaction.atomic():
        approval = approval_request(run, **fields)
        broadcast_inbox(approval)
    return approval


@database_sync_to_async
def close(approval: Approval) -> None:
    with transaction.atomic():
        Approval.objects.filter(pk=approval.pk).update(status=ApprovalStatus.APPROVED)
        approval.status = ApprovalStatus.APPROVED
        broadcast_inbox(approval)


def badge(html: str) -> str:
    found = re.search(r'<span id="inbox-badge"[^>]*hx-swap-oob="true"[^>]*>(\d+)</span>', html)
    assert found, html
    return found.group(1)


async def test_it_refuses_an_anonymous_visitor():
    communicator = WebsocketCommunicator(InboxConsumer.as_asgi(), "/ws/approvals/")
    communicator.scope["user"] = AnonymousUser()
    accepted, code = await communicator.connect()
    assert not accepted
    assert code == NOT_SIGNED_IN


async def test_it_reads_the_session_of_a_signed_in_user_through_the_asgi_stack(dave, acme_run):
    client = Client()
    await database_sync_to_async(client.force_login)(dave)
    application = served()
    headers = [
        (b"origin", b"http://testserver"),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]
    communicator = WebsocketCommunicator(application, "/ws/approvals/", headers=headers)
    accepted, _ = await communicator.connect()
    assert accepted
    await ask(acme_run)
    assert badge(await communicator.receive_from(TIMEOUT)) == "1"
    await communicator.disconnect()


async def test_it_refuses_another_origin(dave):
    client = Client()
    await database_sync_to_async(client.force_login)(dave)
    application = served()
    headers = [
        (b"origin", b"http://evil.example"),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]
    communicator = WebsocketCommunicator(application, "/ws/approvals/", headers=headers)
    accepted, _ = await communicator.connect()
    assert not accepted


BAD_QUERIES = [
    "?detail=%C2%B2",  # "²": str.isdigit() says yes, int() says no
    "?detail=-1",
    "?workspace=99999999999999999999",  # past what the id column holds
    "?entity=1e3",
    "?list=all",
    "?risk=%00",
    "?sort=price",
    "?list=open&list=open",
    "?channel=inbox_1",
    "?detail=%FF",
]


async def test_a_bad_query_parameter_is_refused_before_anything_is_joined(dave, caplog):
    # One event loop for all of them: each socket's channel is a receive on the layer.
    for query in BAD_QUERIES:
        communicator = WebsocketCommunicator(
            RememberLoop(InboxConsumer.as_asgi()), f"/ws/approvals/{query}"
        )
        communicator.scope["user"] = dave
        accepted, code = await communicator.connect()
        assert not accepted and code == BAD_REQUEST, query
        await communicator.wait(TIMEOUT)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL") or r.exc_info]


async def test_the_parameters_the_pages_send_are_taken(dave, acme_run, acme):
    communicator = await connected(
        dave,
        f"/ws/approvals/?workspace={acme.pk}&trigger=BEFORE_TOOL_CALL&risk=&sort=risk&list=open",
    )
    await ask(acme_run)
    assert badge(await communicator.receive_from(TIMEOUT)) == "1"
    await communicator.disconnect()


async def test_it_pushes_a_new_request_into_an_open_inbox(dave, acme_run):
    communicator = await connected(dave, "/ws/approvals/?list=open")
    approval = await ask(acme_run, reasoning_summary="<b>needs a look</b>")
    html = await communicator.receive_from(TIMEOUT)
    assert '<div id="inbox-rows" hx-swap-oob="true">' in html
    assert f'<tr id="approval-{approval.pk}" class="is-new">' in html
    assert "&lt;b&gt;needs a look&lt;/b&gt;" in html
    assert badge(html) == "1"
    await communicator.disconnect()


async def test_it_keeps_the_list_filters_of_the_page(dave, acme_run):
    communicator = await connected(dave, "/ws/approvals/?list=open&risk=high")
    calm = await ask(acme_run)
    html = await communicator.receive_from(TIMEOUT)
    assert f'id="approval-{calm.pk}"' not in html
    assert "No request matches these filters." in html
    assert badge(html) == "1"
    risky = await ask(acme_run, risk_level="high", risk_rank=2)
    html = await communicator.receive_from(TIMEOUT)
    assert f'id="approval-{risky.pk}"' in html
    assert badge(html) == "2"
    await communicator.disconnect()


async def test_it_removes_a_decided_request_from_the_list(dave, acme_run):
    communicator = await connected(dave, "/ws/approvals/?list=open")
    approval = await ask(acme_run)
    await communicator.receive_from(TIMEOUT)
    await close(approval)
    html = await communicator.receive_from(TIMEOUT)
    assert f'id="approval-{approval.pk}"' not in html
    assert "Nothing is waiting for you." in html
    assert badge(html) == "0"
    await communicator.disconnect()


async def test_it_pushes_only_the_badge_to_other_pages(dave, acme_run):
    communicator = await connected(dave)
    await ask(acme_run)
    html = await communicator.receive_from(TIMEOUT)
    assert "inbox-rows" not in html
    assert badge(html) == "1"
    await communicator.disconnect()


async def test_it_does_not_push_another_workspaces_request(dave, erin, globex_run):
    acme_inbox = await connected(dave, "/ws/approvals/?list=open")
    globex_inbox = await connected(erin, "/ws/approvals/?list=open")
    approval = await ask(globex_run)
    # Erin, of Globex, hears of it; by then Dave would have too.
    assert f'id="approval-{approval.pk}"' in await globex_inbox.receive_from(TIMEOUT)
    assert await acme_inbox.receive_nothing(timeout=0.3)
    await acme_inbox.disconnect()
    await globex_inbox.disconnect()


async def test_it_checks_again_before_each_push(dave, root, acme, acme_run):
    inbox = await connected(dave, "/ws/approvals/?list=open")
    witness = await connected(root, "/ws/approvals/?list=open")
    membership = await Membership.objects.aget(user=dave, workspace=acme)
    await database_sync_to_async(membership_revoke)(membership=membership)
    # Dave is still in Acme's group since he connected, but no longer one of its approvers.
    approval = await ask(acme_run)
    assert f'id="approval-{approval.pk}"' in await witness.receive_from(TIMEOUT)
    assert await inbox.receive_nothing(timeout=0.3)
    await inbox.disconnect()
    await witness.disconnect()


async def test_it_sends_nothing_about_a_request_its_user_cannot_see(
    dave, acme, acme_run, globex_run
):
    """A message naming another workspace's request, even in a group the user joined."""
    inbox = await connected(dave, "/ws/approvals/?list=open")
    foreign = await database_sync_to_async(approval_request)(globex_run)
    await get_channel_layer().group_send(
        f"approvals_{acme.pk}",
        {
            "type": "approval.changed",
            "approval_id": foreign.pk,
            "workspace_id": acme.pk,
            "status": "PENDING",
        },
    )
    # The consumer handles its messages in order: the first thing it sends is about the next.
    own = await ask(acme_run)
    html = await inbox.receive_from(TIMEOUT)
    assert f'id="approval-{own.pk}"' in html
    assert f'id="approval-{foreign.pk}"' not in html
    assert await inbox.receive_nothing(timeout=0.3)
    await inbox.disconnect()


async def test_an_open_request_page_hears_that_someone_else_decided_it(dave, root, acme_run):
    approval = await ask(acme_run)
    page = await connected(dave, f"/ws/approvals/?detail={approval.pk}")

    @database_sync_to_async
    def decided_elsewhere() -> None:
        from approvals.services import approval_decide

        with transaction.atomic():
            approval_decide(
                approval=Approval.objects.get(pk=approval.pk),
                user=root,
                decision="reject",
                notes="<i>not this week</i>",
            )

    await decided_elsewhere()
    html = await page.receive_from(TIMEOUT)
    assert '<section id="approval-decision"' in html and 'hx-swap-oob="true"' in html
    assert "Rejected" in html and "root" in html
    assert "&lt;i&gt;not this week&lt;/i&gt;" in html
    assert 'name="decision"' not in html  # the forms are gone
    assert badge(html) == "0"
    await page.disconnect()
