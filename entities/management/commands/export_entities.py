"""python manage.py export_entities --workspace SLUG [--root NAME]"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from entities.exchange import export_workspace
from entities.models import Entity, Workspace


class Command(BaseCommand):
    help = (
        "Print the workspace's entities (or one root and everything below it) as JSON in "
        "Hierarch's exchange format; the output imports back to the same definitions."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--root", help="name of the entity to export with its descendants")

    def handle(self, *args, workspace: str, root: str | None, **options):
        target = Workspace.objects.filter(slug=workspace).first()
        if target is None:
            raise CommandError(f"there is no workspace {workspace!r}")
        root_entity = None
        if root:
            root_entity = Entity.objects.filter(workspace=target, name=root).first()
            if root_entity is None:
                raise CommandError(f"there is no entity named {root!r} in workspace {workspace!r}")
        document = export_workspace(target, root=root_entity)
        self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False))
