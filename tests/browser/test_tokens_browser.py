"""API tokens in a real browser against the live daphne server: dave makes a token on his
account page, copies it, a script (httpx) calls the API with it and sees his workspace's
request; he revokes it on the page and the same call answers 401 with the Bearer challenge.
The token is in the one answer that made it, never in the page afterwards."""

from __future__ import annotations

import httpx
import pytest

from governance.models import ApiToken
from governance.tokens import TOKEN_PATTERN, token_hash
from tests.api.factories import approval_for
from tests.factories import EntityFactory, paused_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_token_made_on_the_page_calls_the_api_until_it_is_revoked(
    console_page, asgi_server, dave, charlie, acme, globex, failures
):
    from playwright.sync_api import expect

    page = console_page
    request = approval_for(paused_run(EntityFactory(workspace=acme, name="publisher")))
    approval_for(paused_run(EntityFactory(workspace=globex, name="globex_poster")))
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=asgi_server)

    page.goto("/admin/login/?next=/account/tokens/")
    page.fill("#id_username", "dave")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator("h1")).to_have_text("API tokens")
    expect(page.locator("#token-rows")).to_contain_text("You have no API tokens yet.")

    # A blank name is refused at its field; nothing is made.
    page.fill("#id_name", "")
    page.click("button:text('Create token')")
    expect(page.locator("#id_name_error")).to_contain_text("Give the token a name")
    assert not ApiToken.objects.exists()

    page.fill("#id_name", "nightly <b>report</b>")
    page.fill("#id_days", "30")
    page.click("button:text('Create token')")
    shown = page.locator("#new-token")
    expect(shown).to_be_visible()
    plaintext = shown.input_value()
    assert TOKEN_PATTERN.fullmatch(plaintext)
    token = ApiToken.objects.get(user=dave)
    assert token.key_hash == token_hash(plaintext)
    row = page.locator(f"#token-{token.pk}")
    expect(row).to_contain_text("nightly <b>report</b>")  # the name as text, not markup
    expect(row).to_contain_text(token.prefix)
    expect(row).to_contain_text("Active")
    expect(row).to_contain_text("never")  # not used yet

    page.click("#copy-token")
    expect(page.locator("#copy-token")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == plaintext

    # A script calls the API with it: dave's workspace's request, nothing of charlie's.
    with httpx.Client(base_url=asgi_server, timeout=10) as script:
        answer = script.get("/api/v1/approvals/", headers={"Authorization": f"Bearer {plaintext}"})
        assert answer.status_code == 200, answer.text
        assert [item["id"] for item in answer.json()["results"]] == [request.pk]
    token.refresh_from_db()
    assert token.last_used_at is not None

    # Done: the page no longer holds the token, and the list says when it was used.
    page.click("a:text('Done')")
    expect(page.locator("#new-token")).to_have_count(0)
    expect(page.locator("#id_name")).to_be_visible()
    page.reload()
    assert plaintext not in page.content()
    expect(page.locator(f"#token-{token.pk}")).to_contain_text("ago")

    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"#token-{token.pk} button:text('Revoke')").click()
    expect(page.locator(f"#token-{token.pk}")).to_contain_text("Revoked")
    expect(page.locator(f"#token-{token.pk} button")).to_have_count(0)

    with httpx.Client(base_url=asgi_server, timeout=10) as script:
        answer = script.get("/api/v1/approvals/", headers={"Authorization": f"Bearer {plaintext}"})
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="api"'
    error = answer.json()["error"]
    assert error["code"] == "AUTHENTICATION_FAILED"
    assert error["message"].startswith("the token was revoked on ")
    assert failures == []
