"""Tool permissions in real engine runs: the caller is the user who started the trace, child
runs included.

bob views Acme, alice designs in Acme, dave operates (and designs) in Acme, ada administers
Acme.
"""

from __future__ import annotations

import pytest

from approvals.models import Approval
from approvals.services import approval_decide
from entities.models import Membership
from governance.permissions import membership_revoke
from runs.models import Run, ToolCall
from runs.services import RunRefused, run_start
from tests.factories import EntityFactory, UserFactory, grant, tool_definition
from tests.support.queued_runs import Driver
from tests.support.runs import saver, static_plan, step
from tools.models import RecordedRow, Tool
from tools.services import tool_grant_add

pytestmark = pytest.mark.smoke

OUTPUT = {"type": "object", "properties": {"launched": {"type": "boolean"}}}


@pytest.fixture
def dave(acme):
    return grant(UserFactory(username="dave"), acme, "designer", "operator")


@pytest.fixture
def ada(acme):
    return grant(UserFactory(username="ada"), acme, "admin")


def launcher(acme, name: str = "launcher"):
    """An ACTION that calls the EXECUTE tool `launch` (simulated)."""
    tool = tool_definition(
        "launch", implementation="simulated", permissions="EXECUTE", output_schema=OUTPUT
    )
    plan_step = step(1, "Launch", "TOOL_CALL", tool_id="launch")
    plan_step["input_mapping"] = {}
    return EntityFactory(workspace=acme, name=name, tools=[tool], planning=static_plan(plan_step))


def launch_tool(acme) -> Tool:
    """The registry row the launcher's inline definition was saved as."""
    return Tool.objects.get(workspace=acme, tool_id="launch")


def run_as(user, entity, *, before=None) -> Run:
    """Start a run as `user`, do `before()` (the run is queued, no step has run), drain it."""
    driver = Driver()
    run = run_start(entity=entity, input_data={"email": "ada@example.com"}, user=user)
    if before is not None:
        before()
    driver.queue.append(str(run.pk))
    driver.drain()
    run.refresh_from_db()
    return run


def test_a_viewer_or_a_designer_cannot_start_a_run(acme, bob, alice):
    entity = saver(acme)
    for user in (bob, alice):
        with pytest.raises(RunRefused) as caught:
            run_start(entity=entity, input_data={}, user=user)
        assert caught.value.code == "PERMISSION_DENIED"
        assert "the operator role is needed" in str(caught.value)
    assert not Run.objects.exists()


def test_an_operators_run_calls_a_write_tool(acme, dave):
    run = run_as(dave, saver(acme))
    assert run.status == "COMPLETED", run.error_message
    assert RecordedRow.objects.get().data == {"email": "ada@example.com"}


def test_a_run_whose_starter_is_now_only_a_designer_fails_at_the_write_tool(acme, dave):
    def demote() -> None:
        membership_revoke(membership=Membership.objects.get(user=dave, role="operator"))

    run = run_as(dave, saver(acme), before=demote)

    assert run.status == "FAILED"
    assert run.error_code == "PERMISSION_DENIED"
    assert (
        "tool save_row is a WRITE tool: dave, who started this run, needs the operator or "
        "admin role in workspace 'acme'"
    ) in run.error_message
    call = ToolCall.objects.get(run=run)
    assert not call.success and "needs the operator or admin role" in call.error_message
    assert not RecordedRow.objects.exists()


def test_a_run_whose_starter_was_deleted_is_not_a_system_run(acme, dave):
    run = run_as(dave, saver(acme), before=dave.delete)

    assert run.status == "FAILED"
    assert run.error_code == "PERMISSION_DENIED"
    assert "no longer exists" in run.error_message
    assert not RecordedRow.objects.exists()


def test_an_execute_tool_without_a_grant_asks_a_person_and_runs_with_a_grant(acme, dave, ada):
    entity = launcher(acme)
    asked = run_as(dave, entity)
    assert asked.status == "PAUSED"
    request = Approval.objects.get(run=asked)
    assert request.checkpoint_trigger == "TOOL_GRANT" and request.status == "PENDING"
    assert "dave, who started this run, holds no grant" in request.reasoning_summary
    assert request.risk_level in ("high", "critical")

    tool_grant_add(tool=launch_tool(acme), user=dave, granted_by=ada)
    granted = run_as(dave, entity)
    assert granted.status == "COMPLETED", granted.error_message
    assert not Approval.objects.filter(run=granted).exists()


def test_an_approved_execute_call_runs_without_a_grant(acme, dave, ada):
    asked = run_as(dave, launcher(acme))
    driver = Driver()
    approval_decide(approval=Approval.objects.get(run=asked), user=ada, decision="approve")
    driver.queue.append(str(asked.pk))
    driver.drain()
    asked.refresh_from_db()
    assert asked.status == "COMPLETED", asked.error_message
    assert ToolCall.objects.get(run=asked).success


def test_a_child_run_calls_with_the_permissions_of_the_user_who_started_the_trace(acme, dave, ada):
    launcher(acme)
    parent = EntityFactory(workspace=acme, name="campaign", type="SKILL", children=["launcher"])

    waiting = run_as(dave, parent)
    child = Run.objects.get(parent=waiting)
    assert child.status == "PAUSED"
    assert "dave, who started this run" in Approval.objects.get(run=child).reasoning_summary
    assert waiting.status == "WAITING"

    tool_grant_add(tool=launch_tool(acme), user=dave, granted_by=ada)
    assert run_as(dave, parent).status == "COMPLETED"


def test_a_run_started_from_the_shell_may_call_every_tool(acme):
    saving, launching = saver(acme), launcher(acme)
    for entity in (saving, launching):
        run = Driver().run(entity, {"email": "ada@example.com"})
        assert run.status == "COMPLETED", run.error_message
