"""Every way an approval changes: asked (by the run store, through runs/approval_desk.py),
decided, timed out, escalated, closed with its run. (`grep -n "def approval_"
approvals/services.py`)

A decision is taken once: the decision is one conditional UPDATE on a request still open, so
two approvers at the same moment (in two processes) produce one decision, and the other gets
`AlreadyDecided` naming who decided and when. The decision and the run's wake-up commit
together; the run is handed to the executor after commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.models import OPEN, RISK_ORDER, Approval, ApprovalStatus, Decision, JudgeDecision
from approvals.notifications import send_in_background
from approvals.tasks import notify_approval
from governance.audit import audit_record
from governance.models import AuditAction
from governance.permissions import ADMINISTER, APPROVE, has_perm
from runs.approval_desk import ApprovalRequest
from runs.engine import hitl, schemas
from runs.events import broadcast_on_commit
from runs.services import run_note, run_resume
from tools.selectors import tool_ids_usable

log = logging.getLogger(__name__)

INBOX_GROUP = "approvals_{workspace_id}"  # the channel-layer group of a workspace's inbox
FEEDBACK_MAX = 5_000


class DecisionRefused(Exception):
    """A decision that was not taken; nothing changed.

    `code` is seed 001's error code (ALREADY_DECIDED, VALIDATION_ERROR, PERMISSION_DENIED),
    `details` maps a field (`payload.subject`, `constraint`, …) to what is wrong with it."""

    status = 400

    def __init__(self, code: str, message: str, *, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.details = details or {}


class AlreadyDecided(DecisionRefused):
    status = 409

    def __init__(self, approval: Approval):
        who = approval.responded_by.get_username() if approval.responded_by else "nobody"
        at = approval.responded_at.isoformat() if approval.responded_at else "an unknown time"
        if approval.status == ApprovalStatus.TIMEOUT:
            message = f"this request timed out at {at} ({approval.timeout_action}); it is closed"
        elif approval.status == ApprovalStatus.CANCELLED:
            message = f"this request closed at {at}: its run was cancelled or ended"
        elif approval.status == ApprovalStatus.NOTIFIED:
            message = "this was a notification; there is nothing to decide"
        else:
            message = f"already decided by {who} at {at} ({approval.decision or approval.status})"
        super().__init__(
            "ALREADY_DECIDED",
            message,
            details={
                "status": approval.status,
                "decision": approval.decision,
                "responded_by": who if approval.responded_by else None,
                "responded_at": at if approval.responded_at else None,
            },
        )


def can_decide(user: Any, approval: Approval) -> bool:
    """Approvers decide a pending request; once it escalated, the workspace's admins."""
    perm = ADMINISTER if approval.status == ApprovalStatus.ESCALATED else APPROVE
    return has_perm(user, perm, approval.workspace)


def edit_problems(approval: Approval, payload: Any) -> dict[str, str]:
    """What is wrong with an edited payload, by field path (`payload` for the whole of it);
    empty when the edit is valid against the schema the engine validates with."""
    if approval.subject == "plan":
        return hitl.edited_plan_problems(payload, approval.context_snapshot.get("plan_rules"))
    schema = approval.edit_schema
    if schema is None:
        return {} if payload is not None else {"payload": "an edit needs a payload"}
    problems: dict[str, str] = {}
    validator = schemas.user_validator(schema)
    for error in sorted(validator.iter_errors(payload), key=lambda e: list(map(str, e.path))):
        where = ".".join(["payload", *map(str, error.absolute_path)])
        problems.setdefault(where, error.message)
    return problems


def constraint_problems(constraint: Any) -> dict[str, str]:
    """A locked constraint (seed 002 §3.3): {"constraint": text, "rule": JSONLogic that must
    hold before every later tool call (optional), "forbid_tools": [tool ids] (optional)}."""
    if isinstance(constraint, str):
        constraint = {"constraint": constraint}
    if not isinstance(constraint, dict):
        return {"constraint": "give the constraint as text, or as an object with 'constraint'"}
    problems = {}
    text = constraint.get("constraint")
    if not isinstance(text, str) or not text.strip():
        problems["constraint.constraint"] = "say the constraint in words (it goes to the model)"
    elif len(text) > 1_000:
        problems["constraint.constraint"] = "keep it under 1,000 characters"
    unknown = set(constraint) - {"constraint", "rule", "forbid_tools"}
    if unknown:
        problems["constraint"] = "unknown fields: " + ", ".join(sorted(unknown))
    rule = constraint.get("rule")
    if rule is not None and not isinstance(rule, dict | bool):
        problems["constraint.rule"] = 'a rule is a JSONLogic object, e.g. {"!=": [...]}'
    tools = constraint.get("forbid_tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools)
    ):
        problems["constraint.forbid_tools"] = "a list of tool ids"
    return problems


def lockable_tools(approval: Approval) -> list[str]:
    """The tool ids a locked constraint of this request may forbid: the workspace's tools
    and the built-in ones. A lock on a name no run can call would forbid nothing and read as
    a safeguard it is not."""
    return tool_ids_usable(workspace=approval.workspace_id)


def unknown_tool_problems(approval: Approval, constraint: Any) -> dict[str, str]:
    """`constraint.forbid_tools` naming a tool that does not exist, else {} (the shape is
    `constraint_problems`' to check)."""
    if isinstance(constraint, str) or not isinstance(constraint, dict):
        return {}
    tools = constraint.get("forbid_tools")
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        return {}
    known = set(lockable_tools(approval))
    unknown = [tool for tool in dict.fromkeys(tools) if tool not in known]
    if not unknown:
        return {}
    shown = ", ".join(repr(tool[:100]) for tool in unknown[:5])
    more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
    return {
        "constraint.forbid_tools": f"no tool named {shown}{more} in {approval.workspace.name} "
        "or among the built-in tools; pick from the workspace's tools"
    }


def normalized_constraint(constraint: Any) -> dict:
    if isinstance(constraint, str):
        constraint = {"constraint": constraint}
    out = {"constraint": constraint["constraint"].strip()}
    if constraint.get("rule") is not None:
        out["rule"] = constraint["rule"]
    if constraint.get("forbid_tools"):
        out["forbid_tools"] = list(dict.fromkeys(constraint["forbid_tools"]))
    return out


def approval_request(request: ApprovalRequest) -> Approval:
    """Inside the run store's transaction: record a request for a person (or, when the
    checkpoint only notifies, a notice), and after commit tell the workspace's inbox and the
    ask's EMAIL and SLACK channels. A replay of the same key keeps the first request."""
    ask = request.ask
    sealed = request.sealed
    required = ask.approval_required
    approval = Approval(
        run_id=request.run_id,
        workspace_id=request.workspace_id,
        entity_id=request.entity_id,
        trace_id=request.trace_id,
        key=ask.key,
        checkpoint_trigger=ask.trigger,
        step_name=ask.step_name[:200],
        status=ApprovalStatus.PENDING if required else ApprovalStatus.NOTIFIED,
        approval_required=required,
        requested_by=ask.requested_by[:100],
        subject=sealed["subject"],
        payload=sealed["payload"],
        edit_schema=ask.edit_schema,
        allowed_decisions=list(ask.allowed_decisions),
        context_snapshot=sealed["context_snapshot"],
        reasoning_summary=sealed["reasoning_summary"],
        confidence=ask.confidence,
        risk_level=request.risk_level,
        risk_rank=RISK_ORDER[request.risk_level],
        risk_factors=request.risk_factors,
        alternatives=sealed["alternatives"],
        cost_estimate=request.cost_estimate,
        downstream_impact={**ask.downstream_impact, "time_to_complete": request.time_to_complete},
        judge=ask.judge,
        notification_channels=list(ask.channels),
        timeout_ms=ask.timeout_ms,
        timeout_action=ask.timeout_action,
        due_at=request.now + timedelta(milliseconds=ask.timeout_ms)
        if required and ask.timeout_ms
        else None,
        resume_status=ask.resume_status,
    )
    with transaction.atomic():
        try:
            with transaction.atomic():
                approval.save(force_insert=True)
        except IntegrityError:  # asked before (a replay): keep the first request
            approval = Approval.objects.get(run_id=request.run_id, key=ask.key)
        broadcast_inbox(approval)
        if {"EMAIL", "SLACK"} & set(ask.channels):
            transaction.on_commit(lambda pk=approval.pk: dispatch_notifications(pk))
    return approval


def approval_judge_record(*, run_id: str, key: str, verdict: dict[str, Any]) -> None:
    """Keep an LLM judge's verdict on one review attempt (`<kind>:<iteration>:<attempt>:…`);
    a replay of the same attempt keeps the first."""
    _, iteration, attempt, _ = key.split(":", 3)
    try:
        with transaction.atomic():
            JudgeDecision.objects.create(
                run_id=run_id,
                key=key,
                iteration=int(iteration),
                attempt=int(attempt),
                criterion=str(verdict.get("criterion", ""))[:500],
                decision=str(verdict["decision"]),
                confidence=float(verdict["confidence"]),
                rationale=str(verdict.get("rationale", "")),
                risk_flags=list(verdict.get("risk_flags") or []),
                route=str(verdict.get("route") or "auto"),
            )
    except IntegrityError:
        pass  # kept before: a replay of the same review attempt


def approval_decide(
    *,
    approval: Approval,
    user: Any,
    decision: str,
    notes: str = "",
    payload: Any = None,
    constraint: Any = None,
) -> Approval:
    """Take a decision on an open request and let its run go on.

    approve: the run goes on with what was asked; edit: with `payload` instead (valid
    against the request's schema, else `DecisionRefused` with the field errors and the
    request stays open); reject: the step ends as its checkpoint says, `notes` is the
    feedback; lock_constraint: the run goes on and `constraint` binds the rest of it.
    Raises `AlreadyDecided` (409) when someone decided first or the timeout fired."""
    _check_decision(approval, user, decision)
    notes = _feedback(notes)
    approved, locked = _decided_values(approval, decision, payload, constraint)
    status = ApprovalStatus.REJECTED if decision == Decision.REJECT else ApprovalStatus.APPROVED
    now = timezone.now()
    with transaction.atomic():
        taken = Approval.objects.filter(pk=approval.pk, status__in=OPEN).update(
            status=status,
            decision=decision,
            reviewer_notes=notes,
            approved_payload=approved,
            locked_constraint=locked,
            responded_by=user,
            responded_at=now,
        )
        if not taken:
            raise AlreadyDecided(
                Approval.objects.select_related("responded_by").get(pk=approval.pk)
            )
        approval.refresh_from_db()
        _resume_run(approval, now, "approval.decided", decision=decision, by=user.get_username())
        audit_record(
            workspace=approval.workspace_id,
            action=AuditAction.APPROVAL_DECIDED,
            actor=user,
            target=approval,
            object_label=f"{approval.get_checkpoint_trigger_display()} of run {approval.run_id}",
            after={
                "decision": decision,
                "notes": notes,
                "approved_payload": approved,
                "locked_constraint": locked,
            },
        )
    return approval


BulkResult = Literal["decided", "already_decided", "not_allowed", "refused", "not_found"]


@dataclass(frozen=True)
class BulkOutcome:
    """What one request of a bulk decision came to, in words a person reads in the list."""

    approval_id: int
    label: str
    result: BulkResult
    message: str

    @property
    def result_label(self) -> str:
        return BULK_RESULT_LABELS[self.result]


BULK_RESULT_LABELS: dict[str, str] = {
    "decided": "Decided",
    "already_decided": "Already decided",
    "not_allowed": "Not allowed",
    "refused": "Refused",
    "not_found": "Not found",
}


def approvals_decide(
    *, approvals: dict[int, Approval | None], user: Any, decision: str, notes: str = ""
) -> list[BulkOutcome]:
    """Approve or reject several requests at once, each through `approval_decide` in its own
    transaction: one request someone else decided first, or that the user may not decide,
    is reported and leaves the others decided. `approvals` maps each asked id to the
    request the user can see, None where they cannot (reported as not found, never why)."""
    if decision not in (Decision.APPROVE, Decision.REJECT):
        raise DecisionRefused(
            "VALIDATION_ERROR",
            "several requests at once are approved or rejected; edit them one by one",
            details={"decision": "approve or reject"},
        )
    outcomes = []
    for pk, approval in approvals.items():
        if approval is None:
            outcomes.append(BulkOutcome(pk, f"Request {pk}", "not_found", "not found"))
            continue
        label = f"{approval.entity.name}: {approval.step_name or approval.checkpoint_trigger}"
        try:
            approval_decide(approval=approval, user=user, decision=decision, notes=notes)
        except AlreadyDecided as refused:
            outcomes.append(BulkOutcome(pk, label, "already_decided", str(refused)))
        except DecisionRefused as refused:
            result: BulkResult = "not_allowed" if refused.code == "PERMISSION_DENIED" else "refused"
            outcomes.append(BulkOutcome(pk, label, result, str(refused)))
        else:
            done = "approved" if decision == Decision.APPROVE else "rejected"
            outcomes.append(BulkOutcome(pk, label, "decided", done))
    return outcomes


def _check_decision(approval: Approval, user: Any, decision: str) -> None:
    """Refuse a decision that is not one, on a request that is not open, that the request
    does not take, or by someone who may not decide it."""
    if decision not in Decision.values:
        raise DecisionRefused(
            "VALIDATION_ERROR",
            f"{decision!r} is not a decision; use one of {', '.join(Decision.values)}",
            details={"decision": "one of " + ", ".join(Decision.values)},
        )
    if not approval.is_open:
        raise AlreadyDecided(approval)
    if approval.allowed_decisions and decision not in approval.allowed_decisions:
        raise DecisionRefused(
            "VALIDATION_ERROR",
            f"this request takes {', '.join(approval.allowed_decisions)}, not {decision}",
            details={"decision": "one of " + ", ".join(approval.allowed_decisions)},
        )
    if not can_decide(user, approval):
        who = "an admin" if approval.status == ApprovalStatus.ESCALATED else "an approver"
        raise DecisionRefused(
            "PERMISSION_DENIED",
            f"only {who} of {approval.workspace.name} may decide this request",
        )


def _feedback(notes: str) -> str:
    notes = (notes or "").strip()
    if len(notes) > FEEDBACK_MAX:
        raise DecisionRefused(
            "VALIDATION_ERROR",
            f"notes are limited to {FEEDBACK_MAX:,} characters",
            details={"notes": f"at most {FEEDBACK_MAX:,} characters"},
        )
    return notes


def _decided_values(
    approval: Approval, decision: str, payload: Any, constraint: Any
) -> tuple[Any, dict | None]:
    """What the run goes on with (the approved payload) and the constraint that binds it,
    checked: an edit's payload against the request's schema, a constraint's shape."""
    approved = approval.payload
    locked = None
    if decision == Decision.EDIT:
        problems = edit_problems(approval, payload)
        if problems:
            raise DecisionRefused(
                "VALIDATION_ERROR",
                "the edited payload is not valid: "
                + "; ".join(f"{k}: {v}" for k, v in problems.items()),
                details=problems,
            )
        approved = payload
    elif decision == Decision.LOCK_CONSTRAINT:
        problems = constraint_problems(constraint) or unknown_tool_problems(approval, constraint)
        if problems:
            raise DecisionRefused(
                "VALIDATION_ERROR",
                "the constraint is not valid: "
                + "; ".join(f"{k}: {v}" for k, v in problems.items()),
                details=problems,
            )
        locked = normalized_constraint(constraint)
    elif decision == Decision.REJECT:
        approved = None
    return approved, locked


def _resume_run(approval: Approval, now: Any, event: str, **payload: Any) -> None:
    """Inside the decision's transaction: the paused run goes on (runs.services.run_resume:
    its time waiting on a person does not count against the trace's deadlines), and the
    inbox hears of the change after commit."""
    run_resume(
        run_id=approval.run_id,
        trace_id=approval.trace_id,
        status=approval.resume_status,
        waited=now - approval.requested_at,
        event=event,
        payload={
            "approval_id": approval.pk,
            "trigger": approval.checkpoint_trigger,
            "step": approval.step_name,
            "status": approval.status,
            **payload,
        },
    )
    broadcast_inbox(approval)


def approval_fire_due(*, now: Any = None, limit: int = 200) -> int:
    """Fire the timeout of every open request past its due time: PROCEED and ABORT close it
    (TIMEOUT) and wake the run, which goes on or ends as the action says; ESCALATE hands it
    to the workspace's admins, notifies them and starts a new timeout. A request that times
    out again after escalating closes (TIMEOUT) and its run ends. Answers how many fired."""
    now = now or timezone.now()
    fired = 0
    due = list(
        Approval.objects.filter(status__in=OPEN, due_at__lte=now)
        .order_by("due_at")
        .values_list("pk", flat=True)[:limit]
    )
    for pk in due:
        with transaction.atomic():
            approval = (
                Approval.objects.select_for_update(skip_locked=True)
                .filter(pk=pk, status__in=OPEN, due_at__lte=now)
                .first()
            )
            if approval is None:
                continue  # decided, or another process fires it
            fired += 1
            if approval.status == ApprovalStatus.PENDING and approval.timeout_action == "ESCALATE":
                approval.status = ApprovalStatus.ESCALATED
                approval.escalated_at = now
                approval.due_at = now + timedelta(milliseconds=approval.timeout_ms or 0)
                approval.save(update_fields=["status", "escalated_at", "due_at"])
                run_note(
                    run_id=approval.run_id,
                    trace_id=approval.trace_id,
                    event="approval.escalated",
                    payload={
                        "approval_id": approval.pk,
                        "trigger": approval.checkpoint_trigger,
                        "step": approval.step_name,
                        "due_at": approval.due_at.isoformat(),
                    },
                )
                transaction.on_commit(lambda pk=approval.pk: dispatch_notifications(pk))
                broadcast_inbox(approval)
                continue
            approval.status = ApprovalStatus.TIMEOUT
            approval.responded_at = now
            proceeds = approval.timeout_action == "PROCEED" and approval.escalated_at is None
            approval.approved_payload = approval.payload if proceeds else None
            approval.save(update_fields=["status", "responded_at", "approved_payload"])
            _resume_run(
                approval,
                now,
                "approval.timed_out",
                action="PROCEED" if proceeds else "ABORT",
            )
    return fired


def approval_close_for_runs(run_ids: list[Any]) -> int:
    """Close the open requests of runs that were cancelled or ended (CANCELLED)."""
    now = timezone.now()
    closing = list(Approval.objects.filter(run_id__in=run_ids, status__in=OPEN))
    if not closing:
        return 0
    Approval.objects.filter(pk__in=[a.pk for a in closing], status__in=OPEN).update(
        status=ApprovalStatus.CANCELLED, responded_at=now
    )
    for approval in closing:
        approval.status = ApprovalStatus.CANCELLED
        broadcast_inbox(approval)
    return len(closing)


def broadcast_inbox(approval: Approval) -> None:
    """After commit, tell the open inboxes of the approval's workspace that it changed (in
    every process: without Redis, through the live relay's table, runs/relay.py)."""
    message = {
        "type": "approval.changed",
        "approval_id": approval.pk,
        "workspace_id": approval.workspace_id,
        "status": approval.status,
    }
    group = INBOX_GROUP.format(workspace_id=approval.workspace_id)
    broadcast_on_commit(group, message)


def dispatch_notifications(approval_id: int) -> None:
    """Send a request's EMAIL and SLACK notifications off the engine's path: a Celery task
    with the celery executor, a background thread with the inline one."""
    if settings.HIERARCH_EXECUTOR == "celery":
        notify_approval.delay(approval_id)
        return
    send_in_background(approval_id)
