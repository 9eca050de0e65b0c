"""On PostgreSQL, a trigger refuses UPDATE and DELETE of audit records, so even the app's own
database role cannot rewrite the log through SQL. SQLite (the embedded default) has no such
guard; `manage.py verify_audit` detects tampering on both. TRUNCATE is left alone (Django
flushes test databases with it); a truncated log still fails `verify_audit`, because the
chain head (`governance_auditchain`) remembers the last sequence number and hash."""

from django.db import migrations

from governance.migration_operations import PostgreSQLOnly

TABLE = "governance_auditrecord"

CREATE = f"""
CREATE OR REPLACE FUNCTION governance_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit records are append-only: % of % seq % refused',
        TG_OP, TG_TABLE_NAME, OLD.seq
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER governance_auditrecord_append_only
    BEFORE UPDATE OR DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION governance_audit_append_only();
"""

DROP = f"""
DROP TRIGGER IF EXISTS governance_auditrecord_append_only ON {TABLE};
DROP FUNCTION IF EXISTS governance_audit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0001_initial"),
    ]

    operations = [
        PostgreSQLOnly(CREATE, DROP),
    ]
