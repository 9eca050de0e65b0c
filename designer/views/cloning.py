"""Templates: an entity marked `metadata_extensions.ui_hints.is_template` is a starting point.
"Use as template" (on its page, and in the tree page's list of templates) asks for a name and,
for an entity with children, whether to link the same children or copy them too, then
creates the new DRAFT through `entities.services.entity_clone` and opens it in the editor.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from entities.definition import DefinitionInvalid
from entities.selectors import entity_in_workspace, workspace_get
from entities.services import CLONE_CHILDREN, CLONE_LINK, entity_clone, is_template
from governance.permissions import DESIGN, has_perm


class CloneForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        label="Name of the new entity",
        help_text="Unique in the workspace: letters, digits, '_', '-' and '.'.",
    )
    children = forms.ChoiceField(
        choices=list(CLONE_CHILDREN.items()),
        initial=CLONE_LINK,
        widget=forms.RadioSelect,
        label="Its children",
    )

    def __init__(self, *args: Any, composite: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not composite:
            del self.fields["children"]


@login_required
@require_http_methods(["GET", "POST"])
def entity_clone_view(request: HttpRequest, workspace: str, pk: Any) -> HttpResponse:
    """The form of "Use as template"; a valid one creates the copy and opens it, a refused
    one comes back with each problem at its field (422)."""
    ws = workspace_get(user=request.user, slug=workspace)
    template = entity_in_workspace(user=request.user, workspace=ws, pk=pk)
    if not has_perm(request.user, DESIGN, ws):
        raise PermissionDenied("Only the workspace's designers create entities.")
    composite = template.child_links.exists()
    form = CloneForm(
        request.POST if request.method == "POST" else None, composite=composite, label_suffix=""
    )
    context = {"workspace": ws, "template": template, "form": form}
    if not is_template(template):
        context["refused"] = (
            f"{template.name} is not a template. Tick “Template” in its editor (Identity and "
            "persona) to start new entities from it."
        )
        return render(request, "designer/clone.html", context, status=409)
    if request.method == "GET":
        return render(request, "designer/clone.html", context)
    if not form.is_valid():
        return render(request, "designer/clone.html", context, status=422)
    try:
        result = entity_clone(
            template=template,
            name=form.cleaned_data["name"].strip(),
            children=form.cleaned_data.get("children") or CLONE_LINK,
            user=request.user,
        )
    except DefinitionInvalid as invalid:
        for problem in invalid.problems:
            field = problem.path if problem.path in form.fields else None
            where = "" if field or problem.path in ("", "name") else f"{problem.path}: "
            form.add_error(field, f"{where}{problem.message}")
        return render(request, "designer/clone.html", context, status=422)
    clone = result.entity
    messages.success(
        request,
        f"Created {clone.name} from the template {template.name}: a draft, version "
        f"{clone.version}.",
    )
    return redirect("designer:entity", workspace=ws.slug, pk=clone.pk)
