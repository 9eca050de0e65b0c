"""On PostgreSQL, a trigger refuses UPDATE of judge decisions (seed 001: immutable; a new
verdict is a new row). DELETE stays possible: a run's rows go with the run."""

from django.db import migrations

from governance.migration_operations import PostgreSQLOnly


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


class Migration(migrations.Migration):
    dependencies = [("approvals", "0001_initial")]

    operations = [PostgreSQLOnly(CREATE, DROP)]
