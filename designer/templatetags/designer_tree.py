"""Where the designer links an entity's name: its editor."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

register = template.Library()


@register.filter
def entity_url(entity: Any, workspace: str) -> str:
    """The page that edits `entity`, of the workspace whose slug is given (the page's: the
    rows of a tree are read without their workspace)."""
    return reverse("designer:entity", kwargs={"workspace": workspace, "pk": entity.pk})
