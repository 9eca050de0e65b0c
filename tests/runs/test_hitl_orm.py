"""Human in the loop on the real parts: the judge through litellm and the fake OpenAI server,
notifications by email (Django's outbox) and Slack (a fake webhook on loopback), edits
validated as the engine validates them, the timer thread, and what a decision may not do."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.db import DatabaseError, transaction
from django.utils import timezone

from approvals.models import Approval, JudgeDecision
from approvals.services import AlreadyDecided, DecisionRefused, approval_decide
from runs.models import Run
from runs.services import run_cancel
from tests.factories import EntityFactory, UserFactory, grant
from tests.support.checkpoints import TEXT_OUT, tool_entity
from tests.support.queued_runs import Driver


def judged(acme, *, threshold=None):
    return EntityFactory(
        workspace=acme,
        name="judged",
        io_contract=TEXT_OUT,
        logic_gate={
            "reasoning_config": {"model_provider": "openai", "model_name": "gpt-4o-mini"},
            "review_mechanism": {
                "enabled": True,
                "on_failure": "ABORT",
                "review_prompt": "Is this on brand? {output}",
                "judge_confidence_threshold": threshold,
                "success_criteria": [
                    {"criterion": "on brand", "validation_type": "LLM_JUDGE", "validator": "tone"}
                ],
            },
        },
    )


@pytest.fixture
def remote(monkeypatch, openai_server):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_API_BASE", openai_server.base_url)
    return openai_server


def verdict(**fields):
    return {
        "decision": "approve",
        "confidence": 0.9,
        "rationale": "clear call to action",
        "risk_flags": [],
        **fields,
    }


def test_a_judge_that_routes_to_human_review_opens_a_request_with_its_rationale(db, acme, remote):
    remote.reply_json({"text": "Ready for launch? Watch now."})
    remote.reply_json(verdict(route="human_review", rationale="sensitive topic: finance"))
    run = Driver().run(judged(acme), {})

    assert run.status == "PAUSED"
    request = Approval.objects.get(run=run)
    assert request.checkpoint_trigger == "REVIEW_ESCALATE"
    assert request.judge["rationale"] == "sensitive topic: finance"
    assert "sensitive topic: finance" in request.reasoning_summary
    assert request.confidence["output"] == 90
    [kept] = JudgeDecision.objects.filter(run=run)
    assert (kept.decision, kept.route, kept.attempt) == ("approve", "human_review", 1)


def test_a_judge_under_the_confidence_threshold_asks_a_person(db, acme, remote):
    remote.reply_json({"text": "Buy now."})
    remote.reply_json(verdict(confidence=0.42, route="auto"))
    run = Driver().run(judged(acme, threshold=0.6), {})
    assert run.status == "PAUSED"
    assert "0.42 is under the threshold 0.6" in Approval.objects.get(run=run).reasoning_summary


def test_a_confident_judge_passes_without_a_person_and_its_verdict_is_kept(db, acme, remote):
    remote.reply_json({"text": "Ready."})
    remote.reply_json(verdict(confidence=0.95))
    run = Driver().run(judged(acme, threshold=0.6), {})
    assert run.status == "COMPLETED", run.error_message
    assert not Approval.objects.exists()
    assert JudgeDecision.objects.get(run=run).confidence == 0.95


def test_judge_decisions_are_immutable(db, acme, remote):
    remote.reply_json({"text": "Ready."})
    remote.reply_json(verdict())
    run = Driver().run(judged(acme), {})
    kept = JudgeDecision.objects.get(run=run)
    kept.decision = "retry"
    with pytest.raises(ValueError, match="immutable"):
        kept.save()
    from django.db import connection

    if connection.vendor == "postgresql":  # the database itself refuses too
        with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
            JudgeDecision.objects.filter(pk=kept.pk).update(decision="retry")
    assert JudgeDecision.objects.get(pk=kept.pk).decision == "approve"


# -- decisions the service refuses -------------------------------------------------------------


@pytest.fixture
def paused(db, acme):
    run = Driver().run(tool_entity(acme, {"trigger": "BEFORE_TOOL_CALL"}), {})
    assert run.status == "PAUSED"
    return Approval.objects.get(run=run)


def test_an_edit_that_breaks_the_tool_schema_is_refused_at_the_field_and_stays_pending(
    paused, dave
):
    with pytest.raises(DecisionRefused) as refused:
        approval_decide(
            approval=paused, user=dave, decision="edit", payload={"template": "x", "extra": 1}
        )
    assert refused.value.code == "VALIDATION_ERROR"
    assert "payload.template" in refused.value.details
    assert "payload" in refused.value.details  # additionalProperties names the whole object
    paused.refresh_from_db()
    assert paused.status == "PENDING"
    assert Run.objects.get(pk=paused.run_id).status == "PAUSED"


def test_a_second_decision_answers_who_decided_first(paused, dave, acme):
    approval_decide(approval=paused, user=dave, decision="approve", notes="fine")
    other = grant(UserFactory(username="olga"), acme, "approver")
    with pytest.raises(AlreadyDecided) as late:
        approval_decide(approval=Approval.objects.get(pk=paused.pk), user=other, decision="reject")
    assert late.value.status == 409
    assert str(late.value).startswith("already decided by dave at ")
    assert Approval.objects.get(pk=paused.pk).decision == "approve"


def test_a_decision_after_the_timeout_fired_is_refused(db, acme, dave):
    run = Driver().run(tool_entity(acme, {"trigger": "BEFORE_TOOL_CALL", "timeout_ms": 1000}), {})
    request = Approval.objects.get(run=run)
    assert request.due_at is not None
    Approval.objects.filter(pk=request.pk).update(due_at=timezone.now())
    from approvals.services import approval_fire_due

    assert approval_fire_due() == 1
    with pytest.raises(AlreadyDecided, match="timed out"):
        approval_decide(approval=Approval.objects.get(pk=request.pk), user=dave, decision="approve")


def test_a_request_of_a_cancelled_run_closes_itself(paused, dave):
    run_cancel(run=Run.objects.get(pk=paused.run_id))
    paused.refresh_from_db()
    assert paused.status == "CANCELLED"
    with pytest.raises(AlreadyDecided, match="cancelled"):
        approval_decide(approval=paused, user=dave, decision="approve")


def test_a_viewer_cannot_decide(paused, bob):
    with pytest.raises(DecisionRefused) as refused:
        approval_decide(approval=paused, user=bob, decision="approve")
    assert refused.value.code == "PERMISSION_DENIED"
    assert Approval.objects.get(pk=paused.pk).status == "PENDING"


def test_a_plan_edit_that_drops_a_required_step_is_refused(db, acme, dave):
    steps = [
        {"step_id": f"s{n}", "order": n, "name": f"Step {n}", "type": "THOUGHT", "target": {}}
        for n in (1, 2)
    ]
    entity = EntityFactory(
        workspace=acme,
        name="planned",
        planning={"static_plan": {"enabled": True, "steps": steps}},
        governance={
            "human_oversight": {"hitl_checkpoints": [{"trigger": "AFTER_PLANNING"}]},
            "execution_limits": {"max_recursion_depth": 5},
        },
    )
    run = Driver().run(entity, {})
    request = Approval.objects.get(run=run)
    with pytest.raises(DecisionRefused) as refused:
        approval_decide(approval=request, user=dave, decision="edit", payload=request.payload[:1])
    assert "required steps cannot be dropped: s2" in refused.value.details["payload"]
    with pytest.raises(DecisionRefused) as refused:
        bad = [{**request.payload[0], "type": "TOOL_CALL", "tool_id": "nope"}, request.payload[1]]
        approval_decide(approval=request, user=dave, decision="edit", payload=bad)
    assert refused.value.details == {"payload.0.tool_id": "'nope' is not a tool of this entity"}


# -- notifications --------------------------------------------------------------------------


class _Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slack_hook():
    _Hook.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/services/T000/B000/planted-hook-456"
    server.shutdown()


def test_a_request_is_mailed_to_the_approvers_and_posted_to_slack(
    db, acme, dave, slack_hook, settings, caplog, django_capture_on_commit_callbacks
):
    from approvals.notifications import notify
    from governance.vault import secret_set

    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True  # the fake webhook listens on loopback
    secret_set(workspace=acme, name="slack-approvals", value=slack_hook, kind="WEBHOOK_URL")
    acme.slack_webhook_secret = "slack-approvals"
    acme.save()
    entity = tool_entity(
        acme, {"trigger": "BEFORE_TOOL_CALL", "notification_channels": ["EMAIL", "SLACK"]}
    )
    run = Driver().run(entity, {})
    request = Approval.objects.get(run=run)
    notify(request.pk)  # what the Celery task or the background thread runs after commit

    [message] = mail.outbox
    assert message.to == ["dave@example.com"]
    assert "careful asks for a decision" in message.subject
    assert f"/approvals/{request.pk}/" in message.body
    [posted] = _Hook.received
    assert posted["text"].startswith("*[Hierarch] careful asks for a decision")
    assert "planted-hook-456" not in caplog.text


def test_an_escalated_request_is_mailed_to_the_admins(db, acme, dave):
    from approvals.notifications import notify
    from approvals.services import approval_fire_due

    admin = grant(UserFactory(username="ada"), acme, "admin")
    entity = tool_entity(
        acme,
        {
            "trigger": "BEFORE_TOOL_CALL",
            "notification_channels": ["EMAIL"],
            "timeout_action": "ESCALATE",
            "timeout_ms": 1000,
        },
    )
    run = Driver().run(entity, {})
    request = Approval.objects.get(run=run)
    Approval.objects.filter(pk=request.pk).update(due_at=timezone.now())
    approval_fire_due()
    request.refresh_from_db()
    assert request.status == "ESCALATED" and request.due_at > timezone.now()
    notify(request.pk)
    [message] = mail.outbox
    assert message.to == [admin.email]
    assert message.subject.startswith("[Hierarch] Escalated: ")
    with pytest.raises(DecisionRefused, match="only an admin"):
        approval_decide(approval=request, user=dave, decision="approve")


@pytest.mark.django_db(transaction=True)
def test_the_timer_thread_fires_a_due_timeout_without_any_worker(acme, monkeypatch):
    from approvals import timers
    from runs import services

    hinted: list[str] = []
    # The decision resumes the run through runs.services.run_resume, which hands it on.
    monkeypatch.setattr(services, "enqueue", hinted.append)
    run = Driver().run(
        tool_entity(
            acme, {"trigger": "BEFORE_TOOL_CALL", "timeout_ms": 1000, "timeout_action": "ABORT"}
        ),
        {},
    )
    request = Approval.objects.get(run=run)
    timers.start_approval_timer(interval=0.1)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            request.refresh_from_db()
            if request.status == "TIMEOUT":
                break
            time.sleep(0.1)
    finally:
        timers.stop_approval_timer()
    assert request.status == "TIMEOUT"
    assert hinted == [str(run.pk)]  # the run is handed back to go on (here: to abort)
    fired_after = (request.responded_at - request.due_at).total_seconds()
    assert 0 <= fired_after < 1.5  # on time: within a few timer ticks of its due time
