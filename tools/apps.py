from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class ToolsConfig(AppConfig):
    name = "tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Models are importable only once the app registry is ready.
        from entities.models import Membership
        from entities.tool_catalog import tool_catalog_install
        from tools.access import forget_on_change
        from tools.catalog import Catalog
        from tools.models import ToolGrant

        # Entities sit below tools and never import it: definitions reach the registry
        # through the catalog handed over here (entities/tool_catalog.py).
        tool_catalog_install(Catalog())

        # A role or grant that changes takes effect in this process's tool calls at once
        # (other processes: within ToolAccess.ttl_s).
        for model in (Membership, ToolGrant):
            post_save.connect(forget_on_change, sender=model, dispatch_uid=f"tools.{model}.save")
            post_delete.connect(
                forget_on_change, sender=model, dispatch_uid=f"tools.{model}.delete"
            )
