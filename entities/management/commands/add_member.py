"""python manage.py add_member USERNAME --workspace SLUG --role ROLE [--password PW]"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from entities.models import Role, Workspace
from governance.permissions import membership_grant


class Command(BaseCommand):
    help = (
        "Grant a role in a workspace, creating the user when missing. Members may sign in "
        "to the console."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--role", required=True, choices=Role.values)
        parser.add_argument(
            "--password", help="set this password (a new user without one cannot sign in)"
        )
        parser.add_argument("--email", default="")

    def handle(
        self,
        *args,
        username: str,
        workspace: str,
        role: str,
        password: str | None,
        email: str,
        **options,
    ):
        User = get_user_model()
        with transaction.atomic():
            target = Workspace.objects.filter(slug=workspace).first()
            if target is None:
                raise CommandError(
                    f"there is no workspace {workspace!r}; create it with "
                    f"import_entities or in the admin first"
                )
            user, created = User.objects.get_or_create(username=username, defaults={"email": email})
            if created and not password:
                user.set_unusable_password()
            if password:
                user.set_password(password)
            if not user.is_staff:
                user.is_staff = True  # the admin is the console's designer for now
            user.save()
            membership_grant(workspace=target, user=user, role=role)
        self.stdout.write(
            f"{'created user' if created else 'user'} {username}: {role} of {target.slug}"
        )
