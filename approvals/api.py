"""The approvals API (issue 5 item 8): list, detail and decision, with the inbox's rules.

Reads go through `approvals.selectors` (a request of another workspace is a 404), the decision
through `approvals.services.approval_decide`, whose refusals the API's exception handler turns
into seed 001's error object: 409 ALREADY_DECIDED, 400 VALIDATION_ERROR with the field errors,
403 PERMISSION_DENIED naming the role that is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet
from django.urls import NoReverseMatch, Resolver404, resolve, reverse
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema, extend_schema_field
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.models import Approval, ApprovalStatus, Decision, Trigger
from approvals.selectors import approval_get, approvals_visible_to
from approvals.services import FEEDBACK_MAX, approval_decide, can_decide
from config.api_contract import StrictSerializer, error_responses
from config.api_lists import ChoicesFilter, FilteredListAPIView, ListFilters
from entities.serializers import EntityRefSerializer, WorkspaceRefSerializer

# -- what a request looks like ------------------------------------------------------------------


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


# A decision's body depends on the decision: the schema says so with one object per decision
# (oneOf, discriminated by `decision`), and the API validates a body with the same serializer
# the schema shows for its decision, so the two cannot drift apart.

NOTES_HELP = "Why; for reject, the feedback the run receives."
CONSTRAINT_TEXT = {"type": "string", "pattern": r"\S", "maxLength": 1000}


@extend_schema_field(
    {
        "description": "Any JSON value but null.",
        "anyOf": [
            {"type": "object", "additionalProperties": {}},
            {"type": "array", "items": {}},
            {"type": "string"},
            {"type": "number"},
            {"type": "boolean"},
        ],
    }
)
class PayloadField(serializers.JSONField):
    """The changed payload of an edit: any JSON value but null, checked against the request's
    edit_schema by the service."""


@extend_schema_field(
    {
        "oneOf": [
            {**CONSTRAINT_TEXT, "description": "The constraint in words."},
            {
                "type": "object",
                "properties": {
                    "constraint": {**CONSTRAINT_TEXT, "description": "The constraint in words."},
                    "rule": {
                        "description": "JSONLogic that must hold before every later tool call.",
                        "anyOf": [
                            {"type": "object", "additionalProperties": {}},
                            {"type": "boolean"},
                        ],
                    },
                    "forbid_tools": {
                        "type": "array",
                        "items": {"type": "string", "minLength": 1},
                        "description": "Tool ids the rest of the run may not call.",
                    },
                },
                "required": ["constraint"],
                "additionalProperties": False,
            },
        ]
    }
)
class ConstraintField(serializers.JSONField):
    """A locked constraint: text, or {"constraint": text, "rule": JSONLogic, "forbid_tools":
    [tool ids]}; checked by `approvals.services.constraint_problems`."""


def _decision_choice(decision: Decision) -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=[(decision.value, decision.label)])


class ApproveDecisionSerializer(StrictSerializer):
    """The run goes on with what was asked."""

    decision = _decision_choice(Decision.APPROVE)
    notes = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        max_length=FEEDBACK_MAX,
        help_text=NOTES_HELP,
    )


class RejectDecisionSerializer(ApproveDecisionSerializer):
    """The run receives the feedback in `notes`."""

    decision = _decision_choice(Decision.REJECT)


class EditDecisionSerializer(ApproveDecisionSerializer):
    """The run goes on with `payload` instead of what was asked."""

    decision = _decision_choice(Decision.EDIT)
    payload = PayloadField(
        help_text="The changed payload, valid against the request's edit_schema."
    )


class LockConstraintDecisionSerializer(ApproveDecisionSerializer):
    """The run goes on, and `constraint` binds the rest of it."""

    decision = _decision_choice(Decision.LOCK_CONSTRAINT)
    constraint = ConstraintField(help_text="The constraint the rest of the run must respect.")


DECISION_BODIES: dict[str, type[StrictSerializer]] = {
    Decision.APPROVE.value: ApproveDecisionSerializer,
    Decision.EDIT.value: EditDecisionSerializer,
    Decision.REJECT.value: RejectDecisionSerializer,
    Decision.LOCK_CONSTRAINT.value: LockConstraintDecisionSerializer,
}
# A field of one decision sent with another: said plainly rather than "unknown field".
MISPLACED = {
    "payload": "only an edit takes a payload",
    "constraint": "only lock_constraint takes a constraint",
}

DecisionRequest = PolymorphicProxySerializer(
    component_name="Decision",
    serializers=DECISION_BODIES,
    resource_type_field_name="decision",
)


class AnyDecisionSerializer(StrictSerializer):
    """A body whose `decision` picks none of the four: its problems, all named at once (the
    decision, unknown fields, a body that is not an object). Not in the schema."""

    decision = serializers.ChoiceField(
        choices=Decision.choices,
        error_messages={
            "invalid_choice": '"{input}" is not a decision; use one of '
            + ", ".join(Decision.values)
        },
    )
    notes = serializers.CharField(required=False, allow_blank=True)
    payload = serializers.JSONField(required=False)
    constraint = serializers.JSONField(required=False)


def decision_body(data: Any) -> dict[str, Any]:
    """The body of a decision, validated by the serializer of its `decision`: `approve`;
    `edit` with the changed `payload`; `reject` with the feedback in `notes`;
    `lock_constraint` with a `constraint`."""
    kind = data.get("decision") if isinstance(data, Mapping) else None
    serializer_class = DECISION_BODIES.get(kind) if isinstance(kind, str) else None
    body = (serializer_class or AnyDecisionSerializer)(data=data)
    if not body.is_valid() or serializer_class is None:
        errors = {
            name: [MISPLACED[name]] if name in MISPLACED and name not in body.fields else problem
            for name, problem in body.errors.items()
        }
        raise serializers.ValidationError(errors)
    return dict(body.validated_data)


class ApprovalFilters(ListFilters):
    """The list's query string: `status` (one or more, comma-separated), `workspace` (id or
    slug), `run` (a run's id)."""

    status = ChoicesFilter(
        choices=ApprovalStatus.values,
        noun="status",
        help_text="One or more statuses, repeated or comma-separated, in any case.",
    )
    workspace = serializers.CharField(required=False, help_text="A workspace's id or slug.")
    run = serializers.UUIDField(
        required=False,
        help_text="A run's id.",
        error_messages={"invalid": '"{value}" is not a run id (a UUID)'},
    )

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
    responses={200: ApprovalSummarySerializer(many=True), **error_responses(400, 404)},
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
        request=DecisionRequest,
        responses={200: ApprovalSerializer, **error_responses(400, 403, 404, 409)},
    )
    def post(self, request: Request, pk: int) -> Response:
        approval = approval_get(request.user, pk)
        body = decision_body(request.data)
        approval = approval_decide(approval=approval, user=request.user, **body)
        return Response(ApprovalSerializer(approval, context={"request": request}).data)
