"""The runs API (issue 6; seed 000 §7): execute an entity, list runs, read one run and its
trace tree, cancel, re-run, and the workspace's webhook secret. This app's routes are
`urlpatterns`, gathered in config/api.py.

Reads go through `runs.selectors` (a run of another workspace is a 404), starts and cancels
through `runs.services`, whose refusals the API's exception handler turns into seed 001's
error object. Execute and re-run are throttled per user and per workspace
(`runs.throttles.WorkspaceRateThrottle`).

Execute, where seed 000 §7.1 is silent:
- `started_at` is when the run was accepted (its row's creation) until a worker starts it;
- `estimated_completion` is `started_at` plus the median execution time of the entity's
  latest completed root runs (up to 20, cached for a minute), null until it has one;
- `execution_options.async: false` waits for the run to end, up to
  HIERARCH_API["SYNC_WAIT_SECONDS"] (30 s by default), and answers 200 with the run document
  of GET /runs/{id}; a run still going then (or waiting on a person) answers 202 as async does;
- `Idempotency-Key` (up to 255 printable characters) is kept per user and workspace for
  HIERARCH_API["IDEMPOTENCY_HOURS"] (24 by default); a repeat answers the first request's run
  with `Idempotent-Replayed: true`, waiting as the first did when it asked to.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import QuerySet
from django.http import Http404
from django.urls import path, re_path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from config.api_contract import StrictSerializer, error_responses
from config.api_lists import ChoicesFilter, FilteredListAPIView, ListFilters
from entities.selectors import entity_get, workspace_find
from entities.serializers import EntityRefSerializer, WorkspaceRefSerializer
from governance.permissions import ADMINISTER, has_perm
from runs.models import TERMINAL, Run, RunStatus
from runs.selectors import run_document, run_duration_estimate, run_get, run_list, trace_tree
from runs.services import (
    FIRE_REASON_MAX,
    MOST_PASSES_GRANTED,
    run_cancel,
    run_execute,
    run_fire,
    run_grant_passes,
    run_raise_budget,
    run_rerun,
)
from runs.throttles import WorkspaceRateThrottle
from runs.webhooks import WebhookRefused, webhook_secret, webhook_url_check

if TYPE_CHECKING:  # the entity a selector found: typed, not queried here
    from entities.models import Entity

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]([ -~]{0,253}[!-~])?$"
STATUS_HELP = "One of " + ", ".join(RunStatus.values) + "."
STARTS_THROTTLES = [*api_settings.DEFAULT_THROTTLE_CLASSES, WorkspaceRateThrottle]


def trace_url(run_id: Any) -> str:
    """The run's live trace page, absolute."""
    return f"{settings.HIERARCH_BASE_URL.rstrip('/')}/runs/{run_id}/"


def _iso(moment: Any) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


# -- what a client sends ------------------------------------------------------------------------


class ExecutionOptionsSerializer(StrictSerializer):
    webhook_url = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        help_text="Where to POST the run document when the run ends: http(s), no user name or "
        "password, a public address. Signed with the workspace's webhook secret "
        "(X-Hierarch-Signature: sha256=HMAC-SHA256 of the body).",
    )

    version = serializers.RegexField(
        r"^[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}$",
        required=False,
        allow_blank=True,
        max_length=32,
        help_text="A version of the entity to run (its SemVer, e.g. 1.2.0), instead of the "
        "newest. The entities below it run their newest versions as they are when the run "
        "starts, pinned for the whole run.",
    )

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        # `async` is a keyword in Python, so it cannot be declared as an attribute.
        fields["async"] = serializers.BooleanField(
            default=True,
            help_text="true (the default): answer 202 at once. false: wait for the run to "
            "end (bounded) and answer 200 with the run document.",
        )
        return fields

    def validate_webhook_url(self, value: str) -> str:
        if not value:
            return ""
        try:
            return webhook_url_check(value)
        except WebhookRefused as refused:
            raise serializers.ValidationError(str(refused)) from None


class ExecuteSerializer(StrictSerializer):
    """What to run: the input, what the caller keeps with the run, and how (waiting for the
    end or not, a webhook)."""

    # Objects, and the schema says so: a DictField refuses anything else, null included.
    input_data = serializers.DictField(
        required=False,
        help_text="The run's input, valid against the entity's io_contract input schema "
        "({} when left out).",
        error_messages={"not_a_dict": "must be a JSON object"},
    )
    context = serializers.DictField(
        required=False,
        help_text="Anything the caller wants kept with the run.",
        error_messages={"not_a_dict": "must be a JSON object"},
    )
    execution_options = ExecutionOptionsSerializer(required=False)


class RunFilters(ListFilters):
    """The list's query string."""

    status = ChoicesFilter(
        choices=RunStatus.values,
        noun="status",
        help_text="One or more statuses, repeated or comma-separated, in any case.",
    )
    entity = serializers.UUIDField(
        required=False,
        help_text="An entity's id.",
        error_messages={"invalid": '"{value}" is not an entity id (a UUID)'},
    )
    workspace = serializers.CharField(required=False, help_text="A workspace's id or slug.")
    root_only = serializers.BooleanField(
        required=False,
        default=True,
        help_text="true (the default): the runs started from outside only; false: child runs too.",
    )
    created_after = serializers.DateTimeField(
        required=False, help_text="ISO 8601; runs created at or after it."
    )
    created_before = serializers.DateTimeField(
        required=False,
        help_text="ISO 8601; runs created before it (none when it is not after created_after).",
    )

    def narrow(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        filters = self.validated_data
        if filters.get("root_only", True):
            runs = runs.filter(parent__isnull=True)
        if "status" in filters:
            runs = runs.filter(status__in=filters["status"])
        if "entity" in filters:
            runs = runs.filter(entity_id=filters["entity"])
        if "workspace" in filters:
            runs = runs.filter(workspace=filters["workspace"])
        if "created_after" in filters:
            runs = runs.filter(created_at__gte=filters["created_after"])
        if "created_before" in filters:
            runs = runs.filter(created_at__lt=filters["created_before"])
        return runs


# -- what the API answers (these describe the documents of runs.selectors) ---------------------


class ExecuteAnswerSerializer(serializers.Serializer):
    """A run started: its id, status, and where to follow it."""

    run_id = serializers.UUIDField()
    status = serializers.CharField(help_text=STATUS_HELP)
    started_at = serializers.DateTimeField(
        help_text="When the run was accepted (a worker starts it moments later)."
    )
    estimated_completion = serializers.DateTimeField(
        allow_null=True,
        help_text="started_at plus the median duration of the entity's latest completed "
        "runs; null before the entity has completed one.",
    )
    trace_url = serializers.URLField(help_text="The run's live trace page.")


class RunErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class RunMetricsSerializer(serializers.Serializer):
    total_cost_usd = serializers.FloatField()
    total_tokens = serializers.IntegerField()
    execution_time_ms = serializers.IntegerField(allow_null=True)
    llm_calls = serializers.IntegerField()
    tool_calls = serializers.IntegerField()


# A subordinate hired at run time (runs/engine/hiring.py); null for a designed child.
ROLE_HELP = "A hired subordinate's role, as its hirer gave it; null for a designed run."
TASK_HELP = "A hired subordinate's task, as its hirer gave it; null for a designed run."
REASON_HELP = "Why its hirer hired it; null for a designed run."
FIRED_HELP = (
    "Why it was fired (POST /runs/{id}/fire, or its hirer ended while it ran); null unless it was."
)
FIRED_BY_HELP = (
    'Who fired it: an operator ("operator <name>"), "limit" (its hirer\'s time limit or '
    'budget) or "hirer" (its hirer failed or was cancelled); null unless it was fired.'
)


class ChildRunSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    entity_id = serializers.CharField()
    entity_version = serializers.CharField(
        help_text="The SemVer of the entity's version the run runs: pinned for the whole "
        "tree when the root run started."
    )
    status = serializers.CharField(help_text=STATUS_HELP)
    # Only on a child hired at run time.
    role = serializers.CharField(required=False, help_text=ROLE_HELP)
    task = serializers.CharField(required=False, help_text=TASK_HELP)
    hired_reason = serializers.CharField(required=False, help_text=REASON_HELP)
    fired_reason = serializers.CharField(required=False, allow_null=True, help_text=FIRED_HELP)
    fired_by = serializers.CharField(required=False, allow_null=True, help_text=FIRED_BY_HELP)


class AttentionReasonSerializer(serializers.Serializer):
    code = serializers.CharField(
        help_text="The run's error code (BUDGET_EXHAUSTED, MAX_PASSES_EXHAUSTED…), or "
        "AWAITING_DECISION for a request a person decides."
    )
    message = serializers.CharField()


class AttentionCallSerializer(serializers.Serializer):
    method = serializers.CharField()
    path = serializers.CharField()
    body = serializers.JSONField(help_text="What to send: an example of the body.")


class AttentionActionSerializer(serializers.Serializer):
    what = serializers.CharField(help_text="What to do, in words.")
    console_url = serializers.URLField(help_text="The page of the console to do it on.")
    api = AttentionCallSerializer(
        allow_null=True, help_text="The API call that does it; null when there is none."
    )


class AttentionApprovalSerializer(serializers.Serializer):
    approval_id = serializers.IntegerField()
    trigger = serializers.CharField()
    step = serializers.CharField()


class AttentionSerializer(serializers.Serializer):
    """A run (this one or below it) that waits on a person, and where to act."""

    run_id = serializers.UUIDField()
    entity_name = serializers.CharField()
    status = serializers.CharField(help_text="BLOCKED or PAUSED.")
    reason = AttentionReasonSerializer()
    console_url = serializers.URLField(help_text="The run on its trace page.")
    action = AttentionActionSerializer()
    approval = AttentionApprovalSerializer(
        required=False, help_text="For a PAUSED run: the request to decide."
    )


class RunDocumentSerializer(serializers.Serializer):
    """One run: its status, output, metrics and direct child runs."""

    run_id = serializers.UUIDField()
    entity_id = serializers.CharField(help_text="The entity's string id, else its UUID.")
    entity_name = serializers.CharField()
    entity_version = serializers.CharField(
        help_text="The SemVer of the entity's version the run runs: pinned for the whole "
        "tree when the root run started."
    )
    status = serializers.CharField(help_text=STATUS_HELP)
    started_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)
    output_data = serializers.JSONField(allow_null=True)
    error = RunErrorSerializer(allow_null=True)
    metrics = RunMetricsSerializer()
    child_runs = ChildRunSerializer(many=True)
    needs_attention = AttentionSerializer(
        many=True,
        help_text="The runs at or below this one that are BLOCKED or PAUSED, shallowest "
        "first (at most 50): what the run waits on a person for. Empty when nothing waits.",
    )


class ToolCallNodeSerializer(serializers.Serializer):
    tool_id = serializers.CharField()
    latency_ms = serializers.IntegerField()
    success = serializers.BooleanField()


class LLMCallNodeSerializer(serializers.Serializer):
    model = serializers.CharField()
    tokens = serializers.IntegerField()
    latency_ms = serializers.IntegerField()
    purpose = serializers.CharField()


class TraceNodeSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    entity_name = serializers.CharField()
    entity_version = serializers.CharField(
        help_text="The SemVer of the entity's version the run runs: pinned for the whole "
        "tree when the root run started."
    )
    type = serializers.CharField()
    status = serializers.CharField(help_text=STATUS_HELP)
    started_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)
    error_code = serializers.CharField(allow_null=True)
    cost_usd = serializers.FloatField()
    budget_usd = serializers.FloatField(
        allow_null=True,
        help_text="The run's own budget in US dollars (a hired subordinate's: set aside from "
        "its hirer's while it works), or null when it spends its parent's.",
    )
    tokens = serializers.IntegerField()
    tool_calls = ToolCallNodeSerializer(many=True)
    llm_calls = LLMCallNodeSerializer(many=True)
    role = serializers.CharField(allow_null=True, help_text=ROLE_HELP)
    task = serializers.CharField(allow_null=True, help_text=TASK_HELP)
    hired_reason = serializers.CharField(allow_null=True, help_text=REASON_HELP)
    fired_reason = serializers.CharField(allow_null=True, help_text=FIRED_HELP)
    fired_by = serializers.CharField(allow_null=True, help_text=FIRED_BY_HELP)


class TraceTreeSerializer(serializers.Serializer):
    node = TraceNodeSerializer()
    children = serializers.ListField(
        child=serializers.DictField(), help_text="Trace trees of the same shape, one per child."
    )


class TraceSerializer(serializers.Serializer):
    """A run's trace: the tree of runs below it with their calls."""

    run_id = serializers.UUIDField()
    trace_tree = TraceTreeSerializer()


class RunSummarySerializer(serializers.ModelSerializer):
    """A run as the list shows it."""

    run_id = serializers.UUIDField(source="pk", read_only=True)
    entity = EntityRefSerializer(read_only=True)
    workspace = WorkspaceRefSerializer(read_only=True)
    parent_run_id = serializers.UUIDField(source="parent_id", allow_null=True, read_only=True)
    total_cost_usd = serializers.FloatField(read_only=True)
    url = serializers.SerializerMethodField(help_text="This run in the API.")
    trace_url = serializers.SerializerMethodField(help_text="The run's live trace page.")

    class Meta:
        model = Run
        fields = [
            "run_id",
            "url",
            "trace_url",
            "status",
            "entity",
            "workspace",
            "parent_run_id",
            "trace_id",
            "created_at",
            "started_at",
            "completed_at",
            "execution_time_ms",
            "error_code",
            "total_cost_usd",
            "total_tokens",
            "llm_calls",
            "tool_calls",
        ]
        read_only_fields = fields

    def get_url(self, run: Run) -> str:
        return f"/api/v1/runs/{run.pk}"

    def get_trace_url(self, run: Run) -> str:
        return trace_url(run.trace_id)


class CancelAnswerSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    status = serializers.CharField(
        help_text=STATUS_HELP + " As it is now; CANCELLED once the engine stops it."
    )
    cancel_requested = serializers.BooleanField()
    runs = serializers.IntegerField(help_text="How many runs (it and its descendants) stop.")


class FireRequestSerializer(StrictSerializer):
    reason = serializers.CharField(
        min_length=1,
        max_length=FIRE_REASON_MAX,
        help_text="Why the subordinate is fired: recorded on it, audited, and the error of "
        "its hirer's step.",
    )


class FireAnswerSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    status = serializers.CharField(
        help_text=STATUS_HELP + " As it is now; CANCELLED once the engine stops it."
    )
    fired_reason = serializers.CharField()
    fired_by = serializers.CharField()
    runs = serializers.IntegerField(help_text="How many runs (it and its descendants) stop.")


class PassesRequestSerializer(StrictSerializer):
    passes = serializers.IntegerField(
        min_value=1,
        max_value=MOST_PASSES_GRANTED,
        help_text="How many more passes of its loop the run may make.",
    )


class PassesAnswerSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    status = serializers.CharField(help_text=STATUS_HELP + " RUNNING: it goes on.")
    passes_granted = serializers.IntegerField(
        help_text="The passes given to this run in all, past its loop's max_iterations."
    )


class WebhookSecretSerializer(serializers.Serializer):
    workspace = WorkspaceRefSerializer()
    secret = serializers.CharField(
        help_text="The key of the HMAC-SHA256 in X-Hierarch-Signature; keep it secret."
    )
    algorithm = serializers.CharField()
    header = serializers.CharField()


# -- the endpoints ------------------------------------------------------------------------------


def _fingerprint(entity: Entity, body: Any) -> str:
    """The request as an idempotency key remembers it: the entity and the body, as canonical
    JSON (keys sorted, no spaces), hashed."""
    canonical = json.dumps(
        {"entity": str(entity.pk), "body": body},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _idempotency_key(request: Request) -> str:
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return ""
    # Spaces around a header's value are not part of it (RFC 9110 §5.5).
    key = key.strip(" \t")
    if not re.fullmatch(IDEMPOTENCY_KEY_PATTERN, key):
        raise ValidationError(
            {IDEMPOTENCY_HEADER: "must be 1 to 255 printable ASCII characters (a UUID will do)"}
        )
    return key


def _sync_wait_seconds() -> float:
    return float(settings.HIERARCH_API.get("SYNC_WAIT_SECONDS", 30))


def _wait_for_end(run: Run, seconds: float) -> Run:
    """Poll the run's status (one narrow query each time, more and more apart) until it ends
    or `seconds` pass; the run, refreshed."""
    deadline = time.monotonic() + seconds
    pause = 0.02
    while True:
        current = Run.objects.filter(pk=run.pk).values_list("status", flat=True).first()
        if current in TERMINAL or time.monotonic() >= deadline:
            break
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 1.5, 0.25)
    run.refresh_from_db()
    return run


def _started(run: Run, *, wait: bool, replayed: bool) -> Response:
    """The answer to a start: 202 with seed 000 §7.1's response, or, when the caller waits
    and the run ended in time, 200 with the run document."""
    if wait:
        run = _wait_for_end(run, _sync_wait_seconds())
        if run.status in TERMINAL:
            response = Response(run_document(run), status=status.HTTP_200_OK)
            if replayed:
                response[REPLAYED_HEADER] = "true"
            return response
    started = run.started_at or run.created_at
    estimate = run_duration_estimate(run.entity_id)
    answer = {
        "run_id": str(run.pk),
        "status": run.status,
        "started_at": _iso(started),
        "estimated_completion": _iso(started + estimate) if estimate is not None else None,
        "trace_url": trace_url(run.pk),
    }
    response = Response(answer, status=status.HTTP_202_ACCEPTED)
    if replayed:
        response[REPLAYED_HEADER] = "true"
    return response


class RunStartView(APIView):
    """A view that starts runs: throttled per user and per workspace. `subject` finds (once)
    the object whose workspace is counted."""

    throttle_classes = STARTS_THROTTLES

    def subject(self, request: Request) -> Any:
        raise NotImplementedError

    def throttle_workspace(self, request: Request) -> int | None:
        try:
            return self.subject(request).workspace_id
        except Http404:
            return None  # answered 404 by the handler, not counted


class EntityExecute(RunStartView):
    def subject(self, request: Request) -> Entity:
        if not hasattr(self, "_entity"):
            self._entity = entity_get(user=request.user, pk=self.kwargs["pk"])
        return self._entity

    @extend_schema(
        tags=["runs"],
        summary="Execute an entity",
        description="Starts a root run of the entity's current version. The "
        "input is checked against the entity's io_contract first: a 400 VALIDATION_ERROR "
        "names each field (`input_data.company_name`) and nothing is started. With "
        "`execution_options.async` false the call waits for the run to end (up to "
        "HIERARCH_API SYNC_WAIT_SECONDS, 30 s by default) and answers 200 with the run "
        "document; otherwise, or when the run has not ended by then, 202. An "
        "`Idempotency-Key` header makes a retry safe: the same key and body answer the same "
        "run (header `Idempotent-Replayed: true`), the same key with another body is a 409 "
        "IDEMPOTENCY_CONFLICT. Throttled per user and per workspace (429 RATE_LIMITED).",
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                required=False,
                # What _idempotency_key takes: printable ASCII, no space at either end.
                pattern=IDEMPOTENCY_KEY_PATTERN,
                description="Up to 255 printable ASCII characters; kept 24 hours per user "
                "and workspace.",
            )
        ],
        request=ExecuteSerializer,
        responses={
            200: OpenApiResponse(RunDocumentSerializer, description="async false: it ended"),
            202: OpenApiResponse(ExecuteAnswerSerializer, description="started"),
            **error_responses(400, 403, 404, 409),
        },
    )
    def post(self, request: Request, pk: Any) -> Response:
        entity = self.subject(request)
        body = ExecuteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = _idempotency_key(request)
        options = body.validated_data.get("execution_options") or {}
        run, replayed = run_execute(
            entity=entity,
            user=request.user,
            input_data=body.validated_data.get("input_data", {}),
            context=body.validated_data.get("context"),
            webhook_url=options.get("webhook_url", ""),
            version=options.get("version", ""),
            idempotency_key=key,
            fingerprint=_fingerprint(entity, request.data) if key else "",
        )
        return _started(run, wait=not options.get("async", True), replayed=replayed)


@extend_schema(
    tags=["runs"],
    summary="Runs of your workspaces",
    description="Newest first; root runs only unless `root_only=false`.",
    parameters=[RunFilters],
    responses={200: RunSummarySerializer(many=True), **error_responses(400, 404)},
)
class RunList(FilteredListAPIView):
    serializer_class = RunSummarySerializer
    filters_class = RunFilters

    def get_queryset(self) -> QuerySet[Run]:
        # A total order, so a run never shows on two pages or none.
        return run_list(user=self.request.user).order_by("-created_at", "-pk")


@extend_schema(
    tags=["runs"],
    summary="One run",
    description="Status, output, metrics (of the run and its descendants) "
    "and the direct child runs.",
    responses={200: RunDocumentSerializer, **error_responses(404)},
)
class RunDetail(APIView):
    def get(self, request: Request, pk: Any) -> Response:
        return Response(run_document(run_get(user=request.user, pk=pk)))


@extend_schema(
    tags=["runs"],
    summary="A run's trace tree",
    description="The nested tree below the run, each node with its tool calls and model calls.",
    responses={200: TraceSerializer, **error_responses(404)},
)
class RunTrace(APIView):
    def get(self, request: Request, pk: Any) -> Response:
        return Response(trace_tree(run_get(user=request.user, pk=pk)))


class RunCancel(APIView):
    @extend_schema(
        tags=["runs"],
        summary="Cancel a run",
        description="Cancels the run and its descendants: the step in flight finishes and is "
        "recorded, no new step starts, and the run ends CANCELLED moments later (202). A run "
        "that has ended already is a 409 CONFLICT. Needs the operator role.",
        request=None,
        responses={202: CancelAnswerSerializer, **error_responses(403, 404, 409)},
    )
    def post(self, request: Request, pk: Any) -> Response:
        run = run_get(user=request.user, pk=pk)
        asked = run_cancel(run=run, user=request.user)
        run.refresh_from_db(fields=["status", "cancel_requested"])
        answer = {
            "run_id": str(run.pk),
            "status": run.status,
            "cancel_requested": run.cancel_requested,
            "runs": asked,
        }
        return Response(answer, status=status.HTTP_202_ACCEPTED)


class RunFire(APIView):
    @extend_schema(
        tags=["runs"],
        summary="Fire a hired subordinate",
        description="Fires a subordinate its hirer hired at run time (a DELEGATE step, or "
        "the delegate tool of its reasoning loop): it is cancelled with its descendants, the "
        "firing recorded on it (fired_reason, fired_by) and audited. A DELEGATE step then "
        "fails with FIRED and the reason (its ON_FAILURE checkpoint applies); a delegate call "
        "returns that error to the hirer's model, which goes on. A run that was not hired, or "
        "has ended, is a 409 CONFLICT. Needs the operator role.",
        request=FireRequestSerializer,
        responses={202: FireAnswerSerializer, **error_responses(400, 403, 404, 409)},
    )
    def post(self, request: Request, pk: Any) -> Response:
        run = run_get(user=request.user, pk=pk)
        body = FireRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        asked = run_fire(run=run, reason=body.validated_data["reason"], user=request.user)
        run.refresh_from_db(fields=["status", "fired_reason", "fired_by"])
        answer = {
            "run_id": str(run.pk),
            "status": run.status,
            "fired_reason": run.fired_reason,
            "fired_by": run.fired_by,
            "runs": asked,
        }
        return Response(answer, status=status.HTTP_202_ACCEPTED)


class RunPasses(APIView):
    @extend_schema(
        tags=["runs"],
        summary="Give a run more passes",
        description="A run whose loop ran out of passes before it was done waits BLOCKED "
        "with error_code MAX_PASSES_EXHAUSTED (its loop's on_exhausted is BLOCK): this gives "
        "it `passes` more and resumes it at once (202); its next pass starts where the loop "
        "would have gone on. Any other run is a 409 CONFLICT. Needs the operator role.",
        request=PassesRequestSerializer,
        responses={202: PassesAnswerSerializer, **error_responses(400, 403, 404, 409)},
    )
    def post(self, request: Request, pk: Any) -> Response:
        run = run_get(user=request.user, pk=pk)
        asked = PassesRequestSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        run_grant_passes(run=run, passes=asked.validated_data["passes"], user=request.user)
        run.refresh_from_db(fields=["status", "passes_granted"])
        answer = {
            "run_id": str(run.pk),
            "status": run.status,
            "passes_granted": run.passes_granted,
        }
        return Response(answer, status=status.HTTP_202_ACCEPTED)


POSITIVE_USD = (
    r"^(?:[1-9][0-9]{0,6}(?:\.[0-9]{1,6})?|0?\.(?:[1-9][0-9]{0,5}|0[1-9][0-9]{0,4}"
    r"|00[1-9][0-9]{0,3}|000[1-9][0-9]{0,2}|0000[1-9][0-9]?|00000[1-9]))$"
)


class RaiseBudgetSerializer(StrictSerializer):
    # A positive amount in USD, at most 9,999,999.999999 and to the millionth (as budgets are
    # kept): the schema says it, so a client knows before it asks.
    budget_usd = serializers.RegexField(
        POSITIVE_USD,
        max_length=20,
        help_text='The run\'s new budget (max_cost_usd) in USD, e.g. "0.50".',
    )


class RaiseBudgetAnswerSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    budget_usd = serializers.CharField()
    resumed = serializers.ListField(
        child=serializers.UUIDField(), help_text="The runs BLOCKED on this budget, resumed."
    )


class RunRaiseBudget(APIView):
    @extend_schema(
        tags=["runs"],
        summary="Raise a run's budget",
        description="Raises the budget of a run that has one of its own (max_cost_usd) and "
        "resumes the runs BLOCKED on it (BUDGET_EXHAUSTED), each at the step it stopped at. "
        "A child's raise is drawn from its parent's budget first. Needs the operator role.",
        request=RaiseBudgetSerializer,
        responses={200: RaiseBudgetAnswerSerializer, **error_responses(400, 403, 404, 409)},
    )
    def post(self, request: Request, pk: Any) -> Response:
        run = run_get(user=request.user, pk=pk)
        body = RaiseBudgetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        resumed = run_raise_budget(
            run=run, budget_usd=body.validated_data["budget_usd"], user=request.user
        )
        run.refresh_from_db(fields=["budget_usd"])
        return Response(
            {"run_id": str(run.pk), "budget_usd": str(run.budget_usd), "resumed": resumed}
        )


class RunRerun(RunStartView):
    def subject(self, request: Request) -> Run:
        if not hasattr(self, "_run"):
            self._run = run_get(user=request.user, pk=self.kwargs["pk"])
        return self._run

    @extend_schema(
        tags=["runs"],
        summary="Re-run with the same input",
        description="Starts the run's entity again (its current version) as a new root run "
        "with the same input and context; answers like execute (202). Needs the operator "
        "role.",
        request=None,
        responses={202: ExecuteAnswerSerializer, **error_responses(403, 404)},
    )
    def post(self, request: Request, pk: Any) -> Response:
        run = run_rerun(run=self.subject(request), user=request.user)
        return _started(run, wait=False, replayed=False)


class WorkspaceWebhookSecret(APIView):
    @extend_schema(
        tags=["runs"],
        summary="The workspace's webhook secret",
        description="The key each webhook POST of the workspace is signed with: "
        "X-Hierarch-Signature is `sha256=` and the hex HMAC-SHA256 of the raw body with it. "
        "Made on first need. Workspace admins only.",
        responses={200: WebhookSecretSerializer, **error_responses(403, 404)},
    )
    def get(self, request: Request, ref: str) -> Response:
        workspace = workspace_find(user=request.user, ref=ref)
        if workspace is None:
            raise Http404(f'no workspace "{ref}" among yours')
        if not has_perm(request.user, ADMINISTER, workspace):
            raise PermissionDenied(f"only an admin of {workspace.name} may read its webhook secret")
        response = Response(
            {
                "workspace": {"id": workspace.pk, "slug": workspace.slug, "name": workspace.name},
                "secret": webhook_secret(workspace.pk),
                "algorithm": "HMAC-SHA256",
                "header": "X-Hierarch-Signature",
            }
        )
        response["Cache-Control"] = "no-store"
        return response


urlpatterns = [
    path("entities/<uuid:pk>/execute", EntityExecute.as_view(), name="entity-execute"),
    path("runs", RunList.as_view(), name="run-list"),
    path("runs/<uuid:pk>", RunDetail.as_view(), name="run-detail"),
    path("runs/<uuid:pk>/trace", RunTrace.as_view(), name="run-trace"),
    path("runs/<uuid:pk>/cancel", RunCancel.as_view(), name="run-cancel"),
    path("runs/<uuid:pk>/fire", RunFire.as_view(), name="run-fire"),
    path("runs/<uuid:pk>/rerun", RunRerun.as_view(), name="run-rerun"),
    path("runs/<uuid:pk>/passes", RunPasses.as_view(), name="run-passes"),
    path("runs/<uuid:pk>/raise-budget", RunRaiseBudget.as_view(), name="run-raise-budget"),
    re_path(
        r"^workspaces/(?P<ref>[-a-zA-Z0-9_]{1,50})/webhook-secret$",
        WorkspaceWebhookSecret.as_view(),
        name="workspace-webhook-secret",
    ),
]
