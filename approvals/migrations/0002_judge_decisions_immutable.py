"""On PostgreSQL, a trigger refuses UPDATE of judge decisions (seed 001: immutable; a new
verdict is a new row). DELETE stays possible: a run's rows go with the run."""

from django.db import migrations


TABLE = "approvals_judgedecision"

CREATE = f"""
CREATE OR REPLACE FUNCTION approvals_judge_immutable() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'judge decisions are immutable: UPDATE of % refused', OLD.id
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER approvals_judgedecision_immutable
    BEFORE UPDATE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION approvals_judge_immutable();
"""

DROP = f"""
DROP TRIGGER IF EXISTS approvals_judgedecision_immutable ON {TABLE};
DROP FUNCTION IF EXISTS approvals_judge_immutable();
"""


class PostgreSQLOnly(migrations.RunSQL):
    """RunSQL that runs on PostgreSQL and does nothing on any other database."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    dependencies = [("approvals", "0001_initial")]

    operations = [PostgreSQLOnly(CREATE, DROP)]
