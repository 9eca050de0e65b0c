"""The inbox in a real browser, with the real engine: an approver has the inbox open when a
run reaches its BEFORE_TOOL_CALL checkpoint, and the request appears without a reload. They
open it, try tool arguments that are not JSON and then ones that break the tool's schema
(both refused at the field, the request still pending, the run still paused), approve a
valid edit, see who decided and what, and follow the run link to its trace, completed with
the edited arguments; the badge follows along."""

from __future__ import annotations

import re
import time

import pytest
from django.db import transaction

from approvals.models import Approval, ApprovalStatus
from approvals.services import broadcast_inbox
from entities.models import Entity
from runs.models import Run, RunStatus
from runs.services import run_start
from tests.factories import EntityFactory, approval_request, paused_run
from tests.support.runs import step
from tests.support.worlds import render_tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def greeter(workspace) -> Entity:
    """Renders a greeting with a tool, and asks a person before every tool call."""
    render = step(1, "Render greeting", "TOOL_CALL", tool_id="render")
    render["input_mapping"] = {"template": "hello", "variables": {}}
    return EntityFactory(
        workspace=workspace,
        name="greeter",
        tools=[render_tool()],
        planning={"static_plan": {"enabled": True, "steps": [render]}},
        io_contract={
            "output": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}}}
        },
        governance={
            "human_oversight": {"hitl_checkpoints": [{"trigger": "BEFORE_TOOL_CALL"}]},
            "execution_limits": {"max_recursion_depth": 5},
        },
    )


def wait_live(page) -> None:
    page.wait_for_function("window.hierarchLive === true")


def wait_for(predicate, what: str, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds} s for {what}")
        time.sleep(0.05)


def test_an_approver_sees_a_request_arrive_edits_the_tool_arguments_and_the_run_completes(
    console_page, dave, acme, failures
):
    from playwright.sync_api import expect

    page = console_page
    entity = greeter(acme)

    page.goto("/admin/login/?next=/approvals/")
    page.fill("#id_username", "dave")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator("#inbox-rows")).to_contain_text("Nothing is waiting for you.")
    expect(page.locator("#inbox-badge")).to_have_text("0")
    wait_live(page)

    # The run starts (this process's inline executor runs it) and pauses at the checkpoint.
    with transaction.atomic():
        run = run_start(entity=entity, input_data={})
    wait_for(lambda: Approval.objects.filter(run=run).exists(), "the checkpoint's request")
    approval = Approval.objects.get(run=run)
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED

    row = page.locator(f"#approval-{approval.pk}")
    expect(row).to_contain_text("greeter")
    expect(row).to_contain_text("Before Tool Call")
    expect(row).to_contain_text("Render greeting")
    expect(page.locator("#inbox-badge")).to_have_text("1")

    row.locator("a.row-link").click()
    expect(page.locator("h1")).to_contain_text("Before Tool Call")
    expect(page.locator("#approval-payload")).to_contain_text('"template": "hello"')
    wait_live(page)

    page.click("summary:text('Edit, then approve')")
    editor = page.locator("#id_edit-payload")
    approve_edit = page.locator("button:text('Approve with this edit')")

    editor.fill('{"template": }')
    approve_edit.click()
    expect(page.locator("#id_edit-payload_error")).to_contain_text(
        "This is not valid JSON: Expecting value at line 1, column 14."
    )
    editor.fill('{"template": 42, "variables": {}}')
    approve_edit.click()
    expect(page.locator("#id_edit-payload_error")).to_contain_text(
        "template: 42 is not of type 'string'"
    )
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED

    editor.fill('{"template": "good morning", "variables": {}}')
    approve_edit.click()
    decision = page.locator("#approval-decision")
    expect(decision).to_contain_text("Approved")
    expect(decision).to_contain_text("Edit")
    expect(decision).to_contain_text("dave")
    expect(page.locator("#approved-payload")).to_contain_text('"template": "good morning"')
    expect(page.locator("#inbox-badge")).to_have_text("0")

    approval.refresh_from_db()
    assert (approval.status, approval.decision) == (ApprovalStatus.APPROVED, "edit")
    assert approval.approved_payload == {"template": "good morning", "variables": {}}
    assert approval.responded_by == dave

    # The decision woke the run (the server's executor runs it now): it completes with the
    # arguments as the person edited them.
    wait_for(
        lambda: Run.objects.get(pk=run.pk).status not in (RunStatus.PAUSED, RunStatus.RUNNING),
        "the run to finish",
    )
    finished = Run.objects.get(pk=run.pk)
    assert finished.status == RunStatus.COMPLETED, (finished.error_code, finished.error_message)
    assert finished.output_data == {"text": "good morning"}
    # The run link opens the console's trace of the run, not the admin.
    page.click(f"a[href='/runs/{run.pk}/']")
    expect(page.locator("#trace-head")).to_have_attribute("data-status", "completed")
    expect(page.locator("#trace-live")).to_contain_text("Ended · Completed")

    page.click("a.inbox-link")
    expect(page.locator("#inbox-rows")).to_contain_text("Nothing is waiting for you.")
    assert failures == [], failures


def test_the_filters_swap_only_the_list_and_keep_it_live(console_page, dave, acme, failures):
    from playwright.sync_api import expect

    page = console_page
    run = paused_run(EntityFactory(workspace=acme, name="researcher"))
    calm = approval_request(run)

    page.goto("/admin/login/?next=/approvals/")
    page.fill("#id_username", "dave")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator(f"#approval-{calm.pk}")).to_be_visible()
    wait_live(page)

    page.evaluate("window.hierarchLive = false; window.pageMark = 'kept'")
    page.select_option("#id_risk", "high")
    expect(page.locator("#inbox-rows")).to_contain_text("No request matches these filters.")
    expect(page).to_have_url(re.compile(r"/approvals/\?risk=high&show=open$"))
    assert page.evaluate("window.pageMark") == "kept"  # swapped in place, not reloaded
    wait_live(page)  # the list's socket reopened with the new filters

    for fields in ({}, {"risk_level": "high", "risk_rank": 2}):
        with transaction.atomic():
            latest = approval_request(run, **fields)
            broadcast_inbox(latest)
    expect(page.locator(f"#approval-{latest.pk}")).to_be_visible()
    expect(page.locator("#inbox-rows tbody tr")).to_have_count(1)
    expect(page.locator("#inbox-badge")).to_have_text("3")
    assert failures == [], failures
