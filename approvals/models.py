"""Human-in-the-loop requests and the judge's decisions.

`Approval` mirrors seed 000's `human_approvals` table (run, checkpoint trigger, requested and
responded times, status, who asked and who answered, the context snapshot, reviewer notes,
notification channels, timeout) and adds seed 002's explanation packet, seed 001's judge
fields and what the engine needs to go on after the decision: the checkpoint's key in the
run, what the decision may edit (payload and schema) and the approved payload.

`JudgeDecision` keeps each LLM_JUDGE verdict of a review, one row per attempt, never changed
(seed 001: "judge decisions are immutable").

Every write goes through `approvals/services.py` and the run store.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApprovalStatus(models.TextChoices):
    PENDING = "PENDING"
    ESCALATED = "ESCALATED"  # its timeout passed; the workspace's admins decide now
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    TIMEOUT = "TIMEOUT"  # nobody decided in time; the checkpoint's timeout_action applied
    NOTIFIED = "NOTIFIED"  # a notification-only checkpoint (approval_required: false)
    CANCELLED = "CANCELLED"  # its run was cancelled or ended before anyone decided


OPEN = (ApprovalStatus.PENDING, ApprovalStatus.ESCALATED)


class Trigger(models.TextChoices):
    """Where a run asked: the five configurable checkpoints of seed 000 §3.7.3, then every
    other place that asks a person."""

    BEFORE_EXECUTION = "BEFORE_EXECUTION"
    AFTER_PLANNING = "AFTER_PLANNING"
    BEFORE_TOOL_CALL = "BEFORE_TOOL_CALL"
    ON_FAILURE = "ON_FAILURE"
    CUSTOM_CONDITION = "CUSTOM_CONDITION"
    EXIT_ESCALATE = "EXIT_ESCALATE", "Exit condition ESCALATE"
    REVIEW_ESCALATE = "REVIEW_ESCALATE", "Review asks a person"
    ACTION_RESTRICTION = "ACTION_RESTRICTION", "Action restriction"
    TOOL_GRANT = "TOOL_GRANT", "EXECUTE tool without a grant"
    SUBAGENT_SPAWN = "SUBAGENT_SPAWN", "Hiring a subordinate"


class Decision(models.TextChoices):
    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    LOCK_CONSTRAINT = "lock_constraint"


class Risk(models.TextChoices):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


RISK_ORDER = {Risk.LOW: 0, Risk.MEDIUM: 1, Risk.HIGH: 2, Risk.CRITICAL: 3}


class Approval(models.Model):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="approvals")
    # Denormalised from the run so the inbox filters without a join to the run table.
    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.CASCADE, related_name="approvals", db_index=False
    )
    entity = models.ForeignKey(
        "entities.Entity", on_delete=models.CASCADE, related_name="approvals", db_index=False
    )
    trace_id = models.UUIDField()
    # The checkpoint's place in the run (trigger, step, iteration, attempt): the engine finds
    # the decision by it when the run goes on.
    key = models.CharField(max_length=300)
    checkpoint_trigger = models.CharField(max_length=50, choices=Trigger.choices)
    step_name = models.CharField(max_length=200, blank=True)

    status = models.CharField(
        max_length=20, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING
    )
    approval_required = models.BooleanField(default=True)
    requested_at = models.DateTimeField(auto_now_add=True)
    responded_at = models.DateTimeField(null=True, blank=True)
    requested_by = models.CharField(max_length=100, blank=True)  # the entity that asked
    responded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    # What the person looks at and may change: `subject` names it (input, plan,
    # tool_arguments, output, state, failure), `payload` is it, `edit_schema` is the JSON
    # Schema an edit must satisfy (the same the engine validates against).
    subject = models.CharField(max_length=30, blank=True)
    payload = models.JSONField(null=True, blank=True)
    edit_schema = models.JSONField(null=True, blank=True)
    allowed_decisions = models.JSONField(default=list, blank=True)
    context_snapshot = models.JSONField(default=dict, blank=True)

    # Seed 002 §3.2's explanation packet, computed by the engine when it asked.
    reasoning_summary = models.CharField(max_length=500, blank=True)
    confidence = models.JSONField(default=dict, blank=True)
    risk_level = models.CharField(max_length=10, choices=Risk.choices, default=Risk.LOW)
    risk_rank = models.PositiveSmallIntegerField(default=0)  # for "riskiest first"
    risk_factors = models.JSONField(default=list, blank=True)
    alternatives = models.JSONField(default=list, blank=True)
    cost_estimate = models.JSONField(default=dict, blank=True)
    downstream_impact = models.JSONField(default=dict, blank=True)
    # Seed 001's judge fields, when an LLM judge sent the request.
    judge = models.JSONField(null=True, blank=True)

    # The decision.
    decision = models.CharField(max_length=20, choices=Decision.choices, blank=True)
    reviewer_notes = models.TextField(blank=True)
    approved_payload = models.JSONField(null=True, blank=True)
    locked_constraint = models.JSONField(null=True, blank=True)

    notification_channels = models.JSONField(default=list, blank=True)
    timeout_ms = models.PositiveIntegerField(null=True, blank=True)
    timeout_action = models.CharField(max_length=10, default="ABORT")
    due_at = models.DateTimeField(null=True, blank=True)  # when the timeout fires
    escalated_at = models.DateTimeField(null=True, blank=True)
    # The run's status once decided: PENDING when it asked before it started.
    resume_status = models.CharField(max_length=20, default="RUNNING")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "key"], name="approval_once_per_checkpoint")
        ]
        indexes = [
            models.Index(fields=["status", "-requested_at"], name="approval_status_idx"),
            models.Index(fields=["workspace", "status"], name="approval_workspace_idx"),
            models.Index(fields=["trace_id", "status"], name="approval_trace_idx"),
            models.Index(
                fields=["due_at"],
                name="approval_due_idx",
                condition=models.Q(status__in=["PENDING", "ESCALATED"], due_at__isnull=False),
            ),
        ]
        ordering = ["-requested_at"]

    def __str__(self) -> str:
        return f"{self.get_checkpoint_trigger_display()} of run {self.run_id} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status in OPEN


class JudgeDecision(models.Model):
    """One LLM judge verdict of one review attempt (seed 001 §A.3): never updated."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="judge_decisions")
    key = models.CharField(max_length=300)  # run, review, iteration, attempt, criterion
    iteration = models.PositiveIntegerField(default=1)
    attempt = models.PositiveIntegerField(default=1)
    criterion = models.CharField(max_length=500, blank=True)
    decision = models.CharField(max_length=20)  # approve | retry | escalate
    confidence = models.FloatField()
    rationale = models.TextField(blank=True)
    risk_flags = models.JSONField(default=list, blank=True)
    route = models.CharField(max_length=20, default="auto")  # auto | human_review
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="judge_once_per_key")]
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"judge {self.decision} ({self.confidence:.2f}) on run {self.run_id}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise ValueError("judge decisions are immutable; a new verdict is a new row")
        super().save(*args, **kwargs)
