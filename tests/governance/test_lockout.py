"""Sign-in lockout (governance/lockout.py, django-axes): repeated failed sign-ins lock the
username and the client out of the admin's sign-in form (which is the console's: LOGIN_URL)
and of the API's bearer tokens, with a clear 429 page or seed 001 error; the lock ends after
the cool-off or with axes' reset commands.

alice designs in Acme, bob is her teammate; the limit is 3 failures here.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from governance.tokens import api_token_create
from tests.settings_process import settings_printed

LOGIN = "/admin/login/"
PASSWORD = "correct horse battery staple"
LIST = "/api/v1/approvals/"
HERE, ELSEWHERE = "198.51.100.7", "203.0.113.9"


@pytest.fixture(autouse=True)
def _three_failures_for_fifteen_minutes(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


@pytest.fixture
def staff(alice, bob):
    for user in (alice, bob):
        user.is_staff = True
        user.set_password(PASSWORD)
        user.save()
    return alice, bob


def sign_in(client, username: str, password: str, *, address: str = HERE, next: str = ""):
    data = {"username": username, "password": password}
    if next:
        data["next"] = next
    return client.post(LOGIN, data, REMOTE_ADDR=address)


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def guess(client, username: str, times: int, *, address: str = HERE) -> list[int]:
    """Sign in with a wrong password `times` times; the status of each answer."""
    answers = [
        sign_in(client, username, "wrong", address=address).status_code for _ in range(times)
    ]
    assert not signed_in(client)
    return answers


def assert_locked_page(response) -> None:
    assert response.status_code == 429
    assert response["Retry-After"] == "900"
    page = response.content.decode()
    assert "Too many failed sign-ins" in page
    assert "locked for this account and for this computer for 15 minutes" in page
    assert "axes_reset_username" in page


def test_wrong_passwords_past_the_limit_then_the_right_one_is_refused_on_the_admin(client, staff):
    guess(client, "alice", 3)

    response = sign_in(client, "alice", PASSWORD)

    assert_locked_page(response)
    assert not signed_in(client)


def test_the_console_sign_in_locks_out_too(client, staff):
    # The console sends a visitor to the admin's sign-in form (LOGIN_URL), with `next`.
    to_sign_in = client.get("/dashboard/")
    assert to_sign_in.status_code == 302
    assert to_sign_in["Location"].startswith(f"{LOGIN}?next=/dashboard/")
    for _ in range(3):
        sign_in(client, "alice", "wrong", next="/dashboard/")

    response = sign_in(client, "alice", PASSWORD, next="/dashboard/")

    assert_locked_page(response)
    assert not signed_in(client)


def test_below_the_limit_the_right_password_still_signs_in(client, staff):
    guess(client, "alice", 2)

    response = sign_in(client, "alice", PASSWORD)

    assert response.status_code == 302
    assert signed_in(client)


def test_another_user_from_the_same_client_is_locked_out_too(client, staff):
    guess(client, "alice", 3)

    assert sign_in(client, "bob", PASSWORD).status_code == 429
    assert not signed_in(client)
    # From another client bob is not locked; alice is, whichever client she uses.
    assert sign_in(client, "alice", PASSWORD, address=ELSEWHERE).status_code == 429
    assert sign_in(client, "bob", PASSWORD, address=ELSEWHERE).status_code == 302


def test_failures_from_many_clients_lock_the_username(client, staff):
    for n in range(3):
        sign_in(client, "alice", "wrong", address=f"192.0.2.{n + 1}")

    assert sign_in(client, "alice", PASSWORD, address=ELSEWHERE).status_code == 429


def test_the_lockout_ends_after_the_cool_off(client, staff):
    guess(client, "alice", 3)
    assert sign_in(client, "alice", PASSWORD).status_code == 429

    # Sixteen minutes pass: the failures are older than the cool-off.
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))

    assert sign_in(client, "alice", PASSWORD).status_code == 302
    assert signed_in(client)


@pytest.mark.parametrize(
    ("command", "arguments"),
    [("axes_reset", []), ("axes_reset_username", ["alice"]), ("axes_reset_ip", [HERE])],
)
def test_an_administrator_unlocks_with_axes_reset(client, staff, command, arguments):
    guess(client, "alice", 3)
    assert sign_in(client, "alice", PASSWORD).status_code == 429

    call_command(command, *arguments, stdout=None)

    assert sign_in(client, "alice", PASSWORD).status_code == 302


def test_a_spoofed_forwarded_for_header_does_not_dodge_the_lockout(client, staff):
    for n in range(3):
        client.post(
            LOGIN,
            {"username": f"nobody{n}", "password": "wrong"},
            REMOTE_ADDR=HERE,
            HTTP_X_FORWARDED_FOR=f"192.0.2.{n}",
        )

    assert sign_in(client, "bob", PASSWORD).status_code == 429


def test_behind_a_trusted_proxy_the_client_is_the_address_it_forwarded(client, staff, settings):
    settings.HIERARCH_LOGIN = {**settings.HIERARCH_LOGIN, "TRUSTED_PROXIES": 1}
    proxy = "10.0.0.1"
    for n in range(3):
        client.post(
            LOGIN,
            {"username": f"nobody{n}", "password": "wrong"},
            REMOTE_ADDR=proxy,
            HTTP_X_FORWARDED_FOR=f"spoofed-by-the-client, {HERE}",
        )

    locked = client.post(
        LOGIN,
        {"username": "bob", "password": PASSWORD},
        REMOTE_ADDR=proxy,
        HTTP_X_FORWARDED_FOR=HERE,
    )
    other = client.post(
        LOGIN,
        {"username": "bob", "password": PASSWORD},
        REMOTE_ADDR=proxy,
        HTTP_X_FORWARDED_FOR=ELSEWHERE,
    )

    assert (locked.status_code, other.status_code) == (429, 302)
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {HERE}


# API tokens


def bearer(plaintext: str, address: str = HERE) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {plaintext}", "REMOTE_ADDR": address}


UNKNOWN = "hrc_" + "x" * 43


def test_guessing_api_tokens_gets_429_with_the_error_object(alice):
    api = APIClient()
    _, plaintext = api_token_create(user=alice, name="script")

    answers = [api.get(LIST, **bearer(UNKNOWN)).status_code for _ in range(3)]
    locked = api.get(LIST, **bearer(plaintext))

    assert answers == [401, 401, 429]
    assert locked.status_code == 429
    assert locked["Retry-After"] == "900"
    body = locked.json()
    assert body["error"]["code"] == "LOCKED_OUT"
    assert "too many failed sign-ins from this client" in body["error"]["message"]
    assert "locked out for 15 minutes" in body["error"]["message"]
    assert set(body) == {"error", "retryable"} and body["error"]["details"] == {}
    # The token is good from another client, and its owner is not locked out of signing in.
    assert api.get(LIST, **bearer(plaintext, ELSEWHERE)).status_code == 200


def test_a_client_locked_out_by_token_guessing_cannot_sign_in_either(client, staff):
    api = APIClient()
    for _ in range(3):
        api.get(LIST, **bearer("hrc_malformed"))

    assert sign_in(client, "alice", PASSWORD).status_code == 429
    assert sign_in(client, "alice", PASSWORD, address=ELSEWHERE).status_code == 302


def test_a_failure_is_counted_even_when_the_body_does_not_parse(alice):
    api = APIClient()
    for _ in range(3):
        api.generic("POST", LIST, "{not json", content_type="application/json", **bearer(UNKNOWN))

    assert api.get(LIST, **bearer(UNKNOWN)).json()["error"]["code"] == "LOCKED_OUT"


def test_lockout_settings_come_from_the_environment():
    result = settings_printed(
        "settings.AXES_FAILURE_LIMIT",
        "settings.AXES_COOLOFF_TIME.total_seconds()",
        "settings.HIERARCH_LOGIN['TRUSTED_PROXIES']",
        HIERARCH_LOGIN_FAILURE_LIMIT="7",
        HIERARCH_LOGIN_COOLOFF_MINUTES="2.5",
        HIERARCH_TRUSTED_PROXIES="2",
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["7", "150.0", "2"]


def test_the_defaults_are_five_failures_and_fifteen_minutes():
    result = settings_printed(
        "settings.AXES_FAILURE_LIMIT",
        "settings.AXES_COOLOFF_TIME.total_seconds()",
        "settings.HIERARCH_LOGIN['TRUSTED_PROXIES']",
        without=[
            "HIERARCH_LOGIN_FAILURE_LIMIT",
            "HIERARCH_LOGIN_COOLOFF_MINUTES",
            "HIERARCH_TRUSTED_PROXIES",
        ],
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["5", "900.0", "0"]
