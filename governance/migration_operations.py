"""Migration operations shared by the apps' migrations (kept stable: migrations import it)."""

from __future__ import annotations

from django.db import migrations


class PostgreSQLOnly(migrations.RunSQL):
    """RunSQL that runs on PostgreSQL and does nothing on any other database."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
