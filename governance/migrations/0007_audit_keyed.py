"""Keyed audit hashes: each record names the key that signed it (`key_id`; empty on the plain
SHA-256 records written before), and, on PostgreSQL, a trigger refuses TRUNCATE of the audit
records and of the chain heads, as 0002's refuses UPDATE and DELETE of records.

Django's own test flush truncates every table: a superuser's session may allow it with
`SET hierarch.audit_truncate = 'allow'` (tests/conftest.py does, for the test database). A
superuser can disable any trigger anyway; the setting is refused to every other role, the
application's included. What no trigger stops (a superuser, a restored backup) the keyed
hashes and the heads kept outside the database catch (governance/audit.py)."""

from django.db import migrations, models

from governance.migration_operations import PostgreSQLOnly

CREATE = """
CREATE OR REPLACE FUNCTION governance_audit_no_truncate() RETURNS trigger AS $$
BEGIN
    IF current_setting('hierarch.audit_truncate', true) = 'allow'
       AND (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'the audit log cannot be truncated: TRUNCATE of % refused', TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'audit records and their chain heads are append-only (governance/audit.py)';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER governance_auditrecord_no_truncate
    BEFORE TRUNCATE ON governance_auditrecord
    FOR EACH STATEMENT EXECUTE FUNCTION governance_audit_no_truncate();

CREATE TRIGGER governance_auditchain_no_truncate
    BEFORE TRUNCATE ON governance_auditchain
    FOR EACH STATEMENT EXECUTE FUNCTION governance_audit_no_truncate();
"""

DROP = """
DROP TRIGGER IF EXISTS governance_auditrecord_no_truncate ON governance_auditrecord;
DROP TRIGGER IF EXISTS governance_auditchain_no_truncate ON governance_auditchain;
DROP FUNCTION IF EXISTS governance_audit_no_truncate();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('governance', '0006_api_tokens'),
    ]

    operations = [
        migrations.AddField(
            model_name='auditrecord',
            name='key_id',
            field=models.CharField(blank=True, default='', max_length=16),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='action',
            field=models.CharField(choices=[('entity.created', 'Entity Created'), ('entity.updated', 'Entity Updated'), ('entity.status_changed', 'Entity Status Changed'), ('entity.rolled_back', 'Entity Rolled Back'), ('entity.deleted', 'Entity Deleted'), ('entity.imported', 'Entity Imported'), ('run.started', 'Run Started'), ('run.cancelled', 'Run Cancelled'), ('run.budget_raised', 'Run Budget Raised'), ('approval.decided', 'Approval Decided'), ('membership.granted', 'Membership Granted'), ('membership.revoked', 'Membership Revoked'), ('tool.granted', 'Tool Granted'), ('tool.grant_revoked', 'Tool Grant Revoked'), ('secret.set', 'Secret Set'), ('secret.deleted', 'Secret Deleted'), ('secret.rotated', 'Secret Rotated'), ('api_token.created', 'API token created'), ('api_token.revoked', 'API token revoked'), ('audit.keyed', 'Audit chain keyed')], max_length=50),
        ),
        PostgreSQLOnly(CREATE, DROP),
    ]
