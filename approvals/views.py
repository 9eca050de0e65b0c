"""The inbox pages: the requests waiting for the user, one request's page, its decisions.

Each view reads through a scoped selector (another workspace's request is a 404), calls one
service, and renders. The inbox list is one partial (`inbox-rows`) that serves the page, the
filters' htmx fetch and the websocket push (approvals/consumers.py).
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import push_url
from django_htmx.middleware import HtmxDetails

from approvals.forms import (
    DECISION_FORMS,
    BulkDecisionForm,
    DecisionForm,
    EditForm,
    InboxFilterForm,
)
from approvals.models import OPEN, Approval, Decision
from approvals.selectors import (
    approval_get,
    approvals_open_for,
    approvals_visible_by_id,
    approvals_visible_to,
)
from approvals.services import (
    FEEDBACK_MAX,
    AlreadyDecided,
    BulkOutcome,
    DecisionRefused,
    approval_decide,
    approvals_decide,
    can_decide,
)

INBOX_LIMIT = 100  # rows in one list; the filters narrow a longer one


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


# -- the inbox ---------------------------------------------------------------------------------


def inbox_context(user: Any, params: QueryDict, *, changed_id: int | None = None) -> dict:
    """What the inbox templates need for the user and the GET parameters; `show` is "open"
    (the requests they may decide now) or "decided" (the history they can see)."""
    show = "decided" if params.get("show") == "decided" else "open"
    if show == "open":
        base = approvals_open_for(user)
    else:
        base = approvals_visible_to(user).exclude(status__in=OPEN)
    form = InboxFilterForm(params, base=base)
    rows = list(form.apply(base)[: INBOX_LIMIT + 1])
    for approval in rows[:INBOX_LIMIT]:
        approval.preview = preview(approval)
    return {
        "show": show,
        "form": form,
        "filtered": bool(set(form.filters()) - {"sort"}),
        "approvals": rows[:INBOX_LIMIT],
        # The list's own decisions: approvers only, on the open list.
        "decide": show == "open",
        "list_query": form.query(show=show),
        "reason_max": FEEDBACK_MAX,
        "more": len(rows) > INBOX_LIMIT,
        "query": form.query(show=show),
        "live_query": form.query(list="open"),
        "changed_id": changed_id,
        # On the open list the results' socket updates the badge too; no second socket.
        "badge_socket": show != "open",
    }


@login_required
@require_GET
def inbox(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "approvals/inbox.html", inbox_context(request.user, request.GET))


@login_required
@require_GET
def inbox_results(request: HtmxHttpRequest) -> HttpResponse:
    """The results alone, for the filters and the sort: the address bar shows the page."""
    context = inbox_context(request.user, request.GET)
    response = render(request, "approvals/inbox.html#inbox-results", context)
    if request.htmx:
        push_url(response, f"{reverse('approvals:inbox')}?{context['query']}")
    return response


@login_required
@require_POST
def inbox_decide(request: HtmxHttpRequest) -> HttpResponse:
    """Approve or reject one or several requests from the list. Without `confirmed` (a
    plain form, no script) the page asks first, and for the reason of a rejection; the
    page's script asks in a dialog and posts confirmed. Each request is decided through
    `approval_decide`, and the answer says, request by request, what happened."""
    form = BulkDecisionForm(request.POST)
    valid = form.is_valid()
    confirmed = valid and form.cleaned_data["confirmed"]
    params = QueryDict(str(form.data.get("q", ""))[:2_000])
    if not confirmed:
        if request.htmx:
            # The dialog always confirms: what is missing is said above the list.
            errors = [str(e) for errors in form.errors.values() for e in errors]
            context = {**inbox_context(request.user, params), "bulk_errors": errors}
            return render(request, "approvals/inbox.html#inbox-decided", context, status=422)
        ids = form.cleaned_data.get("ids") or []
        picked = list(approvals_open_for(request.user).filter(pk__in=ids))
        for approval in picked:
            approval.preview = preview(approval)
        context = {
            "form": form,
            "picked": picked,
            "query": params.urlencode(),
            "reason_max": FEEDBACK_MAX,
            "asked_again": bool(form.data.get("confirmed")),
        }
        return render(
            request,
            "approvals/confirm.html",
            context,
            status=422 if form.data.get("confirmed") else 200,
        )
    found = approvals_visible_by_id(request.user, form.cleaned_data["ids"])
    outcomes = approvals_decide(
        approvals=found,
        user=request.user,
        decision=form.cleaned_data["decision"],
        notes=form.cleaned_data["reason"],
    )
    context = {
        **inbox_context(request.user, params),
        "outcomes": outcomes,
        "report": report_of(outcomes),
    }
    if request.htmx:
        return render(request, "approvals/inbox.html#inbox-decided", context)
    return render(request, "approvals/inbox.html", context)


def report_of(outcomes: list[BulkOutcome]) -> str:
    """One line over the per-request list: how many were decided, and how many not."""
    decided = sum(1 for outcome in outcomes if outcome.result == "decided")
    rest = len(outcomes) - decided
    text = f"{decided} request{'s' if decided != 1 else ''} decided"
    return text + (f", {rest} not" if rest else "") + "."


# -- one request -------------------------------------------------------------------------------


@login_required
@require_GET
def approval_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    approval = approval_get(request.user, pk)
    return render(request, "approvals/detail.html", _detail_context(request, approval))


@login_required
@require_POST
def approval_decision(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Take one of the four decisions; an edit or constraint the service refuses comes back
    at its field with the request still open (422), a request someone else decided first
    says who and when (409)."""
    approval = approval_get(request.user, pk)
    form_class = DECISION_FORMS.get(request.POST.get("decision", ""))
    if form_class is None:
        return HttpResponse("Unknown decision.", status=400, content_type="text/plain")
    if not approval.is_open:
        return _render_decision(request, approval, refused=AlreadyDecided(approval), status=409)
    if not can_decide(request.user, approval):
        raise PermissionDenied("you may not decide this request")
    form = form_class(request.POST, prefix=form_class.decision, approval=approval)
    if not form.is_valid():
        return _render_decision(request, approval, bound=form, status=422)
    try:
        approval = approval_decide(approval=approval, user=request.user, **form.decide_kwargs())
    except AlreadyDecided as refused:
        approval = approval_get(request.user, pk)
        return _render_decision(request, approval, refused=refused, status=409)
    except DecisionRefused as refused:
        if refused.code == "PERMISSION_DENIED":
            raise PermissionDenied(str(refused)) from None
        form.add_refusal(refused)
        return _render_decision(request, approval, bound=form, status=422)
    if not request.htmx:
        return redirect("approvals:detail", pk=approval.pk)
    return _render_decision(request, approval_get(request.user, pk))


def _render_decision(
    request: HtmxHttpRequest,
    approval: Approval,
    *,
    bound: DecisionForm | None = None,
    refused: DecisionRefused | None = None,
    status: int = 200,
) -> HttpResponse:
    """The decision panel for htmx, the whole page otherwise (a form posted without
    JavaScript lands back on the page with its errors)."""
    context = _detail_context(request, approval, bound=bound, refused=refused)
    template = "approvals/detail.html"
    if request.htmx:
        template += "#approval-decision"
    return render(request, template, context, status=status)


def _detail_context(
    request: HttpRequest,
    approval: Approval,
    *,
    bound: DecisionForm | None = None,
    refused: DecisionRefused | None = None,
) -> dict:
    may_decide = approval.is_open and can_decide(request.user, approval)
    forms: dict[str, DecisionForm] = {}
    if may_decide:
        for decision in approval.allowed_decisions or Decision.values:
            form_class = DECISION_FORMS.get(decision)
            if form_class is None:
                continue
            if bound is not None and bound.decision == decision:
                forms[decision] = bound
            elif form_class is EditForm:
                forms[decision] = EditForm(
                    prefix=decision,
                    approval=approval,
                    initial={"payload": pretty_json(approval.payload)},
                )
            else:
                forms[decision] = form_class(prefix=decision, approval=approval)
    message = str(refused) if refused is not None else ""
    if bound is not None and bound.decision not in forms and not message:
        # A decision this request does not offer: no form to show its errors at.
        message = " ".join(bound.non_field_errors()) or "This decision is not offered here."
    return {
        # The page's socket also tells it when someone else decides this request.
        "socket_query": urlencode({"detail": approval.pk}),
        "approval": approval,
        # The console's trace of the run, not the admin's form of it.
        "run_link": reverse("runs:detail", args=[approval.run_id]),
        "may_decide": may_decide,
        "forms": forms,
        "open_form": bound.decision if bound is not None else "",
        "refused": message,
        "subject_label": SUBJECTS.get(approval.subject, "Payload"),
        "payload_json": pretty_json(approval.payload),
        "edit_schema_json": pretty_json(approval.edit_schema) if approval.edit_schema else "",
        "snapshot_json": pretty_json(approval.context_snapshot),
        "approved_json": pretty_json(approval.approved_payload),
        "constraint_json": pretty_json(approval.locked_constraint),
        "confidence": confidence_rows(approval.confidence),
        "costs": cost_rows(approval.cost_estimate),
        "impact": approval.downstream_impact or {},
        "alternatives": alternative_rows(approval.alternatives),
        "judge": approval.judge if isinstance(approval.judge, dict) else None,
        "judge_confidence": percent((approval.judge or {}).get("confidence"))
        if isinstance(approval.judge, dict)
        else "",
    }


# -- the explanation packet, for reading -------------------------------------------------------

SUBJECTS = {
    "input": "Run input",
    "plan": "Plan",
    "tool_arguments": "Tool arguments",
    "output": "Output",
    "state": "Run state",
    "failure": "Failure",
}
CONFIDENCES = (
    "plan",
    "plan_confidence",
    "execution",
    "execution_confidence",
    "output",
    "output_confidence",
)
COSTS = {
    "cost_so_far_usd": "Cost so far",
    "estimated_to_finish_usd": "Estimated to finish",
    "estimated_total_usd": "Estimated total",
    "budget_usd": "Run budget",
    "tokens_consumed": "Tokens used",
    "tokens_remaining": "Tokens left",
    "api_calls": "Model and tool calls",
    "basis": "Estimated from",
}


def pretty_json(value: Any) -> str:
    """JSON for a <pre> or a textarea; the template escapes it (it came from a model or a
    tool)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


PREVIEW_MAX = 160  # characters of a row's preview
PREVIEW_VALUE_MAX = 48  # of one argument's value in it


def short_json(value: Any, budget: int, depth: int = 0) -> str:
    """Compact JSON of `value`, cut to about `budget` characters with "…": a row shows what
    is asked at a glance, and a payload of megabytes is never serialised whole for it."""
    if isinstance(value, dict):
        if depth >= 2:
            return "{…}" if value else "{}"
        parts, used = [], 2
        for key, inner in value.items():
            if used >= budget:
                parts.append("…")
                break
            part = f"{json.dumps(str(key), ensure_ascii=False)}: " + short_json(
                inner, budget - used, depth + 1
            )
            parts.append(part)
            used += len(part) + 2
        return cut("{" + ", ".join(parts) + "}", budget)
    if isinstance(value, list):
        if depth >= 2:
            return "[…]" if value else "[]"
        parts, used = [], 2
        for inner in value:
            if used >= budget:
                parts.append("…")
                break
            part = short_json(inner, budget - used, depth + 1)
            parts.append(part)
            used += len(part) + 2
        return cut("[" + ", ".join(parts) + "]", budget)
    if isinstance(value, str):
        value = value[: budget + 1]
    return cut(json.dumps(value, ensure_ascii=False, default=str), budget)


def cut(text: str, budget: int) -> str:
    return text if len(text) <= budget else text[: max(budget - 1, 1)] + "…"


def preview(approval: Approval) -> dict[str, Any]:
    """What a row of the inbox shows of the request: the tool and its arguments in short, or
    the plan's steps, else the payload in short. The payload is read as the request's page
    shows it (as the run store sealed it: what pii_handling redacts stays redacted); the
    template escapes it (a model or a tool wrote it)."""
    payload = approval.payload
    snapshot = approval.context_snapshot if isinstance(approval.context_snapshot, dict) else {}
    if approval.subject == "tool_arguments":
        tool = snapshot.get("tool") if isinstance(snapshot.get("tool"), dict) else {}
        name = str(tool.get("name") or tool.get("tool_id") or approval.step_name or "a tool")
        if isinstance(payload, dict):
            args = [
                (str(key)[:40], short_json(value, PREVIEW_VALUE_MAX))
                for key, value in list(payload.items())[:6]
            ]
            more = max(len(payload) - 6, 0)
        else:
            args, more = [("", short_json(payload, PREVIEW_MAX))], 0
        return {"kind": "tool", "tool": name[:80], "args": args, "more": more}
    if approval.subject == "plan" and isinstance(payload, list):
        names = [
            str(step.get("name") or step.get("step_type") or "?")
            if isinstance(step, dict)
            else str(step)
            for step in payload[:8]
        ]
        text = " → ".join(name[:40] for name in names) + (" → …" if len(payload) > 8 else "")
        return {"kind": "plan", "steps": len(payload), "text": cut(text, PREVIEW_MAX)}
    if payload is None:
        return {"kind": "none"}
    label = SUBJECTS.get(approval.subject, "Payload")
    return {"kind": "other", "label": label, "text": short_json(payload, PREVIEW_MAX)}


def percent(value: Any) -> str:
    """Seed 002 gives confidence as 0–100; a judge as 0–1. None: not assessed."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "" if value is None else str(value)
    if isinstance(value, float) and 0 <= value <= 1:
        value *= 100
    return f"{round(value)} %"


def in_order(values: dict, known: Any) -> list[tuple[str, Any]]:
    """The known keys in their reading order, then the others (a jsonb column keeps its
    keys in an order of its own)."""
    first = [(key, values[key]) for key in known if key in values]
    return first + sorted(
        ((k, v) for k, v in values.items() if k not in known), key=lambda kv: kv[0]
    )


def confidence_rows(confidence: Any) -> list[tuple[str, str]]:
    if not isinstance(confidence, dict):
        return []
    return [
        (str(key).removesuffix("_confidence").replace("_", " ").capitalize(), percent(value))
        for key, value in in_order(confidence, CONFIDENCES)
    ]


def cost_rows(estimate: Any) -> list[tuple[str, str]]:
    if not isinstance(estimate, dict):
        return []
    rows = []
    for key, value in in_order(estimate, COSTS):
        if value is None or value == "":
            continue
        label = COSTS.get(key, str(key).replace("_", " ").capitalize())
        if str(key).endswith("_usd"):
            rows.append((label, usd(value)))
        elif isinstance(value, int) and not isinstance(value, bool):
            rows.append((label, f"{value:,}"))
        else:
            rows.append((label, value if isinstance(value, str) else pretty_json(value)))
    return rows


def usd(value: Any) -> str:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return str(value)
    return f"${amount:,.6f}".rstrip("0").rstrip(".") if amount else "$0"


def alternative_rows(alternatives: Any) -> list[dict]:
    if not isinstance(alternatives, list):
        return []
    rows = []
    for item in alternatives:
        if isinstance(item, dict):
            rows.append(
                {
                    "option": str(item.get("option", "")),
                    "pros": [str(p) for p in item.get("pros") or []],
                    "cons": [str(c) for c in item.get("cons") or []],
                    "confidence": percent(item.get("confidence")),
                }
            )
        else:
            rows.append({"option": str(item), "pros": [], "cons": [], "confidence": ""})
    return rows
