"""Deciding from the inbox list in a real browser: an approver moves with j/k, approves with a
and the dialog's confirmation, rejects with r and a reason, ticks two rows with x and
approves them at once; on a phone the row's Approve and Reject are on the screen."""

from __future__ import annotations

import pytest

from approvals.models import Approval, ApprovalStatus
from tests.factories import EntityFactory, approval_request, paused_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


def sign_in(page) -> None:
    page.goto("/admin/login/?next=/approvals/")
    page.fill("#id_username", "dave")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    page.wait_for_function("window.hierarchLive === true")


def requests(acme, n: int) -> list[Approval]:
    entity = EntityFactory(workspace=acme, name="writer")
    asked = []
    for i in range(n):
        asked.append(
            approval_request(
                paused_run(entity),
                step_name=f"step {i}",
                payload={"query": f"topic {i}"},
                context_snapshot={"tool": {"tool_id": "search", "name": "web_search"}},
            )
        )
    return asked  # the list shows the newest first


def status(approval) -> str:
    return Approval.objects.get(pk=approval.pk).status


def test_an_approver_decides_from_the_list_with_the_keyboard(console_page, dave, acme, failures):
    from playwright.sync_api import expect

    page = console_page
    first, second, third, fourth = requests(acme, 4)
    sign_in(page)
    rows = page.locator("#inbox-rows tbody tr")
    expect(rows).to_have_count(4)
    expect(page.locator(f"#approval-{first.pk}")).to_contain_text("web_search")
    expect(page.locator("#inbox-keys")).to_contain_text("Keyboard: j/k")

    # j selects the first row (the newest), j again the next, k back.
    page.keyboard.press("j")
    expect(page.locator(f"#approval-{fourth.pk}")).to_have_class("is-selected")
    page.keyboard.press("j")
    expect(page.locator(f"#approval-{third.pk}")).to_have_class("is-selected")
    expect(page.locator(f"#approval-{third.pk}")).to_be_focused()
    page.keyboard.press("k")
    page.keyboard.press("j")

    # a asks first; Cancel leaves it waiting.
    page.keyboard.press("a")
    dialog = page.locator("#decide-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Approve this request?")
    dialog.locator("button:text('Cancel')").click()
    expect(dialog).to_be_hidden()
    assert status(third) == ApprovalStatus.PENDING

    # a, then the dialog's Approve: decided, and the row leaves the list.
    page.keyboard.press("a")
    dialog.locator("[data-confirm-button]").click()
    expect(page.locator("#inbox-report")).to_contain_text("1 request decided.")
    expect(page.locator(f"#approval-{third.pk}")).to_have_count(0)
    assert status(third) == ApprovalStatus.APPROVED

    # The selection moved to the row that took its place; r asks for a reason.
    expect(page.locator(f"#approval-{second.pk}")).to_have_class("is-selected")
    page.keyboard.press("r")
    expect(dialog).to_contain_text("Reject this request?")
    reason = page.locator("#decide-reason")
    expect(reason).to_be_focused()
    page.keyboard.press("j")  # typing in the reason is not a shortcut
    expect(reason).to_have_value("j")
    reason.fill("")
    dialog.locator("[data-confirm-button]").click()  # no reason: the browser refuses
    expect(dialog).to_be_visible()
    assert status(second) == ApprovalStatus.PENDING
    reason.fill("Not this week.")
    dialog.locator("[data-confirm-button]").click()
    expect(page.locator(f"#approval-{second.pk}")).to_have_count(0)
    approval = Approval.objects.get(pk=second.pk)
    assert (approval.status, approval.reviewer_notes) == (
        ApprovalStatus.REJECTED,
        "Not this week.",
    )

    # x ticks the two rows left, then "Approve selected" decides both at once.
    expect(rows).to_have_count(2)
    page.keyboard.press("k")  # at the top already: k stays there
    page.keyboard.press("k")
    expect(page.locator(f"#approval-{fourth.pk}")).to_have_class("is-selected")
    page.keyboard.press("x")
    page.keyboard.press("j")
    page.keyboard.press("x")
    expect(page.locator("#inbox-rows input[name=ids]:checked")).to_have_count(2)
    page.click("button:text('Approve selected')")
    expect(dialog).to_contain_text("Approve these 2 requests?")
    dialog.locator("button:text('Approve 2')").click()
    expect(page.locator("#inbox-report")).to_contain_text("2 requests decided.")
    expect(page.locator("#inbox-rows")).to_contain_text("Nothing is waiting for you.")
    assert {status(fourth), status(first)} == {ApprovalStatus.APPROVED}
    expect(page.locator("#inbox-badge")).to_have_text("0")
    assert failures == []


def test_enter_opens_the_selected_request(console_page, dave, acme, failures):
    from playwright.sync_api import expect

    page = console_page
    (only,) = requests(acme, 1)
    sign_in(page)
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{page.url.split('/approvals/')[0]}/approvals/{only.pk}/")
    assert failures == []


def test_on_a_phone_each_row_can_be_approved_or_rejected_without_scrolling_sideways(
    console_page, dave, acme, failures
):
    from playwright.sync_api import expect

    page = console_page
    page.set_viewport_size(PHONE)
    first, second = requests(acme, 2)
    sign_in(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    row = page.locator(f"#approval-{first.pk}")
    for control in (
        row.locator("button:text-is('Approve')"),
        row.locator("button:text-is('Reject')"),
    ):
        expect(control).to_be_visible()
        box = control.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    row.locator("button:text-is('Reject')").click()
    dialog = page.locator("#decide-dialog")
    box = dialog.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    page.fill("#decide-reason", "Too early.")
    dialog.locator("[data-confirm-button]").click()
    expect(page.locator(f"#approval-{first.pk}")).to_have_count(0)
    assert status(first) == ApprovalStatus.REJECTED
    assert status(second) == ApprovalStatus.PENDING
    assert failures == []
