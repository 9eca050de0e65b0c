from __future__ import annotations

from django.apps import AppConfig


class DesignerConfig(AppConfig):
    """The designer: a workspace's hierarchy as a tree, the entity editor with its live
    validation and "Try it", and an entity's versions. Pages only: every write goes through
    `entities.services`, every read through `entities.selectors`."""

    name = "designer"
    default_auto_field = "django.db.models.BigAutoField"
