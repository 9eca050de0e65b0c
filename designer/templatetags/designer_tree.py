"""Where the tree links an entity's name. The designer's entity editor is being built; until
it is, a name opens the entity's admin change page. This filter is the one place to change
(to `designer:entity`) when the editor lands."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

register = template.Library()


@register.filter
def entity_url(entity: Any) -> str:
    """The page that edits `entity`."""
    return reverse("admin:entities_entity_change", args=[entity.pk])
