"""Runs and everything a run records: steps, model calls, tool calls, events.

Mirrors seed 000 §5 (`execution_runs`, `llm_interaction_logs`, `tool_interaction_logs`) with
what DESIGN.md adds: the root run (its id is the trace id), the pinned entity version, the
workspace, the WAITING/PAUSED/CANCELLED/BLOCKED statuses, a lease for crash recovery, due
times for scheduled work, counters that include descendants, and a per-trace event sequence.
Every write goes through `runs/services.py` and `runs/store.py`.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.urls import reverse


class RunStatus(models.TextChoices):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    WAITING = "WAITING"  # on child runs
    PAUSED = "PAUSED"  # on a human
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    BLOCKED = "BLOCKED"  # a recoverable stop: budget exhausted, max passes exhausted


TERMINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
ACTIVE = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.PAUSED)


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Foreign keys whose lookups an index of Meta already serves carry no index of their own:
    # every index is one more write on each change of a run that cannot be done in place.
    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.PROTECT, related_name="runs", db_index=False
    )
    entity = models.ForeignKey(
        "entities.Entity", on_delete=models.PROTECT, related_name="runs", db_index=False
    )
    entity_version = models.ForeignKey(
        "entities.EntityVersion", on_delete=models.PROTECT, related_name="runs"
    )
    parent = models.ForeignKey(
        "self",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="children",
        db_index=False,
    )
    root = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="descendants"
    )
    trace_id = models.UUIDField(db_index=True)
    span_id = models.CharField(max_length=50, blank=True)
    # The run's trace outside Hierarch (the OpenTelemetry export, the traceparent of its calls)
    # when it is not `trace_id`: a run below an entity whose trace_id_propagation is false
    # starts one of its own, its id (runs/engine/observability.py). Null for every other run.
    export_trace_id = models.UUIDField(null=True, blank=True)
    # Which step of the parent started this run, and its place in a parallel group.
    parent_step_key = models.CharField(max_length=150, blank=True)
    group_index = models.PositiveIntegerField(default=0)
    # The children started together (a parallel group): the last of them to end wakes the parent.
    spawn_group = models.CharField(max_length=200, blank=True)
    depth = models.PositiveIntegerField(default=0)
    depth_limit = models.PositiveIntegerField(default=5)  # the root's max_recursion_depth
    lineage = models.JSONField(default=list, blank=True)  # ancestor ids, root first

    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.PENDING)
    input_data = models.JSONField(default=dict, blank=True)
    context = models.JSONField(default=dict, blank=True)
    output_data = models.JSONField(null=True, blank=True)
    state = models.JSONField(default=dict, blank=True)
    dynamic_plan = models.JSONField(null=True, blank=True)  # the reconciled plan, as run
    cursor = models.PositiveIntegerField(default=0)  # index in the plan of the next step
    iteration = models.PositiveIntegerField(default=1)
    attempt = models.PositiveIntegerField(default=1)  # of the step at the cursor
    error_code = models.CharField(max_length=50, blank=True)
    error_message = models.TextField(blank=True)

    # The run keeps its starter's id when the user is deleted (no database constraint): its
    # tool calls are then checked as that missing user and refused, never taken for a
    # system run's (a run started with no user, from the shell).
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    execution_time_ms = models.PositiveIntegerField(null=True, blank=True)
    # Of that, the time spent waiting on a person (its own requests and its descendants',
    # from the request to the decision or timeout; runs.services.run_resume): the
    # dashboard's run time leaves it out. A database default: child runs are inserted in SQL
    # that names only the columns it sets.
    human_wait_ms = models.PositiveBigIntegerField(default=0, db_default=0)

    # Counters of this run and all its descendants.
    total_cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    total_tokens = models.PositiveBigIntegerField(default=0)
    llm_calls = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)

    # Durable execution: who works on the run until when, and when it should be looked at
    # again (a retry backoff, a sweep).
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    wake_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # Governance (seed 000 §3.7): the run's deadline, its call limits (of the run and its
    # descendants), and its budget. A budget follows seed 004: a child with a budget of its
    # own reserves it from the nearest ancestor with a budget (its anchor) when it starts and
    # gives back what it did not use when it ends; a call reserves its estimated cost at the
    # run's anchor before it is made. `total_cost_usd + reserved_usd <= budget_usd` holds at
    # every moment.
    deadline_at = models.DateTimeField(null=True, blank=True)
    max_llm_calls = models.PositiveIntegerField(null=True, blank=True)
    max_tool_calls = models.PositiveIntegerField(null=True, blank=True)
    budget_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    reserved_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    budget_anchor = models.UUIDField(null=True, blank=True)  # the nearest run with a budget
    limited = models.BooleanField(default=False)  # a call limit applies here or above
    # A designer's "Try it" from the editor, and every run under it: drafts may run, and the
    # lists and dashboards keep trials apart from production runs.
    trial = models.BooleanField(default=False)
    # Every tool call of the run (and below) is sandboxed: no external effect.
    sandbox = models.BooleanField(default=False)
    # Passes a person gave the run past its loop's max_iterations when it ran out of them
    # (BLOCKED, MAX_PASSES_EXHAUSTED; runs.services.run_grant_passes).
    passes_granted = models.PositiveIntegerField(default=0, db_default=0)
    # alert_threshold_usd: the write that takes the run's cost across it raises the alert.
    cost_alert_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)

    # Whether the last claim found the lease of a worker that did not finish its advance:
    # the engine then looks for the calls that worker recorded before paying for them again.
    resumed = models.BooleanField(default=False)
    # Where the end of a root run is POSTed (runs/webhooks.py); blank for none. The engine's
    # claim reads it with the rest of the run, so a run without one costs no extra query when
    # it ends; a database default, so the engine's own inserts of child runs leave it out.
    webhook_url = models.CharField(max_length=2048, blank=True, default="", db_default="")
    # A subordinate hired at run time (runs/engine/hiring.py): the role and task its hirer
    # gave it and why; `hired_by` is the hirer (its parent). Null for every other run.
    role = models.CharField(max_length=200, null=True, blank=True)
    task = models.TextField(null=True, blank=True)
    hired_reason = models.TextField(null=True, blank=True)
    hired_by = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="hires",
        db_index=False,
    )
    # A fired subordinate: why, and who fired it ("hirer", "limit", "operator <username>").
    fired_reason = models.TextField(null=True, blank=True)
    fired_by = models.CharField(max_length=200, null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["entity"], name="run_entity_idx"),
            models.Index(fields=["status"], name="run_status_idx"),
            models.Index(fields=["-started_at"], name="run_started_idx"),
            models.Index(fields=["workspace", "-created_at"], name="run_workspace_idx"),
            models.Index(fields=["parent", "parent_step_key"], name="run_parent_step_idx"),
            # The dashboard's executions by when they ended: root runs only, so the engine's
            # writes of child runs (nearly all of them) pay nothing for it.
            models.Index(
                fields=["completed_at"],
                condition=models.Q(parent__isnull=True),
                name="run_root_completed_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse("runs:detail", args=[self.pk])  # the live trace page

    @property
    def is_root(self) -> bool:
        return self.parent_id is None


class StepStatus(models.TextChoices):
    RUNNING = "RUNNING"
    WAITING = "WAITING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"


class StepRun(models.Model):
    """One attempt of one plan step in one iteration."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    step_key = models.CharField(max_length=150)
    position = models.PositiveIntegerField()
    iteration = models.PositiveIntegerField(default=1)
    attempt = models.PositiveIntegerField(default=1)
    name = models.CharField(max_length=200)
    type = models.CharField(max_length=30)
    status = models.CharField(max_length=20, choices=StepStatus.choices)
    input = models.JSONField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=50, blank=True)
    error_message = models.TextField(blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["started_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step_key", "iteration", "attempt"], name="steprun_unique_attempt"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} #{self.attempt} ({self.status})"


class LLMCall(models.Model):
    """One model call (seed 000 §5 `llm_interaction_logs`)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="llm_call_rows", db_index=False
    )
    step = models.ForeignKey(
        StepRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="llm_calls"
    )
    call_key = models.CharField(max_length=300, unique=True)
    purpose = models.CharField(max_length=30, default="THOUGHT")
    timestamp = models.DateTimeField(auto_now_add=True)
    model_provider = models.CharField(max_length=50)
    model_name = models.CharField(max_length=100)
    input_prompt = models.TextField()
    output_response = models.TextField()
    prompt_tokens = models.PositiveIntegerField()
    completion_tokens = models.PositiveIntegerField()
    total_tokens = models.PositiveIntegerField()
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6)
    latency_ms = models.PositiveIntegerField()
    temperature = models.FloatField(null=True, blank=True)
    reasoning_mode = models.CharField(max_length=50, blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name = "LLM call"
        ordering = ["timestamp"]
        indexes = [
            models.Index(fields=["run"], name="llm_logs_run_idx"),
            models.Index(fields=["-timestamp"], name="llm_logs_timestamp_idx"),
            models.Index(fields=["model_provider", "model_name"], name="llm_logs_model_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.model_provider}/{self.model_name} ({self.total_tokens} tokens)"


class ToolCall(models.Model):
    """One tool call (seed 000 §5 `tool_interaction_logs`)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="tool_call_rows", db_index=False
    )
    step = models.ForeignKey(
        StepRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="tool_calls"
    )
    idempotency_key = models.CharField(max_length=300, unique=True)
    timestamp = models.DateTimeField(auto_now_add=True)
    tool_id = models.CharField(max_length=100)
    tool_name = models.CharField(max_length=200)
    provider = models.CharField(max_length=50, blank=True)
    input_parameters = models.JSONField()
    output_result = models.JSONField(null=True, blank=True)
    success = models.BooleanField()
    error_message = models.TextField(blank=True)
    latency_ms = models.PositiveIntegerField()
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["timestamp"]
        indexes = [
            models.Index(fields=["run"], name="tool_logs_run_idx"),
            models.Index(fields=["tool_id"], name="tool_logs_tool_idx"),
            models.Index(fields=["-timestamp"], name="tool_logs_timestamp_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_id} ({'ok' if self.success else 'failed'})"


class TraceSequence(models.Model):
    """The last event number of a trace: a narrow row, so numbering an event does not rewrite
    the root run's wide one."""

    trace_id = models.UUIDField(primary_key=True)
    last_seq = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.trace_id}: {self.last_seq}"


class RunEvent(models.Model):
    """The append-only, per-trace ordered event log the live trace replays."""

    trace_id = models.UUIDField()
    seq = models.PositiveBigIntegerField()
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=50)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["trace_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["trace_id", "seq"], name="runevent_unique_seq")
        ]

    def __str__(self) -> str:
        return f"{self.trace_id}#{self.seq} {self.type}"


class Broadcast(models.Model):
    """A channel-layer message another process may need to hear, kept for a minute (the live
    relay of the embedded default, `runs/relay.py`): the in-memory layer reaches only the
    sockets of the process that sends, so the server process reads these and re-sends the
    ones other processes wrote. Written only when no shared (Redis) layer is configured.

    Trace events need no row here: the server reads them from RunEvent. The message is the
    one the layer carries (ids and a status), nothing more."""

    group = models.CharField(max_length=100)
    message = models.JSONField()
    # The process that sent it to its own layer already (`runs.events.PROCESS`): it does not
    # hear it twice.
    origin = models.CharField(max_length=32)
    created_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.group} #{self.pk}"


class Artifact(models.Model):
    """A large object (over 10 KB) of a run's context, stored once by its content digest."""

    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.CASCADE, related_name="artifacts"
    )
    digest = models.CharField(max_length=64)
    content = models.TextField()
    size = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "digest"], name="artifact_unique_digest")
        ]

    def __str__(self) -> str:
        return f"artifact {self.digest[:12]} ({self.size} bytes)"


class MemoryScope(models.TextChoices):
    SESSION = "SESSION"  # one trace: cleared when it ends
    ENTITY = "ENTITY"  # one entity, across its runs
    GLOBAL = "GLOBAL"  # the whole workspace


class MemoryItem(models.Model):
    """What an entity remembers (seed 000 §3.6.2), in the database."""

    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.CASCADE, related_name="memory_items"
    )
    scope = models.CharField(max_length=10, choices=MemoryScope.choices)
    entity = models.ForeignKey(
        "entities.Entity", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    session = models.UUIDField(null=True, blank=True)  # the trace, for SESSION memory
    run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    content = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["workspace", "scope", "entity", "-created_at"], name="memory_idx"),
            models.Index(fields=["session"], name="memory_session_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.scope} memory {self.pk}"


class IdempotencyKey(models.Model):
    """An `Idempotency-Key` a client sent with an execute (seed 001): the same key and body
    answer the same run; the same key with another body is refused. Keys belong to a user in
    a workspace and live HIERARCH_API["IDEMPOTENCY_HOURS"] (24 by default)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    key = models.CharField(max_length=255)
    # SHA-256 of the canonical JSON of the entity and the request body.
    request_hash = models.CharField(max_length=64)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "user", "key"], name="idempotency_unique_key"
            )
        ]
        indexes = [models.Index(fields=["expires_at"], name="idempotency_expiry_idx")]

    def __str__(self) -> str:
        return f"{self.key} → run {self.run_id}"


class WebhookStatus(models.TextChoices):
    PENDING = "PENDING"  # due at `due_at`
    SENDING = "SENDING"  # claimed by a worker until `claimed_until`
    DELIVERED = "DELIVERED"  # answered 2xx
    FAILED = "FAILED"  # any other answer, a timeout, or a refused address


class WebhookDelivery(models.Model):
    """One attempt to POST a root run's end to its webhook_url. The attempts of one delivery
    share `delivery_id` (the X-Hierarch-Delivery header, for a receiver to drop duplicates);
    a failed attempt makes the next one, due after an exponential backoff, until
    HIERARCH_WEBHOOKS["MAX_ATTEMPTS"]."""

    delivery_id = models.UUIDField()
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="webhook_deliveries")
    url = models.CharField(max_length=2048)
    event = models.CharField(max_length=50)
    attempt = models.PositiveIntegerField(default=1)
    status = models.CharField(
        max_length=20, choices=WebhookStatus.choices, default=WebhookStatus.PENDING
    )
    due_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    attempted_at = models.DateTimeField(null=True, blank=True)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    # What went wrong, for a person: the host and the kind of failure, never the secret or
    # the URL's query.
    error = models.TextField(blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        ordering = ["run", "delivery_id", "attempt"]
        constraints = [
            models.UniqueConstraint(
                fields=["delivery_id", "attempt"], name="webhook_unique_attempt"
            )
        ]
        indexes = [models.Index(fields=["status", "due_at"], name="webhook_due_idx")]

    def __str__(self) -> str:
        return f"webhook {self.delivery_id} #{self.attempt} ({self.status})"


class RunMetric(models.Model):
    """One custom metric of a run (the entity's `observability.metrics.custom_metrics`): the
    number its output held at the metric's name when the run ended. The run's workspace,
    entity and end are copied here so the dashboard aggregates these rows alone."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metrics", db_index=False)
    workspace = models.ForeignKey(
        "entities.Workspace", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    entity = models.ForeignKey(
        "entities.Entity", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    name = models.CharField(max_length=100)
    value = models.FloatField()
    recorded_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "name"], name="run_metric_once"),
        ]
        indexes = [
            models.Index(fields=["workspace", "recorded_at"], name="run_metric_window_idx"),
            models.Index(fields=["entity", "recorded_at"], name="run_metric_entity_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name}={self.value} (run {self.run_id})"
