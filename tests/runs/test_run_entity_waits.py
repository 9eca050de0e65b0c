"""`run_entity --wait` on a run that waits on a person says where to decide, and `--user`
starts the run as that user."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from approvals.models import Approval
from runs.models import Run
from tests.factories import UserFactory, grant
from tests.support.checkpoints import tool_entity


@pytest.mark.django_db(transaction=True)
def test_it_prints_where_to_decide_when_the_run_waits_on_a_person(acme, settings):
    settings.HIERARCH_EXECUTOR = "inline"
    grant(UserFactory(username="olive"), acme, "operator")
    tool_entity(acme, {"trigger": "BEFORE_TOOL_CALL"})
    out = StringIO()
    with pytest.raises(CommandError) as stopped:
        call_command(
            "run_entity", "careful", "--workspace", "acme", "--wait", "--user", "olive", stdout=out
        )
    assert stopped.value.returncode == 3  # waits on a person's decision
    printed = json.loads(out.getvalue())
    request = Approval.objects.get()
    assert printed["waits_on_a_person"]["approval_id"] == request.pk
    assert printed["waits_on_a_person"]["decide_at"].endswith(f"/approvals/{request.pk}/")
    assert Run.objects.get().created_by.username == "olive"
    (item,) = printed["needs_attention"]
    assert (item["status"], item["reason"]["code"]) == ("PAUSED", "AWAITING_DECISION")
    assert item["approval"]["approval_id"] == request.pk
    assert item["action"]["api"]["path"] == f"/api/v1/approvals/{request.pk}/decision"


def test_an_unknown_user_is_named(db, acme):
    tool_entity(acme, {"trigger": "BEFORE_TOOL_CALL"})
    with pytest.raises(CommandError, match="there is no user 'nobody'"):
        call_command("run_entity", "careful", "--workspace", "acme", "--user", "nobody")
