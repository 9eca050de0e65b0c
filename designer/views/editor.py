"""The entity editor: one page with a form per section of the definition, checked as the
designer types (htmx posts the form to `check`, which answers with every field's problems),
saved whole through `entities.services.entity_save`.

Every request carries the whole working definition (`document`), so an error, an added row or
a trip through the raw JSON view loses nothing. Viewers see the same page read-only; only
designers save.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from designer.editor.base import EditorContext, moved_row
from designer.editor.children import widened_row
from designer.editor.document import RAW, Editor, raw_definition
from designer.views.trial import may_try, result_context, trial_inputs
from entities.definition import DefinitionInvalid, Problem
from entities.selectors import entity_definition, entity_in_workspace, workspace_get
from entities.services import STATUS_TRANSITIONS, entity_save, entity_set_status, entity_validate
from governance.permissions import DESIGN, has_perm
from runs.gateway import chat_model_catalog

NEW_TYPES = ("PROCESS", "AGENT", "SKILL", "ACTION")
STATUS_ACTIONS = {
    "ACTIVE": "Activate",
    "DRAFT": "Back to draft",
    "DEPRECATED": "Deprecate",
    "ARCHIVED": "Archive",
}
MOST_SUGGESTIONS = 50


def _context(request: HttpRequest, workspace: str, pk: Any) -> tuple[EditorContext, dict]:
    """The editor's context and the saved definition (a skeleton for a new entity)."""
    ws = workspace_get(user=request.user, slug=workspace)
    if pk is None:
        kind = request.GET.get("type", "AGENT")
        if kind not in NEW_TYPES:
            kind = "AGENT"
        context = EditorContext(workspace=ws, entity=None, entity_type=kind, user=request.user)
        return context, {"metadata": {"type": kind, "status": "DRAFT"}, "identity": {"name": ""}}
    entity = entity_in_workspace(user=request.user, workspace=ws, pk=pk)
    context = EditorContext(workspace=ws, entity=entity, entity_type=entity.type, user=request.user)
    return context, entity_definition(entity=entity)


def _can_design(request: HttpRequest, context: EditorContext) -> bool:
    return has_perm(request.user, DESIGN, context.workspace)


def _urls(context: EditorContext) -> dict[str, str]:
    ws = context.workspace.slug
    if context.entity is None:
        base = reverse("designer:entity_new", kwargs={"workspace": ws})
        query = "?" + urlencode({"type": context.entity_type})
        return {
            "save": base + query,
            "check": reverse("designer:entity_new_check", kwargs={"workspace": ws}) + query,
            "json": reverse("designer:entity_new_json", kwargs={"workspace": ws}) + query,
        }
    kwargs = {"workspace": ws, "pk": context.entity.pk}
    return {
        "save": reverse("designer:entity", kwargs=kwargs),
        "check": reverse("designer:entity_check", kwargs=kwargs),
        "json": reverse("designer:entity_json", kwargs=kwargs),
        "status": reverse("designer:entity_status", kwargs=kwargs),
    }


def _render(
    request: HttpRequest, editor: Editor, *, status: int = 200, raw_text: str | None = None
) -> HttpResponse:
    context = editor.context
    entity = context.entity
    transitions = sorted(STATUS_TRANSITIONS.get(entity.status, ())) if entity else []
    trial: dict[str, Any] = {}
    if entity is not None and may_try(request.user, context.workspace):
        trial |= trial_inputs(entity)
        shown = request.GET.get("try", "")
        with contextlib.suppress(ValueError):  # not a run id: the form alone
            trial |= result_context(request.user, entity, uuid.UUID(shown))
    return render(
        request,
        "designer/entity.html",
        {
            "editor": editor,
            "workspace": context.workspace,
            "entity": entity,
            "entity_type": context.entity_type,
            "can_design": _can_design(request, context),
            "urls": _urls(context),
            "raw_text": raw_text
            if raw_text is not None
            else json.dumps(editor.definition, indent=2, ensure_ascii=False),
            "raw_open": raw_text is not None,
            "status_actions": [(s, STATUS_ACTIONS[s]) for s in transitions],
            "new_types": NEW_TYPES,
            **trial,
        },
        status=status,
    )


@login_required
@require_http_methods(["GET", "POST"])
def entity(request: HttpRequest, workspace: str, pk: Any = None) -> HttpResponse:
    """Show the editor, or save what it sent: a new version on success, every problem at its
    field (422) otherwise. A child's "take the newest" button (`widen`) saves the form with
    that child's version widened."""
    context, saved = _context(request, workspace, pk)
    if request.method == "GET":
        return _render(request, Editor.showing(context, saved))
    if not _can_design(request, context):
        raise PermissionDenied("Only the workspace's designers change its entities.")
    op = request.POST.get("op", "save")
    if op == "fields":  # the raw JSON, laid into the form without saving
        return _from_raw(request, context)
    if op == "save-raw":
        definition, error = raw_definition(request.POST.get(RAW, ""))
        editor = Editor.posted(context, request.POST)
        if error or definition is None:
            editor.general.append(Problem("", error))
            return _render(request, editor, status=422, raw_text=request.POST.get(RAW, ""))
        return _save(request, context, editor, definition, raw=True)
    add_row = request.POST.get("add_row", "")
    move = request.POST.get("move_row", "")
    data = moved_row(request.POST, move) if move else request.POST
    widen = request.POST.get("widen", "")
    if widen:  # a child's "take the newest": its version set, then saved as the form is
        data = widened_row(data, widen)
    editor = Editor.posted(context, data, add_row=add_row)
    if add_row or move:  # the section shown again with the row added or moved, not saved
        return _render(request, editor)
    definition = editor.definition_from_fields()
    if definition is None:
        editor.check(_problems_of(context))
        return _render(request, editor, status=422)
    return _save(request, context, editor, definition)


def _save(
    request: HttpRequest,
    context: EditorContext,
    editor: Editor,
    definition: dict,
    *,
    raw: bool = False,
) -> HttpResponse:
    try:
        result = entity_save(
            workspace=context.workspace,
            definition=definition,
            user=request.user,
            entity=context.entity,
        )
    except DefinitionInvalid as exc:
        if raw:
            editor = Editor.showing(context, definition)
            editor.general.extend(exc.problems)
            return _render(request, editor, status=422, raw_text=request.POST.get(RAW, ""))
        editor.show_problems(exc.problems)
        return _render(request, editor, status=422)
    saved = result.entity
    if result.created:
        messages.success(
            request, f"Created {saved.name} ({saved.type.lower()}), version {saved.version}."
        )
    elif result.version is not None:
        messages.success(request, f"Saved {saved.name}: version {result.version.version}.")
    else:
        messages.info(request, "Nothing changed: the definition is as it was.")
    return redirect("designer:entity", workspace=context.workspace.slug, pk=saved.pk)


def _from_raw(request: HttpRequest, context: EditorContext) -> HttpResponse:
    text = request.POST.get(RAW, "")
    definition, error = raw_definition(text)
    if error or definition is None:
        editor = Editor.posted(context, request.POST)
        editor.raw_error = error
        return _render(request, editor, status=422, raw_text=text)
    editor = Editor.showing(context, definition)
    editor.show_problems(
        entity_validate(workspace=context.workspace, definition=definition, entity=context.entity)
    )
    return _render(request, editor)


@login_required
@require_POST
def entity_check(request: HttpRequest, workspace: str, pk: Any = None) -> HttpResponse:
    """Every problem of what the form holds now, each at its field (htmx swaps the slots)."""
    context, _saved = _context(request, workspace, pk)
    editor = Editor.posted(context, request.POST)
    editor.check(_problems_of(context))
    return render(request, "designer/editor/_check.html", {"editor": editor, "checked": True})


def _problems_of(context: EditorContext) -> Callable[[dict], list[Problem]]:
    def problems_of(definition: dict) -> list[Problem]:
        return entity_validate(
            workspace=context.workspace, definition=definition, entity=context.entity
        )

    return problems_of


@login_required
@require_POST
def entity_json(request: HttpRequest, workspace: str, pk: Any = None) -> HttpResponse:
    """The raw view in step with the form: the whole definition the fields make now."""
    context, _saved = _context(request, workspace, pk)
    editor = Editor.posted(context, request.POST)
    definition = editor.definition_from_fields()
    note = (
        ""
        if definition is not None
        else "Some fields are not valid yet: this is the definition as last valid."
    )
    text = json.dumps(
        definition if definition is not None else editor.definition, indent=2, ensure_ascii=False
    )
    return render(
        request, "designer/editor/_raw.html", {"raw_text": text, "raw_note": note, "editor": editor}
    )


@login_required
@require_POST
def entity_status(request: HttpRequest, workspace: str, pk: Any) -> HttpResponse:
    """Activate, deprecate, archive or send back to draft."""
    context, _saved = _context(request, workspace, pk)
    if not _can_design(request, context):
        raise PermissionDenied("Only the workspace's designers change its entities.")
    try:
        entity_set_status(
            entity=context.entity, status=request.POST.get("status", ""), user=request.user
        )
    except DefinitionInvalid as exc:
        messages.error(request, "; ".join(p.message for p in exc.problems))
    else:
        messages.success(request, f"{context.entity.name} is now {request.POST['status'].lower()}.")
    return redirect("designer:entity", workspace=context.workspace.slug, pk=context.entity.pk)


@login_required
@require_GET
def model_suggestions(request: HttpRequest, kind: str) -> HttpResponse:
    """`<option>`s for the editor's datalists, matching what is typed in its Provider and
    Model fields (sent as they are named in the form): the providers, or the chat models of
    the provider typed."""
    catalog = chat_model_catalog()
    provider = request.GET.get("model-model_provider", "").strip()[:100]
    if kind == "providers":
        names, search = list(catalog), provider
    else:
        names, search = catalog.get(provider, []), request.GET.get("model-model_name", "")
    search = search.strip().lower()[:100]
    found = [name for name in names if search in name.lower()][:MOST_SUGGESTIONS]
    return render(request, "designer/editor/_options.html", {"options": found})
