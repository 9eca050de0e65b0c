"""Live pages in the embedded default (no Redis: the in-memory channel layer and the live
relay, runs/relay.py), with everything done by other processes than the server: an approver
has the inbox open when `manage.py run_entity` starts a run that asks before it starts, and
the request appears without a reload; the run's trace page is open when another process
approves (a CLI decision, no Celery), and the tree fills in and the request leaves the inbox,
both without a reload."""

from __future__ import annotations

import pytest

from approvals.models import Approval, ApprovalStatus
from runs.models import Run, RunStatus
from tests.browser.conftest import manage
from tests.factories import EntityFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_MS = 15_000  # a machine busy with other suites runs the engine slower

DECIDE = """
from django.contrib.auth import get_user_model
from django.db import transaction
from approvals.models import Approval
from approvals.services import approval_decide
from runs import background
with transaction.atomic():
    approval_decide(
        approval=Approval.objects.get(pk={pk}),
        user=get_user_model().objects.get(username="dave"),
        decision="approve",
    )
# This process is the run's executor now (inline): it works on it until it is done.
assert background.settle(120), "the run's steps did not settle"
"""


def launch(workspace):
    """launch (PROCESS, asks a person before it starts) → writer (AGENT) → draft (ACTION)."""
    draft = EntityFactory(workspace=workspace, name="draft")
    writer = EntityFactory(workspace=workspace, name="writer", type="AGENT", children=[draft])
    return EntityFactory(
        workspace=workspace,
        name="launch",
        type="PROCESS",
        children=[writer],
        governance={
            "human_oversight": {"hitl_checkpoints": [{"trigger": "BEFORE_EXECUTION"}]},
            "execution_limits": {"max_recursion_depth": 5},
        },
    )


def sign_in(page, next_url: str) -> None:
    page.goto(f"/admin/login/?next={next_url}")
    page.fill("#id_username", "dave")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")


def test_a_run_of_another_process_shows_live_in_the_inbox_and_its_trace(
    embedded_context, dave, acme, failures
):
    from playwright.sync_api import expect

    launch(acme)
    inbox = embedded_context.new_page()
    sign_in(inbox, "/approvals/")
    expect(inbox.locator("#inbox-rows")).to_contain_text("Nothing is waiting for you.")
    inbox.wait_for_function("window.hierarchLive === true")
    inbox.evaluate("window.pageMark = 'kept'")

    # Another process starts the run; it works on it until it waits on a person, and exits.
    manage("run_entity", "launch", "--workspace", "acme")
    run = Run.objects.get(entity__name="launch")
    assert run.status == RunStatus.PAUSED
    approval = Approval.objects.get(run=run)

    expect(inbox.locator(f"#approval-{approval.pk}")).to_contain_text("launch", timeout=LIVE_MS)
    expect(inbox.locator("#inbox-badge")).to_have_text("1")
    assert inbox.evaluate("window.pageMark") == "kept"

    trace = embedded_context.new_page()
    trace.goto(f"/runs/{run.pk}/")
    root_row = trace.locator(f"#row-{run.pk}")
    expect(root_row.locator("[data-status]")).to_have_text("Paused")
    expect(trace.locator("li.node")).to_have_count(1)
    trace.wait_for_function("window.hierarchTraceLive === true")
    trace.evaluate("window.pageMark = 'kept'")

    # Another process decides, and runs the rest of the run (the server's sweeper sleeps).
    manage("shell", "-c", DECIDE.format(pk=approval.pk))
    finished = Run.objects.get(pk=run.pk)
    assert finished.status == RunStatus.COMPLETED, (finished.error_code, finished.error_message)
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED

    writer = trace.locator("li.node.type-agent")
    expect(writer).to_have_count(1, timeout=LIVE_MS)
    expect(writer.locator(".node-name").first).to_have_text("writer")
    expect(trace.locator("li.node.type-action .node-name")).to_have_text(["draft"], timeout=LIVE_MS)
    expect(root_row.locator("[data-status]")).to_have_text("Completed", timeout=LIVE_MS)
    assert trace.evaluate("window.pageMark") == "kept"

    expect(inbox.locator(f"#approval-{approval.pk}")).to_have_count(0, timeout=LIVE_MS)
    expect(inbox.locator("#inbox-badge")).to_have_text("0")
    assert inbox.evaluate("window.pageMark") == "kept"
    assert failures == [], failures
