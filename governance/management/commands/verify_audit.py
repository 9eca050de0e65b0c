"""python manage.py verify_audit [--workspace SLUG] [--head HASH ...] [--heads-file FILE]"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from entities.models import Workspace
from governance.audit import KeptHead, audit_verify, kept_head_problem, kept_heads_read


class Command(BaseCommand):
    help = (
        "Recompute the audit log's keyed hash chain of a workspace (or of every workspace). "
        "Exits 0 with the record count and the newest hash when the chain is intact; exits 1 "
        "naming the first broken link (its seq, and whether a record was edited, deleted, "
        "reordered or forged), or a head kept outside the database (--head, --heads-file) "
        "that is no longer in its chain."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--workspace", help="workspace slug (default: every workspace)")
        parser.add_argument(
            "--head",
            action="append",
            default=[],
            metavar="HASH",
            help="a head hash noted earlier, which must still be in a chain (repeatable)",
        )
        parser.add_argument(
            "--heads-file",
            action="append",
            default=[],
            metavar="FILE",
            help=(
                "a file of heads exported earlier (HIERARCH_AUDIT_HEAD_FILE, export_audit_head):"
                " JSON lines with workspace, seq and hash, or one hash a line"
            ),
        )

    def handle(self, *args, workspace: str | None, head: list[str], heads_file: list[str], **_):
        kept = self._kept_heads(head, heads_file)
        workspaces = Workspace.objects.order_by("slug")
        if workspace is not None:
            workspaces = workspaces.filter(slug=workspace)
            if not workspaces.exists():
                raise CommandError(f"there is no workspace {workspace!r}")
        known = {target.slug: target for target in workspaces}
        problems = []
        for slug, target in known.items():
            result = audit_verify(workspace=target)
            own = [one for one in kept if one.workspace == slug]
            if not result.intact:
                problems.append(
                    f"{slug}: broken at {result.broken} "
                    f"(intact before it: {result.count} of the records)"
                )
                continue
            missing = [
                f"{slug}: {problem}"
                for one in own
                if (problem := kept_head_problem(one, workspace_id=target.pk)) is not None
            ]
            problems += missing
            if missing:
                continue
            noun = "head" if len(own) == 1 else "heads"
            checked = f", {len(own)} kept {noun} found in it" if own else ""
            if result.count == 0:
                # Nothing to recompute; an empty log and a wiped one look the same here.
                self.stdout.write(
                    f"{slug}: no records{checked}; an empty log cannot be told from a wiped "
                    "one without a head kept outside the database (--heads-file)"
                )
                continue
            noun = "record" if result.count == 1 else "records"
            self.stdout.write(
                f"{slug}: intact, {result.count} {noun}, head {result.last_hash}{checked}"
            )
        for one in kept:
            if one.workspace and one.workspace not in known and workspace is None:
                problems.append(
                    f"{one.workspace}: the workspace of the kept head {one} no longer exists"
                )
            elif not one.workspace:
                scope = known[workspace].pk if workspace is not None else None
                if (problem := kept_head_problem(one, workspace_id=scope)) is not None:
                    problems.append(problem)
        if problems:
            raise CommandError("\n".join(problems))

    def _kept_heads(self, hashes: list[str], files: list[str]) -> list[KeptHead]:
        try:
            kept = kept_heads_read(hashes, source="--head")
            for name in files:
                with Path(name).open(encoding="utf-8") as lines:
                    kept += kept_heads_read(lines, source=name)
        except OSError as exc:
            raise CommandError(f"cannot read the heads file: {exc}") from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        return kept
