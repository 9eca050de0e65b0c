"""Tool permissions against the caller's workspace role (tools/access.py), through the runner
with the real `record` and `simulated` tools.

alice designs in Acme, bob views Acme, dave operates Acme, ada administers Acme, erin is
Acme's designer with an EXECUTE grant, charlie designs in Globex, root is a superuser.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from entities.models import Membership
from governance.permissions import membership_revoke
from runs.engine.ports import PERMISSION_DENIED, VALIDATION_ERROR, ToolError
from tests.factories import UserFactory, grant, make_tool
from tests.tools.conftest import invocation
from tools.access import ToolAccess
from tools.models import RecordedRow, ToolGrant
from tools.runner import RegistryToolRunner
from tools.services import GrantRefused, tool_grant_add, tool_grant_revoke

pytestmark = pytest.mark.smoke

ROW = {"table": "leads", "data": {"email": "ada@example.com"}}
LAUNCH = {
    "tool_id": "launch",
    "name": "Launch",
    "implementation": "simulated",
    "permissions": "EXECUTE",
    "function_schema": {"name": "launch", "parameters": {"type": "object"}},
    "output_schema": {"type": "object", "properties": {"launched": {"type": "boolean"}}},
}


@pytest.fixture
def dave(acme):
    return grant(UserFactory(username="dave"), acme, "operator")


@pytest.fixture
def ada(acme):
    return grant(UserFactory(username="ada"), acme, "admin")


@pytest.fixture
def launch(acme):
    return make_tool(
        acme,
        "launch",
        implementation="simulated",
        permissions="EXECUTE",
        output_schema=LAUNCH["output_schema"],
    )


@pytest.fixture
def runner() -> RegistryToolRunner:
    return RegistryToolRunner()


def write(runner, workspace, user, **kwargs):
    caller = None if user is None else user.pk
    call = invocation("record", ROW, workspace_id=workspace.pk, caller_id=caller, **kwargs)
    return runner.invoke(call)


def execute(runner, workspace, user, tool=LAUNCH):
    caller = None if user is None else user.pk
    return runner.invoke(invocation(tool, {}, workspace_id=workspace.pk, caller_id=caller))


def refused(call, *args, **kwargs) -> ToolError:
    with pytest.raises(ToolError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == PERMISSION_DENIED and caught.value.permanent
    return caught.value


# READ


def test_a_read_tool_asks_nothing_of_the_caller(runner, acme, bob):
    call = invocation("json_extract", {"data": {"a": 1}, "expression": "a"}, caller_id=bob.pk)
    with CaptureQueriesContext(connection) as queries:
        result = runner.invoke(call)
    assert result.output == 1
    assert len(queries) == 0


# WRITE


def test_a_write_tool_refuses_a_designer_naming_the_role_needed(runner, acme, alice):
    error = refused(write, runner, acme, alice)

    assert str(error) == (
        "tool record is a WRITE tool: alice, who started this run, needs the operator or "
        "admin role in workspace 'acme' to call it"
    )
    assert not RecordedRow.objects.exists()


def test_a_write_tool_admits_an_operator_and_an_admin(runner, acme, dave, ada):
    write(runner, acme, dave, key="run-1:s1:1")
    write(runner, acme, ada, key="run-2:s1:1")
    assert RecordedRow.objects.count() == 2


def test_an_operator_of_another_workspace_is_refused(runner, acme, globex):
    gus = grant(UserFactory(username="gus"), globex, "operator")
    error = refused(write, runner, acme, gus)
    assert "gus, who started this run, needs the operator or admin role" in str(error)


def test_a_sandboxed_write_has_no_effect_and_needs_no_role(runner, acme, alice):
    result = write(runner, acme, alice, sandbox=True)
    assert result.output["id"] is None
    assert not RecordedRow.objects.exists()


# EXECUTE


def test_an_execute_tool_without_a_grant_is_refused_saying_a_grant_is_needed(
    runner, acme, launch, dave
):
    error = refused(execute, runner, acme, dave)
    assert str(error) == (
        "tool launch is an EXECUTE tool: dave, who started this run, needs an explicit grant "
        "on it: an admin of workspace 'acme' adds one under Tool grants on the tool's admin "
        "page"
    )


def test_even_an_admin_needs_a_grant(runner, acme, launch, ada):
    refused(execute, runner, acme, ada)
    tool_grant_add(tool=launch, user=ada, granted_by=ada)
    assert execute(runner, acme, ada).output is not None


def test_a_grant_lets_its_user_execute_and_no_one_else(runner, acme, launch, ada, alice, dave):
    tool_grant_add(tool=launch, user=alice, granted_by=ada)

    assert isinstance(execute(runner, acme, alice).output, dict)
    refused(execute, runner, acme, dave)


def test_a_grant_on_the_same_tool_id_in_another_workspace_does_not_count(
    runner, acme, globex, launch, charlie
):
    other = make_tool(
        globex,
        "launch",
        implementation="simulated",
        permissions="EXECUTE",
        output_schema=LAUNCH["output_schema"],
    )
    tool_grant_add(tool=other, user=charlie)
    grant(charlie, acme, "operator")

    refused(execute, runner, acme, charlie)
    assert isinstance(execute(runner, globex, charlie).output, dict)


def test_a_revoked_grant_is_refused_at_the_next_call(runner, acme, launch, ada, alice):
    tool_grant_add(tool=launch, user=alice, granted_by=ada)
    execute(runner, acme, alice)
    tool_grant_revoke(grant=ToolGrant.objects.get(), revoked_by=ada)
    refused(execute, runner, acme, alice)


def test_an_execute_tool_missing_from_the_registry_cannot_be_granted(runner, acme, dave):
    missing = {**LAUNCH, "tool_id": "ghost"}
    error = refused(execute, runner, acme, dave, missing)
    assert "tool ghost is an EXECUTE tool" in str(error)


# Who is not checked, and who no longer may


def test_a_system_run_may_call_every_tool(runner, acme, launch):
    write(runner, acme, None)
    assert isinstance(execute(runner, acme, None).output, dict)


def test_a_superuser_may_call_every_tool(runner, acme, launch, root):
    write(runner, acme, root)
    assert isinstance(execute(runner, acme, root).output, dict)


def test_a_caller_who_no_longer_exists_is_refused(runner, acme):
    call = invocation("record", ROW, workspace_id=acme.pk, caller_id=987654)
    error = refused(runner.invoke, call)
    assert "the user who started this run (id 987654) no longer exists" in str(error)


def test_a_deactivated_caller_is_refused(runner, acme, dave):
    dave.is_active = False
    dave.save()
    error = refused(write, runner, acme, dave)
    assert "dave, who started this run, is deactivated" in str(error)


def test_a_role_taken_away_takes_effect_at_the_next_call_in_this_process(runner, acme, dave):
    write(runner, acme, dave, key="run-1:s1:1")
    membership_revoke(membership=Membership.objects.get(user=dave, role="operator"))
    refused(write, runner, acme, dave, key="run-1:s2:1")


def test_unknown_permissions_are_a_validation_error(runner, acme, dave):
    tool = {**LAUNCH, "permissions": "ROOT"}
    with pytest.raises(ToolError) as caught:
        execute(runner, acme, dave, tool)
    assert caught.value.code == VALIDATION_ERROR
    assert "permissions 'ROOT' is not one of READ, WRITE, EXECUTE" in str(caught.value)


# The cache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_answer_is_reused_for_a_few_seconds_then_read_again(acme, dave):
    clock = Clock()
    runner = RegistryToolRunner(access=ToolAccess(ttl_s=5, clock=clock))
    write(runner, acme, dave, key="run-1:s1:1")
    with CaptureQueriesContext(connection) as queries:
        write(runner, acme, dave, key="run-1:s2:1")
    assert not [q for q in queries if "auth_user" in q["sql"] or "guardian" in q["sql"]]

    # A change no signal reports (a deactivation by SQL) shows once the answer expires.
    get_user_model().objects.filter(pk=dave.pk).update(is_active=False)
    clock.now = 4.9
    write(runner, acme, dave, key="run-1:s3:1")
    clock.now = 5.1
    refused(write, runner, acme, dave, key="run-1:s4:1")


# Granting


def test_only_an_admin_of_the_workspace_may_grant(acme, launch, alice, dave):
    with pytest.raises(GrantRefused, match="dave may not grant tools in workspace 'acme'"):
        tool_grant_add(tool=launch, user=alice, granted_by=dave)
    assert not ToolGrant.objects.exists()


def test_a_grant_goes_to_a_member_of_the_workspace(acme, launch, ada, charlie):
    with pytest.raises(GrantRefused, match="charlie is not a member of workspace 'acme'"):
        tool_grant_add(tool=launch, user=charlie, granted_by=ada)


def test_granting_twice_keeps_one_grant(acme, launch, ada, alice):
    first = tool_grant_add(tool=launch, user=alice, granted_by=ada)
    assert tool_grant_add(tool=launch, user=alice, granted_by=ada) == first
    assert first.granted_by == ada
