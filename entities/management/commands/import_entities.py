"""python manage.py import_entities FILE --workspace SLUG"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_slug
from django.db import transaction

from entities.definition import DefinitionInvalid
from entities.exchange import ImportFileError, read_import_file
from entities.models import Workspace
from entities.services import entities_import


class Command(BaseCommand):
    help = (
        "Import entity definitions in Hierarch's JSON exchange format (one entity, a list, or "
        '{"entities": [...]}) into a workspace, all or nothing. Creates the workspace if '
        "missing; updates entities whose id matches."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file")
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--workspace-name", help="name for a workspace created by the import")

    def handle(self, *args, file: str, workspace: str, workspace_name: str | None, **options):
        try:
            definitions = read_import_file(file)
        except ImportFileError as exc:
            raise CommandError(str(exc)) from None
        target = Workspace.objects.filter(slug=workspace).first()
        created_workspace = target is None
        if created_workspace:
            if not _valid_slug(workspace):
                raise CommandError(
                    f"{workspace!r} is not a valid workspace slug (letters, digits, '-', '_')"
                )
            target = Workspace(name=workspace_name or workspace, slug=workspace)
        try:
            with transaction.atomic():
                if created_workspace:
                    target.save()
                results = entities_import(workspace=target, definitions=definitions)
        except DefinitionInvalid as exc:
            for problem in exc.problems:
                self.stderr.write(str(problem))
            raise CommandError(
                f"nothing imported: {len(exc.problems)} problem(s) in {file}"
            ) from None
        if created_workspace:
            self.stdout.write(f"created workspace {target.slug}")
        for result in results:
            entity = result.entity
            if result.created:
                verb = "created"
            elif result.version is not None:
                verb = f"updated ({result.version.change.lower()})"
            else:
                verb = "unchanged"
            self.stdout.write(f"{verb}: {entity.name} {entity.type} {entity.version}")


def _valid_slug(slug: str) -> bool:
    try:
        validate_slug(slug)
    except ValidationError:
        return False
    return len(slug) <= 50
