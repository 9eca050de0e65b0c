"""The approvals API (issue 5 item 8): list, detail and decision, with the inbox's rules.

Reads go through `approvals.selectors` (a request of another workspace is a 404), the decision
through `approvals.services.approval_decide`, whose refusals the API's exception handler turns
into seed 001's error object: 409 ALREADY_DECIDED, 400 VALIDATION_ERROR with the field errors,
403 PERMISSION_DENIED naming the role that is needed.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import NoReverseMatch, Resolver404, resolve, reverse
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.models import Approval, ApprovalStatus, Decision, Trigger
from approvals.selectors import approval_get, approvals_visible_to
from approvals.services import approval_decide, can_decide
from config.api_contract import StrictSerializer, error_responses
from config.api_lists import FilteredListAPIView, ListFilters, comma_choices, workspace_among_yours
from entities.models import Entity, Workspace

# -- what a request looks like ------------------------------------------------------------------


class WorkspaceRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Workspace
        fields = ["id", "slug", "name"]
        read_only_fields = fields


class EntityRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Entity
        fields = ["id", "name", "type"]
        read_only_fields = fields


class ApprovalSummarySerializer(serializers.ModelSerializer):
    """A request as the inbox lists it."""

    run = serializers.UUIDField(source="run_id", read_only=True)
    workspace = WorkspaceRefSerializer(read_only=True)
    entity = EntityRefSerializer(read_only=True)
    trigger = serializers.ChoiceField(
        choices=Trigger.choices, source="checkpoint_trigger", read_only=True
    )
    trigger_label = serializers.CharField(source="get_checkpoint_trigger_display", read_only=True)
    step = serializers.CharField(source="step_name", read_only=True)
    # Blank until decided.
    decision = serializers.ChoiceField(choices=Decision.choices, allow_blank=True, read_only=True)
    responded_by = serializers.CharField(
        source="responded_by.username", allow_null=True, read_only=True, help_text="Who decided."
    )
    url = serializers.SerializerMethodField(help_text="This request in the API.")

    class Meta:
        model = Approval
        fields = [
            "id",
            "url",
            "status",
            "trigger",
            "trigger_label",
            "step",
            "subject",
            "workspace",
            "entity",
            "run",
            "trace_id",
            "requested_at",
            "requested_by",
            "reasoning_summary",
            "risk_level",
            "due_at",
            "timeout_action",
            "decision",
            "responded_by",
            "responded_at",
        ]
        read_only_fields = fields

    def get_url(self, approval: Approval) -> str:
        return reverse("api:approval-detail", args=[approval.pk])


class ApprovalSerializer(ApprovalSummarySerializer):
    """Everything the inbox's detail page shows: what is asked and what may change, the
    explanation packet, the judge, the context, the decision, the timeout and the links."""

    can_decide = serializers.SerializerMethodField(
        help_text="Whether the signed-in user may decide this request now."
    )
    page_url = serializers.SerializerMethodField(help_text="This request in the inbox.")
    trace_url = serializers.SerializerMethodField(help_text="The run's live trace.")
    allowed_decisions = serializers.ListField(
        child=serializers.ChoiceField(choices=Decision.choices),
        read_only=True,
        help_text="The decisions this request takes (every one when empty).",
    )
    risk_factors = serializers.ListField(child=serializers.CharField(), read_only=True)
    notification_channels = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta(ApprovalSummarySerializer.Meta):
        fields = [
            *ApprovalSummarySerializer.Meta.fields,
            "approval_required",
            "allowed_decisions",
            "can_decide",
            "payload",
            "edit_schema",
            "context_snapshot",
            # Seed 002's explanation packet.
            "confidence",
            "risk_factors",
            "alternatives",
            "cost_estimate",
            "downstream_impact",
            # Seed 001's judge, when an LLM judge sent the request.
            "judge",
            # The decision.
            "reviewer_notes",
            "approved_payload",
            "locked_constraint",
            # The timeout.
            "timeout_ms",
            "escalated_at",
            "notification_channels",
            "page_url",
            "trace_url",
        ]
        read_only_fields = fields

    def get_can_decide(self, approval: Approval) -> bool:
        request = self.context.get("request")
        return bool(
            request is not None
            and approval.is_open
            and approval.approval_required
            and can_decide(request.user, approval)
        )

    def get_page_url(self, approval: Approval) -> str | None:
        try:
            return reverse("approvals:detail", args=[approval.pk])
        except NoReverseMatch:
            return None

    def get_trace_url(self, approval: Approval) -> str:
        # The live trace page lives at /runs/<root run>/ (issue 6; a trace's id is its root
        # run's); until that page exists, the run in the admin.
        page = f"/runs/{approval.trace_id}/"
        try:
            resolve(page)
        except Resolver404:
            return reverse("admin:runs_run_change", args=[approval.run_id])
        return page


# -- what a client sends ------------------------------------------------------------------------


class DecisionSerializer(StrictSerializer):
    """A decision on a request: `approve`; `edit` with the changed `payload` (valid against
    the request's `edit_schema`); `reject` with the feedback in `notes`; `lock_constraint` with
    a `constraint` the rest of the run must respect."""

    decision = serializers.ChoiceField(
        choices=Decision.choices,
        error_messages={
            "invalid_choice": '"{input}" is not a decision; use one of '
            + ", ".join(Decision.values)
        },
    )
    notes = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        help_text="Why; for reject, the feedback the run receives.",
    )
    payload = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="With edit only: the changed payload, valid against the request's edit_schema.",
    )
    constraint = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='With lock_constraint only: the constraint in words, or {"constraint": '
        'text, "rule": JSONLogic, "forbid_tools": [tool ids]}.',
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        problems = {}
        if data.get("payload") is not None and data["decision"] != Decision.EDIT:
            problems["payload"] = "only an edit takes a payload"
        if data.get("constraint") is not None and data["decision"] != Decision.LOCK_CONSTRAINT:
            problems["constraint"] = "only lock_constraint takes a constraint"
        if problems:
            raise serializers.ValidationError(problems)
        return data


class ApprovalFilters(ListFilters):
    """The list's query string: `status` (one or more, comma-separated), `workspace` (id or
    slug), `run` (a run's id)."""

    status = serializers.CharField(
        required=False,
        help_text="One or more of " + ", ".join(ApprovalStatus.values) + ", comma-separated.",
    )
    workspace = serializers.CharField(required=False, help_text="A workspace's id or slug.")
    run = serializers.UUIDField(
        required=False,
        help_text="A run's id.",
        error_messages={"invalid": '"{value}" is not a run id (a UUID)'},
    )

    def validate_status(self, value: str) -> list[str]:
        return comma_choices(value, ApprovalStatus.values, "status")

    def validate_workspace(self, value: str) -> Workspace:
        return workspace_among_yours(self.context["request"].user, value)

    def narrow(self, approvals: QuerySet[Approval]) -> QuerySet[Approval]:
        filters = self.validated_data
        if "status" in filters:
            approvals = approvals.filter(status__in=filters["status"])
        if "workspace" in filters:
            approvals = approvals.filter(workspace=filters["workspace"])
        if "run" in filters:
            approvals = approvals.filter(run_id=filters["run"])
        return approvals


# -- the endpoints ------------------------------------------------------------------------------


@extend_schema(
    tags=["approvals"],
    summary="Requests of your workspaces",
    description="Newest first, every status (history included) unless `status` narrows it.",
    parameters=[ApprovalFilters],
    responses={200: ApprovalSummarySerializer(many=True), **error_responses(400)},
)
class ApprovalList(FilteredListAPIView):
    serializer_class = ApprovalSummarySerializer
    filters_class = ApprovalFilters

    def get_queryset(self) -> QuerySet[Approval]:
        # A total order, so a request never shows on two pages or none.
        return approvals_visible_to(self.request.user).order_by("-requested_at", "-pk")


@extend_schema(
    tags=["approvals"],
    summary="One request",
    responses={200: ApprovalSerializer, **error_responses(404)},
)
class ApprovalDetail(generics.RetrieveAPIView):
    serializer_class = ApprovalSerializer

    def get_object(self) -> Approval:
        return approval_get(self.request.user, self.kwargs["pk"])


class ApprovalDecision(APIView):
    @extend_schema(
        tags=["approvals"],
        summary="Decide a request",
        description="Taken once: when someone decided first, or the request timed out, the "
        "answer is 409 ALREADY_DECIDED saying who decided and when. An edit that breaks the "
        "request's edit_schema is a 400 with the field errors, and the request stays open.",
        request=DecisionSerializer,
        responses={200: ApprovalSerializer, **error_responses(400, 403, 404, 409)},
    )
    def post(self, request: Request, pk: int) -> Response:
        approval = approval_get(request.user, pk)
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        approval = approval_decide(approval=approval, user=request.user, **body.validated_data)
        return Response(ApprovalSerializer(approval, context={"request": request}).data)
