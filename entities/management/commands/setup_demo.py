"""python manage.py setup_demo: the demo workspace, its admin and the demo hierarchy.

Idempotent: run it again and it changes nothing that is already there.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from entities.definition import DefinitionInvalid
from entities.exchange import read_import_file
from entities.models import Workspace
from entities.services import entities_import
from governance.permissions import membership_grant

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FIXTURE = FIXTURES / "video_ad_process.json"
# A small action that asks a person before it posts: try the approvals inbox with it.
HITL_FIXTURE = FIXTURES / "hitl_demo.json"
# An agent that looks things up with its tools, turn after turn (REACT), before it answers.
RESEARCH_FIXTURE = FIXTURES / "research_demo.json"
# An agent that hires a specialist per deliverable at run time and combines their work.
COORDINATOR_FIXTURE = FIXTURES / "coordinator_demo.json"


class Command(BaseCommand):
    help = "Create the demo workspace, an admin user and the Video Ad demo hierarchy."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default=os.environ.get("HIERARCH_DEMO_USER", "admin"))
        parser.add_argument("--password", default=os.environ.get("HIERARCH_DEMO_PASSWORD", "admin"))

    def handle(self, *args, username: str, password: str, **options):
        try:
            results, created = self._setup(username, password)
        except DefinitionInvalid as exc:
            for problem in exc.problems:
                self.stderr.write(str(problem))
            raise CommandError("the demo fixtures do not validate") from None
        changed = sum(1 for r in results if r.changed)
        self.stdout.write(
            f"demo workspace ready: {len(results)} entities ({changed} created or updated)"
        )
        if created:
            self.stdout.write(f"login: {username} / {password}")
        else:
            self.stdout.write(f"login: {username} (password unchanged since it was created)")

    def _setup(self, username: str, password: str):
        User = get_user_model()
        with transaction.atomic():
            workspace, _ = Workspace.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
            user, created = User.objects.get_or_create(username=username)
            if created:
                user.set_password(password)
                user.is_staff = True
                user.save()
            membership_grant(workspace=workspace, user=user, role="admin")
            results = entities_import(workspace=workspace, definitions=read_import_file(FIXTURE))
            for fixture in (HITL_FIXTURE, RESEARCH_FIXTURE, COORDINATOR_FIXTURE):
                results += entities_import(
                    workspace=workspace, definitions=read_import_file(fixture)
                )
        return results, created
