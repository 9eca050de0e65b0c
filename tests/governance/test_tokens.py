"""API tokens: the services (only the hash is kept, the default expiry, the audit records),
`manage.py create_api_token`, and the account page (create, shown once, revoke, another
user's token is a 404, errors at the field)."""

from __future__ import annotations

import logging
import re
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from governance.audit import audit_verify
from governance.models import ApiToken, AuditAction, AuditRecord
from governance.tokens import (
    TOKEN_PATTERN,
    api_token_create,
    api_token_revoke,
    api_token_touch,
    token_hash,
)
from tests.factories import UserFactory, grant

pytestmark = pytest.mark.smoke

PAGE = reverse("account:tokens")
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _throttle_counts_of_this_test_only(settings):
    # The API calls below count against the throttle, in the cache (Redis with REDIS_URL).
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"tokens-test-{uuid.uuid4()}",
        }
    }


def revoke_url(token: ApiToken) -> str:
    return reverse("account:token_revoke", args=[token.pk])


def token_records(action: str) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(action=action).order_by("workspace_id"))


def shown_token(response) -> str:
    found = re.findall(r'id="new-token"[^>]*value="([^"]+)"', response.content.decode())
    assert len(found) == 1, response.content.decode()[:2000]
    return found[0]


# -- the services ------------------------------------------------------------------------------


def test_a_token_is_recognisable_and_only_its_hash_is_kept(alice):
    token, plaintext = api_token_create(user=alice, name="nightly import")

    assert TOKEN_PATTERN.fullmatch(plaintext)
    assert plaintext.startswith("hrc_")
    stored = ApiToken.objects.get(pk=token.pk)
    assert stored.key_hash == token_hash(plaintext) != plaintext
    assert stored.prefix == plaintext[:12]
    assert plaintext not in str(ApiToken.objects.filter(pk=token.pk).values().get())


def test_two_tokens_are_never_the_same(alice):
    _, first = api_token_create(user=alice, name="one")
    _, second = api_token_create(user=alice, name="two")

    assert first != second


def test_a_token_lives_the_configured_days_by_default(alice, settings):
    settings.HIERARCH_API = {**settings.HIERARCH_API, "TOKEN_DAYS": 30}
    before = timezone.now()

    token, _ = api_token_create(user=alice, name="monthly")

    assert before + timedelta(days=30) <= token.expires_at <= timezone.now() + timedelta(days=30)


def test_zero_configured_days_means_no_expiry(alice, settings):
    settings.HIERARCH_API = {**settings.HIERARCH_API, "TOKEN_DAYS": 0}

    token, _ = api_token_create(user=alice, name="forever")

    assert token.expires_at is None


def test_a_token_without_a_name_or_with_a_past_expiry_is_refused(alice):
    with pytest.raises(ValueError, match="a token needs a name"):
        api_token_create(user=alice, name="   ")
    with pytest.raises(ValueError, match="expiry must be in the future"):
        api_token_create(user=alice, name="late", expires_at=timezone.now() - timedelta(days=1))

    assert not ApiToken.objects.exists()


def test_making_a_token_is_audited_in_each_workspace_of_the_user_without_the_token(
    alice, acme, globex
):
    grant(alice, globex, "viewer")

    token, plaintext = api_token_create(user=alice, name="deploys")

    records = token_records(AuditAction.API_TOKEN_CREATED)
    assert [record.workspace_id for record in records] == sorted([acme.pk, globex.pk])
    for record in records:
        assert record.actor == alice
        assert record.object_id == str(token.pk)
        assert record.after["name"] == "deploys" and record.after["user"] == "alice"
        assert record.after["prefix"] == token.prefix
        assert plaintext not in str(record.after) and token.key_hash not in str(record.after)
    assert audit_verify(workspace=acme).intact and audit_verify(workspace=globex).intact


def test_a_user_in_no_workspace_makes_a_token_without_an_audit_record(db):
    loner = UserFactory(username="loner")

    api_token_create(user=loner, name="solo")

    assert token_records(AuditAction.API_TOKEN_CREATED) == []


def test_revoking_is_audited_once_and_revoking_again_changes_nothing(alice):
    token, _ = api_token_create(user=alice, name="old")

    revoked = api_token_revoke(token=token, user=alice)
    when = revoked.revoked_at
    again = api_token_revoke(token=token, user=alice)

    assert when is not None and again.revoked_at == when
    assert revoked.status == "revoked"
    [record] = token_records(AuditAction.API_TOKEN_REVOKED)
    assert record.before["revoked_at"] is None and record.after["revoked_at"]


def test_only_the_owner_or_a_superuser_revokes_a_token(alice, bob, root):
    token, _ = api_token_create(user=alice, name="mine")

    with pytest.raises(PermissionDenied):
        api_token_revoke(token=token, user=bob)
    token.refresh_from_db()
    assert token.revoked_at is None

    api_token_revoke(token=token, user=root)
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_last_used_is_written_at_most_once_a_minute(alice, django_assert_num_queries):
    token, _ = api_token_create(user=alice, name="busy")
    start = timezone.now()

    with django_assert_num_queries(1):
        api_token_touch(token, start)
    with django_assert_num_queries(0):
        api_token_touch(token, start + timedelta(seconds=59))
    api_token_touch(token, start + timedelta(seconds=61))

    token.refresh_from_db()
    assert token.last_used_at == start + timedelta(seconds=61)


def test_a_stale_copy_does_not_overwrite_a_newer_last_used(alice):
    token, _ = api_token_create(user=alice, name="busy")
    start = timezone.now()
    stale = ApiToken.objects.get(pk=token.pk)
    api_token_touch(token, start + timedelta(minutes=5))

    api_token_touch(stale, start + timedelta(minutes=4, seconds=30))

    token.refresh_from_db()
    assert token.last_used_at == start + timedelta(minutes=5)


# -- manage.py create_api_token ----------------------------------------------------------------


def create_api_token(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_api_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_command_prints_only_the_token(alice, settings):
    settings.HIERARCH_API = {**settings.HIERARCH_API, "TOKEN_DAYS": 90}

    out, err = create_api_token("alice")

    plaintext = out.strip()
    assert out == plaintext + "\n"
    assert TOKEN_PATTERN.fullmatch(plaintext)
    token = ApiToken.objects.get(key_hash=token_hash(plaintext))
    assert token.user == alice
    assert token.name == "manage.py create_api_token"
    assert timezone.now() + timedelta(days=89) < token.expires_at
    assert token.prefix in err and plaintext not in err
    # Made from the shell: the system did it, for alice.
    [record] = token_records(AuditAction.API_TOKEN_CREATED)
    assert record.actor is None and record.after["user"] == "alice"


def test_the_command_takes_a_name_and_days_or_no_expiry(alice):
    out, _ = create_api_token("alice", "--name", "ci", "--days", "7")
    forever, _ = create_api_token("alice", "--no-expiry")

    week = ApiToken.objects.get(key_hash=token_hash(out.strip()))
    assert week.name == "ci"
    assert timezone.now() + timedelta(days=6) < week.expires_at < timezone.now() + timedelta(7)
    assert ApiToken.objects.get(key_hash=token_hash(forever.strip())).expires_at is None


def test_the_command_refuses_an_unknown_or_inactive_user(alice):
    UserFactory(username="gone", is_active=False)

    with pytest.raises(CommandError, match="there is no user 'nobody'"):
        create_api_token("nobody")
    with pytest.raises(CommandError, match="user 'gone' is inactive"):
        create_api_token("gone")

    assert not ApiToken.objects.exists()


@pytest.mark.parametrize("days", ["0", "3651", "1.5", "soon", "-3"])
def test_the_command_refuses_days_that_are_not_a_whole_number_in_range(alice, days):
    with pytest.raises(CommandError, match="give a whole number from 1 to 3650"):
        create_api_token("alice", "--days", days)

    assert not ApiToken.objects.exists()


def test_the_command_refuses_days_with_no_expiry(alice):
    with pytest.raises(CommandError, match="not allowed with argument"):
        create_api_token("alice", "--days", "3", "--no-expiry")


# -- the page ----------------------------------------------------------------------------------


def test_the_page_needs_a_login(client, db):
    response = client.get(PAGE)

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_the_page_lists_only_the_users_own_tokens(client, alice, bob):
    api_token_create(user=alice, name="alice's import")
    revoked, _ = api_token_create(user=alice, name="alice's old one")
    api_token_revoke(token=revoked, user=alice)
    api_token_create(user=bob, name="bob's export")
    client.force_login(alice)

    response = client.get(PAGE)

    page = response.content.decode()
    assert response.status_code == 200
    assert "alice&#x27;s import" in page and "alice&#x27;s old one" in page
    assert "bob&#x27;s export" not in page
    assert page.count('class="pill pill-approved">Active') == 1
    assert page.count('class="pill pill-rejected">Revoked') == 1
    # One revoke button: the live token's.
    assert len(re.findall(r'hx-post="/account/tokens/\d+/revoke/"', page)) == 1


def test_the_page_says_when_there_is_no_token(client, alice):
    client.force_login(alice)

    assert "You have no API tokens yet." in client.get(PAGE).content.decode()


def test_creating_a_token_shows_it_once(client, alice):
    client.force_login(alice)

    response = client.post(PAGE, {"name": "nightly import", "days": "30"})

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    plaintext = shown_token(response)
    token = ApiToken.objects.get(user=alice)
    assert token.key_hash == token_hash(plaintext)
    assert token.name == "nightly import"
    assert timezone.now() + timedelta(days=29) < token.expires_at
    later = client.get(PAGE).content.decode()
    assert plaintext not in later
    assert token.prefix in later and "nightly import" in later


def test_creating_with_htmx_answers_the_new_token_and_the_list(client, alice):
    client.force_login(alice)

    response = client.post(PAGE, {"name": "ci", "never": "on"}, **HTMX)

    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="token-create"')
    assert 'id="token-rows"' in body and 'hx-swap-oob="true"' in body
    plaintext = shown_token(response)
    assert ApiToken.objects.get(key_hash=token_hash(plaintext)).expires_at is None
    assert "It never expires." in body


def test_a_token_name_is_shown_as_text(client, alice):
    client.force_login(alice)

    response = client.post(PAGE, {"name": "<script>alert(1)</script>", "days": "1"})

    page = response.content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.mark.parametrize(
    "data, field, message",
    [
        ({"name": "", "days": "30"}, "name", "Give the token a name, to tell it apart later."),
        ({"name": "   ", "days": "30"}, "name", "Give the token a name, to tell it apart later."),
        ({"name": "x", "days": "1.5"}, "days", "Enter a whole number of days, 1 to 3650."),
        ({"name": "x", "days": "soon"}, "days", "Enter a whole number of days, 1 to 3650."),
        ({"name": "x", "days": "0"}, "days", "Enter a whole number of days, 1 to 3650."),
        ({"name": "x", "days": "3651"}, "days", "At most 3650 days (ten years)"),
        ({"name": "x", "days": ""}, "days", "Or tick “Never expires”"),
        ({"name": "x" * 101, "days": "3"}, "name", "at most 100 characters"),
    ],
)
def test_bad_input_is_shown_at_its_field_and_nothing_is_saved(client, alice, data, field, message):
    client.force_login(alice)

    response = client.post(PAGE, data, **HTMX)

    body = response.content.decode()
    assert response.status_code == 422
    errors = re.search(rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', body, re.S)
    assert errors is not None, body
    assert message in errors.group(1)
    assert 'id="new-token"' not in body
    assert not ApiToken.objects.exists()


def test_days_are_not_read_for_a_token_that_never_expires(client, alice):
    client.force_login(alice)

    response = client.post(PAGE, {"name": "x", "days": "soon", "never": "on"})

    assert response.status_code == 200
    assert ApiToken.objects.get(user=alice).expires_at is None


def test_revoking_a_token_on_the_page(client, alice):
    token, _ = api_token_create(user=alice, name="leaked")
    client.force_login(alice)

    response = client.post(revoke_url(token), **HTMX)

    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="token-rows"')
    assert "Revoked" in body
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_revoking_without_htmx_goes_back_to_the_page(client, alice):
    token, _ = api_token_create(user=alice, name="leaked")
    client.force_login(alice)

    response = client.post(revoke_url(token))

    assert response.status_code == 302 and response["Location"] == PAGE
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_another_users_token_is_not_found(client, alice, bob):
    token, _ = api_token_create(user=alice, name="alice's")
    client.force_login(bob)

    response = client.post(revoke_url(token), **HTMX)

    assert response.status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_a_superuser_revokes_only_their_own_tokens_on_the_page(client, alice, root):
    token, _ = api_token_create(user=alice, name="alice's")
    client.force_login(root)

    assert client.post(revoke_url(token)).status_code == 404
    assert "alice&#x27;s" not in client.get(PAGE).content.decode()


def test_revoking_needs_a_post_with_a_csrf_token(alice):
    token, _ = api_token_create(user=alice, name="mine")
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    assert client.get(revoke_url(token)).status_code == 405
    assert client.post(revoke_url(token)).status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_token_is_never_logged(client, alice, acme, caplog):
    caplog.set_level(logging.DEBUG)
    client.force_login(alice)

    plaintext = shown_token(client.post(PAGE, {"name": "quiet", "days": "5"}))
    token = ApiToken.objects.get(user=alice)
    used = client.get("/api/v1/approvals/", HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    client.post(revoke_url(token))
    refused = client.get("/api/v1/approvals/", HTTP_AUTHORIZATION=f"Bearer {plaintext}")

    assert (used.status_code, refused.status_code) == (200, 401)
    assert caplog.records  # the requests were logged (the 401 at least), the token was not
    assert plaintext not in caplog.text
    assert token.key_hash not in caplog.text
