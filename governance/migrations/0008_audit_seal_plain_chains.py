"""Every chain written before keyed hashes gets a signed `audit.keyed` record after its plain
SHA-256 records, whose HMAC covers the last plain hash: the old records keep verifying, a
rewrite of them (with recomputed plain hashes) does not, and neither does a chain cut back to
its plain part (governance/audit.py). Signed with the audit key of the settings at the time
(HIERARCH_AUDIT_KEYS, else derived from SECRET_KEY), so run it where the server runs."""

from django.db import migrations


def seal(apps, schema_editor):
    from governance.audit import audit_legacy_chains_seal

    audit_legacy_chains_seal(
        record_model=apps.get_model("governance", "AuditRecord"),
        chain_model=apps.get_model("governance", "AuditChain"),
    )


class Migration(migrations.Migration):

    dependencies = [
        ('governance', '0007_audit_keyed'),
    ]

    operations = [
        migrations.RunPython(seal, migrations.RunPython.noop),
    ]
