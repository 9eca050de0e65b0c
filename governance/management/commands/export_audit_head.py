"""python manage.py export_audit_head [--workspace SLUG] [--file FILE]"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from entities.models import Workspace
from governance.audit import audit_verify, kept_head_line, kept_heads_append


class Command(BaseCommand):
    help = (
        "Verify each workspace's audit chain and write its head (workspace, seq, hash) as a "
        "JSON line, to keep outside the database for `verify_audit --heads-file`: to standard "
        "output, or appended to --file. A broken chain is not exported: exits 1 naming it."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--workspace", help="workspace slug (default: every workspace)")
        parser.add_argument("--file", help="append the heads to this file instead of printing")

    def handle(self, *args, workspace: str | None, file: str | None, **options):
        workspaces = Workspace.objects.order_by("slug")
        if workspace is not None:
            workspaces = workspaces.filter(slug=workspace)
            if not workspaces.exists():
                raise CommandError(f"there is no workspace {workspace!r}")
        lines, broken = [], []
        for target in workspaces:
            result = audit_verify(workspace=target)
            if not result.intact:
                broken.append(f"{target.slug}: broken at {result.broken}; its head not exported")
            elif result.count:
                lines.append(
                    kept_head_line(
                        workspace=target.slug, seq=result.last_seq, hash=result.last_hash
                    )
                )
        if file:
            if lines:
                kept_heads_append(Path(file), lines)
            self.stderr.write(f"{len(lines)} heads appended to {file}")
        else:
            for line in lines:
                self.stdout.write(line)
        if broken:
            raise CommandError("\n".join(broken))
