""" "Try it": run the entity being designed (a draft too) on sample input made from its input
schema, and watch the output and the trace without leaving the editor.

A trial runs the entity's saved version, marked as a trial (the runs list and the dashboard
keep it apart from production runs), with its tools sandboxed unless the designer chooses
real ones. The result fragment polls itself while the run is going. The input form is laid
out as the console's start form is (one form, or a wizard: runs/input_wizard.py).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from designer.samples import sample_input
from entities.selectors import entity_definition, entity_in_workspace, workspace_get
from governance.permissions import DESIGN, OPERATE, has_perm
from runs.forms import JSON_FIELD, RunInputForm
from runs.input_wizard import InputWizard, form_layout
from runs.selectors import trace_outline
from runs.services import RunRefused, run_try
from runs.trace_page import duration_label, pretty_json, usd

POLL_S = 1
# A trial waiting on a person (its checkpoint, in the inbox) or blocked is looked at less often.
MOVING = {"PENDING", "RUNNING", "WAITING"}
STILL = {"PAUSED", "BLOCKED"}


def may_try(user: Any, workspace: Any) -> bool:
    return has_perm(user, DESIGN, workspace) or has_perm(user, OPERATE, workspace)


def trial_inputs(entity: Any, data: Any = None) -> dict[str, Any]:
    """The input form of the entity's input contract (`try_form`), filled with a sample
    when unbound, and `try_wizard` when its ui_hints lay it out as a wizard (else None)."""
    definition = entity_definition(entity=entity)
    contract = definition.get("io_contract", {}).get("input", {})
    schema = contract.get("schema", {})
    form = RunInputForm(data, schema=schema, rules=contract.get("validation_rules", []))
    if data is None:
        sample = sample_input(schema)
        form.initial = {JSON_FIELD: sample} if form.single_json else sample
    return {
        "try_form": form,
        "try_wizard": InputWizard.of(form_layout(definition), form, data),
        # Kept from page to page of a wizard.
        "live_tools": data is not None and data.get("live_tools") == "on",
    }


def _entity(request: HttpRequest, workspace: str, pk: Any) -> Any:
    ws = workspace_get(user=request.user, slug=workspace)
    return entity_in_workspace(user=request.user, workspace=ws, pk=pk)


@login_required
@require_POST
def entity_try(request: HttpRequest, workspace: str, pk: Any) -> HttpResponse:
    """Start a trial on the input sent; otherwise the wizard's next page (when the input
    form is one), or the problems at their fields (422)."""
    entity = _entity(request, workspace, pk)
    if not may_try(request.user, entity.workspace):
        raise PermissionDenied("Designers and operators try entities.")
    inputs = trial_inputs(entity, request.POST)
    form, wizard = inputs["try_form"], inputs["try_wizard"]
    context: dict[str, Any] = {"entity": entity, "workspace": entity.workspace, **inputs}
    if wizard is not None and not wizard.finished:
        return _trial_form(request, context, status=wizard.status)
    if wizard is None and not form.is_valid():
        return _trial_form(request, context, status=422)
    try:
        run = run_try(
            entity=entity,
            input_data=form.input_data,
            user=request.user,
            live_tools=request.POST.get("live_tools") == "on",
        )
    except RunRefused as exc:
        context["refused"] = str(exc)
        return _trial_form(request, context, status=409)
    if not request.htmx:  # type: ignore[attr-defined]
        # Without scripts the page comes back with the trial shown under its form.
        return redirect(
            reverse("designer:entity", args=[workspace, entity.pk]) + f"?try={run.pk}#try"
        )
    context |= result_context(request.user, entity, run.pk)
    return render(request, "designer/editor/_try.html", context)


def _trial_form(request: HttpRequest, context: dict[str, Any], *, status: int) -> HttpResponse:
    """The "Try it" section for htmx; without scripts, a page of its own around it (a
    wizard's next page, or the form with its problems), as the start form's page does."""
    template = "designer/editor/_try.html"
    if not request.htmx:  # type: ignore[attr-defined]
        template = "designer/try.html"
    return render(request, template, context, status=status)


@login_required
@require_GET
def entity_try_result(request: HttpRequest, workspace: str, pk: Any, run: Any) -> HttpResponse:
    """The trial's output and trace as they are now."""
    entity = _entity(request, workspace, pk)
    context = result_context(request.user, entity, run)
    return render(request, "designer/editor/_try_result.html", context)


def result_context(user: Any, entity: Any, run_id: Any) -> dict[str, Any]:
    """A trial of this entity, its outline and its output; a 404 for any other run."""
    root, outline, more = trace_outline(user=user, run_id=run_id)
    if root.entity_id != entity.pk or not root.trial or root.parent_id is not None:
        raise Http404("No such trial of this entity.")
    for node in [root, *outline]:
        node.duration_text = duration_label(node)
        node.cost_text = usd(node.total_cost_usd)
    return {
        "entity": entity,
        "workspace": entity.workspace,
        "trial": root,
        "outline": outline,
        "more": more,
        "output_json": pretty_json(root.output_data) if root.output_data is not None else "",
        "poll_s": POLL_S if root.status in MOVING else 10 if root.status in STILL else None,
    }
