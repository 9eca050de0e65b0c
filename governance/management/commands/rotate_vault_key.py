"""python manage.py rotate_vault_key"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from governance.vault import VaultError, vault_rotate


class Command(BaseCommand):
    help = (
        "Re-encrypt every secret of the credential vault with the newest key of "
        "HIERARCH_VAULT_KEYS (the first). Afterwards the older keys may be removed. Prints how "
        "many secrets were re-encrypted, never a value."
    )

    def handle(self, *args, **options):
        try:
            count = vault_rotate()
        except VaultError as exc:
            raise CommandError(str(exc)) from None
        noun = "secret" if count == 1 else "secrets"
        self.stdout.write(f"re-encrypted {count} {noun} with the newest vault key")
