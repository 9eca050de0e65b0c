"""python manage.py create_api_token USERNAME [--name NAME] [--days N | --no-expiry]"""

from __future__ import annotations

import argparse

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from governance.tokens import MAX_DAYS, api_token_create, expiry_in


def days(value: str) -> int:
    if not value.isdecimal() or not 1 <= int(value) <= MAX_DAYS:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of days; give a whole number from 1 to {MAX_DAYS}, "
            "or --no-expiry"
        )
    return int(value)


class Command(BaseCommand):
    help = (
        "Make an API token for a user and print it (only the token, on standard output, so "
        "TOKEN=$(manage.py create_api_token alice) works). It is shown this once; send it as "
        "'Authorization: Bearer TOKEN'. Without --days or --no-expiry it lives "
        "HIERARCH_API_TOKEN_DAYS days (0: never expires)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="the user the token acts as")
        parser.add_argument(
            "--name", default="manage.py create_api_token", help="what the token is for"
        )
        expiry = parser.add_mutually_exclusive_group()
        expiry.add_argument("--days", type=days, help=f"days the token lives, 1 to {MAX_DAYS}")
        expiry.add_argument("--no-expiry", action="store_true", help="the token never expires")

    def handle(self, *args, username: str, name: str, days: int | None, no_expiry: bool, **options):
        User = get_user_model()  # noqa: N806
        user = User._default_manager.filter(**{User.USERNAME_FIELD: username}).first()
        if user is None:
            raise CommandError(f"there is no user {username!r}")
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive; activate them to give them a token")
        if not name.strip():
            raise CommandError("--name may not be blank")
        kwargs = {}
        if no_expiry:
            kwargs["expires_at"] = None
        elif days is not None:
            kwargs["expires_at"] = expiry_in(days)
        # The audit log says the system made it: whoever ran this had the shell, not a login.
        token, plaintext = api_token_create(user=user, name=name, actor=None, **kwargs)
        expires = token.expires_at.strftime("%Y-%m-%d %H:%M UTC") if token.expires_at else "never"
        self.stderr.write(
            f"API token {token.prefix}… ({token.name}) for {username}, expires {expires}; "
            "it is shown once:",
            style_func=str,  # a note, not an error: no red
        )
        self.stdout.write(plaintext)
