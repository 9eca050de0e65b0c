"""The tamper-evident audit log (governance/audit.py): what is recorded, the keyed hash
chain, `verify_audit` finding an edited, deleted, reordered or forged record and a kept head
that is gone, the export of heads, the append-only and no-truncate triggers on PostgreSQL, one
chain under concurrent writers, and the read-only admin.

alice designs in Acme, bob views Acme, charlie designs in Globex.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.urls import reverse
from django.utils import timezone

from entities.definition import DefinitionInvalid
from entities.models import EntityVersion, Membership
from entities.services import (
    entities_delete,
    entities_import,
    entity_rollback,
    entity_save,
    entity_set_status,
)
from governance.audit import (
    GENESIS,
    audit_heads_export,
    audit_keys,
    audit_legacy_chains_seal,
    audit_record,
    audit_verify,
    digest,
    kept_heads_read,
    record_hash,
)
from governance.models import AuditChain, AuditRecord
from governance.permissions import membership_grant, membership_revoke
from runs.services import RunRefused, run_cancel, run_start
from tests.factories import EntityFactory, UserFactory, WorkspaceFactory, definition, grant
from tests.marks import postgresql_only

TABLE = AuditRecord._meta.db_table
TRIGGER = "governance_auditrecord_append_only"
on_postgresql = postgresql_only("the append-only trigger is PostgreSQL's")


def records(workspace, action: str | None = None) -> list[AuditRecord]:
    rows = AuditRecord.objects.filter(workspace=workspace).order_by("seq")
    return list(rows.filter(action=action) if action else rows)


def actions(workspace) -> list[str]:
    return [record.action for record in records(workspace)]


def chain_of(workspace, count: int) -> list[AuditRecord]:
    """`count` records in the workspace, written by the system."""
    return [
        audit_record(
            workspace=workspace,
            action="entity.updated",
            object_type="entity",
            object_id=str(n),
            object_label=f"entity_{n}",
            after={"n": n},
        )
        for n in range(1, count + 1)
    ]


@contextmanager
def tampering():
    """A cursor for rewriting audit rows behind the service's back. On PostgreSQL the
    append-only trigger refuses that, so the trigger is disabled here, inside the test's own
    transaction (ALTER TABLE is transactional: the rollback at the test's end restores it)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # ALTER TABLE refuses while the transaction's deferred foreign-key checks on the
            # table are pending: run them now.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER {TRIGGER}")
        yield cursor
        if connection.vendor == "postgresql":
            cursor.execute(f"ALTER TABLE {TABLE} ENABLE TRIGGER {TRIGGER}")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def verify(slug: str) -> str:
    """`verify_audit --workspace SLUG`'s output; raises CommandError (exit 1) when broken."""
    out = StringIO()
    call_command("verify_audit", workspace=slug, stdout=out)
    return out.getvalue()


def broken(slug: str) -> str:
    with pytest.raises(CommandError) as failure:
        verify(slug)
    assert failure.value.returncode == 1
    return str(failure.value)


# The chain


def test_each_record_carries_the_hash_of_the_one_before(acme):
    written = chain_of(acme, 4)

    assert [record.seq for record in written] == [1, 2, 3, 4]
    assert written[0].prev_hash == GENESIS
    for earlier, later in zip(written, written[1:], strict=False):
        assert later.prev_hash == earlier.hash
    stored = records(acme)
    assert [record.hash for record in stored] == [record.hash for record in written]
    assert all(record_hash(record) == record.hash for record in stored)
    head = AuditChain.objects.get(workspace=acme)
    assert (head.last_seq, head.last_hash) == (4, written[-1].hash)


def test_each_workspace_has_its_own_chain(acme, globex):
    chain_of(acme, 2)
    chain_of(globex, 3)
    audit_record(workspace=acme, action="entity.created")

    assert [r.seq for r in records(acme)] == [1, 2, 3]
    assert [r.seq for r in records(globex)] == [1, 2, 3]
    assert records(globex)[0].prev_hash == GENESIS


def test_numbers_read_back_from_the_json_column_still_match_the_hash(acme):
    # jsonb keeps numbers as numerics, so 1e16 comes back as an integer; the hash reads
    # whole numbers by value and so matches after the round trip.
    record = audit_record(
        workspace=acme,
        action="entity.updated",
        after={"big": 1e16, "tenth": 0.1, "whole": 2.0, "tiny": 1.5e-7, "flag": True},
    )

    stored = AuditRecord.objects.get(pk=record.pk)
    assert record_hash(stored) == record.hash
    assert audit_verify(workspace=acme).intact


def test_an_unknown_action_is_refused_naming_it(acme):
    with pytest.raises(ValueError, match=r"'entity\.exploded' is not an audit action"):
        audit_record(workspace=acme, action="entity.exploded")

    assert not AuditRecord.objects.exists()


def test_a_record_outlives_the_user_who_acted(acme, alice):
    audit_record(workspace=acme, action="entity.created", actor=alice)
    alice.delete()

    record = AuditRecord.objects.get(action="entity.created")
    assert record.actor_id is not None
    assert record.actor_name == "alice"
    assert audit_verify(workspace=acme).intact


# What is recorded


def test_entity_changes_are_recorded_with_who_before_and_after(acme, alice):
    created = entity_save(workspace=acme, definition=definition("writer"), user=alice)
    writer = created.entity
    changed = definition("writer")
    changed["identity"]["description"] = "writes better"
    entity_save(workspace=acme, definition=changed, user=alice, entity=writer)
    entity_set_status(entity=writer, status="DEPRECATED", user=alice, reason="replaced")
    entity_rollback(version=created.version, user=alice)

    assert actions(acme)[-4:] == [
        "entity.created",
        "entity.updated",
        "entity.status_changed",
        "entity.rolled_back",
    ]
    made, updated, status, rolled_back = records(acme)[-4:]
    assert made.actor == alice and made.actor_name == "alice"
    assert (made.object_type, made.object_id, made.object_label) == (
        "entity",
        str(writer.pk),
        "writer",
    )
    assert made.before is None
    assert made.after["version"] == "1.0.0" and made.after["status"] == "ACTIVE"
    assert updated.before["version"] == "1.0.0"
    assert updated.after["version"] == "1.0.1"
    assert updated.after["change"] == "PATCH"
    assert updated.before["definition_sha256"] == made.after["definition_sha256"]
    assert updated.after["definition_sha256"] != made.after["definition_sha256"]
    assert status.before == {"status": "ACTIVE"}
    assert status.after == {"status": "DEPRECATED", "reason": "replaced"}
    assert rolled_back.after["restored_from"] == "1.0.0"
    assert rolled_back.after["version"] == "1.0.2"
    # Each record pins the snapshot it wrote by its hash.
    snapshot = EntityVersion.objects.get(entity=writer, version="1.0.2").definition
    assert rolled_back.after["definition_sha256"] == digest(snapshot)
    assert rolled_back.after["status"] == "DEPRECATED"  # a rollback keeps the status


def test_a_save_that_changes_nothing_records_nothing(acme, alice):
    writer = EntityFactory(workspace=acme, name="writer", user=alice)
    count = AuditRecord.objects.count()

    entity_save(workspace=acme, definition=definition("writer"), user=alice, entity=writer)

    assert AuditRecord.objects.count() == count


def test_a_status_change_in_a_saved_definition_is_recorded(acme, alice):
    writer = EntityFactory(workspace=acme, name="writer")
    draft = definition("writer", metadata={"status": "DRAFT", "tags": []})

    entity_save(workspace=acme, definition=draft, user=alice, entity=writer)

    record = records(acme, "entity.status_changed")[-1]
    assert (record.before, record.after, record.actor) == (
        {"status": "ACTIVE"},
        {"status": "DRAFT"},
        alice,
    )


def test_a_refused_save_records_nothing(acme, alice):
    EntityFactory(workspace=acme, name="writer")
    count = AuditRecord.objects.count()

    with pytest.raises(DefinitionInvalid):
        entity_save(workspace=acme, definition=definition("writer"), user=alice)

    assert AuditRecord.objects.count() == count


def test_an_import_is_recorded_per_entity_it_creates_or_changes(acme, alice):
    EntityFactory(workspace=acme, name="kept")
    changed = definition("kept")
    changed["identity"]["description"] = "changed by the import"

    entities_import(
        workspace=acme,
        definitions=[definition("fresh"), changed, definition("another")],
        user=alice,
    )

    imported = records(acme, "entity.imported")
    assert {(r.object_label, r.after["change"]) for r in imported} == {
        ("fresh", "INITIAL"),
        ("kept", "PATCH"),
        ("another", "INITIAL"),
    }
    assert {r.actor for r in imported} == {alice}
    assert "entity.created" not in actions(acme)[-3:]


def test_a_deleted_entity_is_recorded_with_what_it_was(acme, alice):
    doomed = EntityFactory(workspace=acme, name="doomed")

    entities_delete(workspace=acme, entities=[doomed], user=alice)

    record = records(acme)[-1]
    assert record.action == "entity.deleted"
    assert record.object_id == str(doomed.pk)
    assert record.before == {"type": "ACTION", "status": "ACTIVE", "version": "1.0.0"}
    assert record.actor == alice


def test_memberships_granted_and_revoked_are_recorded_with_who_did_it(acme, root):
    dora = UserFactory(username="dora")
    membership_grant(workspace=acme, user=dora, role="operator", actor=root)
    membership_grant(workspace=acme, user=dora, role="operator", actor=root)  # no change
    membership_revoke(membership=Membership.objects.get(user=dora), actor=root)

    granted, revoked = records(acme, "membership.granted")[-1], records(acme)[-1]
    assert len(records(acme, "membership.granted")) == 1
    assert (granted.actor, granted.after) == (root, {"user": "dora", "role": "operator"})
    assert revoked.action == "membership.revoked"
    assert (revoked.actor, revoked.before) == (root, {"user": "dora", "role": "operator"})


def test_a_run_started_and_cancelled_is_recorded(acme):
    operator = grant(UserFactory(username="olga"), acme, "operator")
    entity = EntityFactory(workspace=acme, name="runner")

    run = run_start(entity=entity, input_data={}, user=operator)
    run_cancel(run=run, user=operator)

    started, cancelled = records(acme)[-2:]
    assert (started.action, started.object_type, started.object_id) == (
        "run.started",
        "run",
        str(run.pk),
    )
    assert started.after == {"entity": "runner", "version": "1.0.0"}
    assert started.actor == operator
    assert (cancelled.action, cancelled.object_id, cancelled.actor) == (
        "run.cancelled",
        str(run.pk),
        operator,
    )


def test_a_run_refused_records_nothing(acme, bob):
    entity = EntityFactory(workspace=acme, name="runner")
    count = AuditRecord.objects.count()

    with pytest.raises(RunRefused, match="may not start runs"):
        run_start(entity=entity, input_data={}, user=bob)

    assert AuditRecord.objects.count() == count


# Append-only


def test_the_orm_refuses_to_update_or_delete_a_record(acme):
    record = chain_of(acme, 1)[0]

    with pytest.raises(TypeError, match="append-only"):
        record.save()
    with pytest.raises(TypeError, match="append-only"):
        record.delete()
    with pytest.raises(TypeError, match="append-only"):
        AuditRecord.objects.filter(pk=record.pk).update(action="entity.deleted")
    with pytest.raises(TypeError, match="append-only"):
        AuditRecord.objects.all().delete()


@on_postgresql
@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE governance_auditrecord SET after = '{}'::jsonb",
        "UPDATE governance_auditrecord SET seq = seq + 100",
        "DELETE FROM governance_auditrecord",
    ],
)
def test_postgresql_refuses_to_update_or_delete_audit_rows_even_through_sql(acme, sql):
    chain_of(acme, 2)

    refused = pytest.raises(DatabaseError, match="audit records are append-only")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)

    assert audit_verify(workspace=acme).intact
    assert AuditRecord.objects.filter(workspace=acme).count() == 2


# verify_audit


def test_verify_audit_reports_an_intact_chain_with_its_count(acme, globex):
    written = chain_of(acme, 3)

    assert verify("acme") == f"acme: intact, 3 records, head {written[-1].hash}\n"


def test_verify_audit_with_no_records_says_an_empty_log_cannot_be_told_from_a_wiped_one(globex):
    assert verify("globex") == (
        "globex: no records; an empty log cannot be told from a wiped one without a head "
        "kept outside the database (--heads-file)\n"
    )


def test_verify_audit_checks_every_workspace_without_one_named(acme, globex):
    chain_of(acme, 2)
    chain_of(globex, 1)
    out = StringIO()

    call_command("verify_audit", stdout=out)

    assert "acme: intact, 2 records" in out.getvalue()
    assert "globex: intact, 1 record," in out.getvalue()


def test_verify_audit_names_a_workspace_that_does_not_exist(db):
    with pytest.raises(CommandError, match="there is no workspace 'nowhere'"):
        verify("nowhere")


def test_an_edited_record_is_found(acme):
    chain_of(acme, 4)
    with tampering() as cursor:
        cursor.execute(
            "UPDATE governance_auditrecord SET object_label = %s "
            "WHERE workspace_id = %s AND seq = 3",
            ["someone_else", acme.pk],
        )

    message = broken("acme")
    assert "seq 3: edited: its contents do not match its hash" in message
    assert "(intact before it: 2 of the records)" in message


def test_an_edited_record_whose_hash_was_recomputed_is_found_by_the_next_link(acme):
    chain_of(acme, 4)
    third = AuditRecord.objects.get(workspace=acme, seq=3)
    third.after = {"n": 300}
    forged = record_hash(third)
    with tampering() as cursor:
        cursor.execute(
            "UPDATE governance_auditrecord SET after = %s, hash = %s WHERE id = %s",
            ['{"n": 300}', forged, third.pk],
        )

    assert "seq 4: edited or replaced: its link to seq 3 does not match" in broken("acme")


def test_a_deleted_record_is_found_as_a_gap(acme):
    chain_of(acme, 5)
    with tampering() as cursor:
        cursor.execute(
            "DELETE FROM governance_auditrecord WHERE workspace_id = %s AND seq = 2", [acme.pk]
        )

    assert "seq 2: deleted: seq 2 missing (a gap before seq 3)" in broken("acme")


def test_deleted_newest_records_are_found_against_the_chain_head(acme):
    chain_of(acme, 5)
    with tampering() as cursor:
        cursor.execute(
            "DELETE FROM governance_auditrecord WHERE workspace_id = %s AND seq >= 4", [acme.pk]
        )

    message = broken("acme")
    assert "seq 4: deleted: the newest records (seq 4 to 5) are missing" in message


def test_a_truncated_log_is_found_against_the_chain_head(acme):
    chain_of(acme, 2)
    with tampering() as cursor:
        cursor.execute("DELETE FROM governance_auditrecord WHERE workspace_id = %s", [acme.pk])

    assert "seq 1: deleted: the newest records (seq 1 to 2) are missing" in broken("acme")


def test_reordered_records_are_found(acme):
    chain_of(acme, 4)
    with tampering() as cursor:
        swap = "UPDATE governance_auditrecord SET seq = %s WHERE workspace_id = %s AND seq = %s"
        cursor.execute(swap, [0, acme.pk, 2])
        cursor.execute(swap, [2, acme.pk, 3])
        cursor.execute(swap, [3, acme.pk, 0])

    message = broken("acme")
    assert "seq 2: reordered: it follows the record now at seq 3, not seq 1" in message


def test_a_forged_first_record_is_found(acme):
    chain_of(acme, 2)
    with tampering() as cursor:
        cursor.execute(
            "UPDATE governance_auditrecord SET prev_hash = %s WHERE workspace_id = %s AND seq = 1",
            ["f" * 64, acme.pk],
        )

    assert "seq 1: edited or replaced: its link to the start of the chain" in broken("acme")


def test_an_audit_made_through_the_services_verifies(acme, alice):
    writer = EntityFactory(workspace=acme, name="writer", user=alice)
    entity_set_status(entity=writer, status="DRAFT", user=alice)
    grant(UserFactory(username="dora"), acme, "viewer")

    assert audit_verify(workspace=acme).intact
    assert "acme: intact" in verify("acme")


# The key: a chain rewritten without it does not verify


OTHER_KEY = "another-key-the-forger-made-up-" + "z" * 16


def rewrite(workspace, sign, through: int | None = None) -> None:
    """Rewrite the workspace's chain (up to seq `through`, else all of it) through SQL, each
    record's `after` changed and every hash recomputed in order by `sign` (a record -> its
    hash), the chain head moved along: a forgery as someone with SQL access but without the
    key would make it."""
    previous = GENESIS
    with tampering() as cursor:
        for record in records(workspace)[:through]:
            record.after, record.prev_hash = {"forged": record.seq}, previous
            record.hash = sign(record)
            cursor.execute(
                "UPDATE governance_auditrecord SET after = %s, prev_hash = %s, hash = %s, "
                "key_id = %s WHERE id = %s",
                [json.dumps(record.after), record.prev_hash, record.hash, record.key_id, record.pk],
            )
            previous = record.hash
        if through is not None:
            return
        cursor.execute(
            "UPDATE governance_auditchain SET last_hash = %s WHERE workspace_id = %s",
            [previous, workspace.pk],
        )


def plain_sha256(record) -> str:
    record.key_id = ""
    return record_hash(record)


def test_new_records_are_signed_with_the_newest_key_not_plain_sha256(acme):
    record = chain_of(acme, 1)[0]

    assert record.key_id == audit_keys()[0].id
    record.key_id = ""
    assert record_hash(record) != record.hash


def test_a_chain_forged_with_recomputed_plain_sha256_hashes_fails_verification(acme):
    chain_of(acme, 3)

    rewrite(acme, plain_sha256)

    result = audit_verify(workspace=acme)
    assert not result.intact
    assert "seq 3: unsigned: the chain ends in a record with a plain SHA-256 hash" in broken("acme")


def test_a_chain_forged_with_hmac_under_another_key_fails_verification(acme, settings):
    chain_of(acme, 3)
    real_key = audit_keys()[0].id
    settings.HIERARCH_AUDIT = {**settings.HIERARCH_AUDIT, "KEYS": [OTHER_KEY]}
    forger_key = audit_keys()[0].id

    def under_the_other_key_named_as_the_real_one(record):
        record.key_id = forger_key
        forged = record_hash(record)
        record.key_id = real_key
        return forged

    rewrite(acme, under_the_other_key_named_as_the_real_one)
    settings.HIERARCH_AUDIT = {**settings.HIERARCH_AUDIT, "KEYS": []}

    assert "seq 1: edited: its contents do not match its hash" in broken("acme")


def test_a_record_signed_with_a_key_that_is_not_configured_fails_naming_its_key(acme, settings):
    chain_of(acme, 2)
    settings.HIERARCH_AUDIT = {**settings.HIERARCH_AUDIT, "KEYS": [OTHER_KEY]}
    forger_key = audit_keys()[0].id

    def under_the_other_key(record):
        record.key_id = forger_key
        return record_hash(record)

    rewrite(acme, under_the_other_key)
    settings.HIERARCH_AUDIT = {**settings.HIERARCH_AUDIT, "KEYS": []}

    message = broken("acme")
    assert f"seq 1: signed with a key that is not configured (key id {forger_key})" in message


def test_records_signed_with_an_older_key_still_verify_after_a_new_key_is_put_first(acme, settings):
    first = "the-first-configured-audit-key-" + "a" * 16
    second = "the-second-configured-audit-key-" + "b" * 16
    settings.HIERARCH_AUDIT = {**settings.HIERARCH_AUDIT, "KEYS": [first]}
    older = chain_of(acme, 2)
    settings.HIERARCH_AUDIT = {**settings.HIERARCH_AUDIT, "KEYS": [second, first]}
    newer = audit_record(workspace=acme, action="entity.created")

    assert newer.key_id != older[0].key_id
    assert audit_verify(workspace=acme).intact
    settings.HIERARCH_AUDIT = {**settings.HIERARCH_AUDIT, "KEYS": [second]}
    assert "signed with a key that is not configured" in str(audit_verify(workspace=acme).broken)


def test_the_derived_key_of_a_previous_secret_key_still_verifies(acme, settings):
    chain_of(acme, 2)
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-new-secret-key-" + "n" * 40

    assert audit_verify(workspace=acme).intact


def plain_chain(workspace, count: int) -> None:
    """Records as written before keyed hashes: no key id, plain SHA-256."""
    previous = GENESIS
    for n in range(1, count + 1):
        record = AuditRecord(
            workspace=workspace,
            seq=n,
            created_at=timezone.now(),
            action="entity.updated",
            after={"n": n},
            prev_hash=previous,
        )
        record.hash = record_hash(record)
        record.save()
        previous = record.hash
    AuditChain.objects.create(workspace=workspace, last_seq=count, last_hash=previous)


def test_records_from_before_keyed_hashes_verify_once_their_chain_is_sealed(acme, globex):
    plain_chain(acme, 3)
    chain_of(globex, 1)

    assert audit_legacy_chains_seal() == 1

    seal = records(acme)[-1]
    assert (seal.seq, seal.action, seal.key_id) == (4, "audit.keyed", audit_keys()[0].id)
    assert seal.after == {"unsigned_records": 3}
    assert audit_verify(workspace=acme).intact
    assert audit_verify(workspace=globex).count == 1  # a signed chain is not sealed again
    assert audit_legacy_chains_seal() == 0


def test_a_sealed_chain_whose_plain_records_were_rewritten_fails_verification(acme):
    plain_chain(acme, 3)
    audit_legacy_chains_seal()
    seal = records(acme)[-1]

    rewrite(acme, plain_sha256, through=3)

    assert records(acme)[-1].hash == seal.hash
    assert "seq 4: edited or replaced: its link to seq 3 does not match" in broken("acme")


def test_an_unsigned_record_after_signed_ones_fails_verification(acme):
    chain_of(acme, 2)
    head = AuditChain.objects.get(workspace=acme)
    record = AuditRecord(
        workspace=acme,
        seq=3,
        created_at=timezone.now(),
        action="entity.deleted",
        prev_hash=head.last_hash,
    )
    record.hash = record_hash(record)
    record.save()
    AuditChain.objects.filter(workspace=acme).update(last_seq=3, last_hash=record.hash)

    assert "seq 3: unsigned: a record with a plain SHA-256 hash" in broken("acme")


# TRUNCATE


@postgresql_only("the no-truncate trigger is PostgreSQL's; SQLite has no TRUNCATE")
@pytest.mark.parametrize("table", ["governance_auditrecord", "governance_auditchain"])
def test_postgresql_refuses_to_truncate_the_audit_log(acme, table):
    chain_of(acme, 2)

    refused = pytest.raises(DatabaseError, match=f"the audit log cannot be truncated.*{table}")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        # The test process's sessions may truncate (for Django's flush): not this one.
        cursor.execute("SET LOCAL hierarch.audit_truncate = ''")
        # TRUNCATE waits for no deferred foreign-key check of the test's transaction.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"TRUNCATE {table} CASCADE")

    assert audit_verify(workspace=acme).count == 2


# Heads kept outside the database


def export_heads(slug: str | None = None) -> str:
    out = StringIO()
    call_command("export_audit_head", workspace=slug, stdout=out)
    return out.getvalue()


def verify_against(slug: str | None, *heads_files, heads=()) -> str:
    out = StringIO()
    call_command(
        "verify_audit",
        workspace=slug,
        heads_file=[str(path) for path in heads_files],
        head=list(heads),
        stdout=out,
    )
    return out.getvalue()


def wipe(workspace, from_seq: int = 1) -> None:
    """Delete the newest records from `from_seq` on behind the triggers, and move the chain
    head back to match (or delete it, when every record goes): what verifies without a kept
    head."""
    with tampering() as cursor:
        cursor.execute(
            "DELETE FROM governance_auditrecord WHERE workspace_id = %s AND seq >= %s",
            [workspace.pk, from_seq],
        )
        if from_seq == 1:
            cursor.execute(
                "DELETE FROM governance_auditchain WHERE workspace_id = %s", [workspace.pk]
            )
        else:
            last = records(workspace)[-1]
            cursor.execute(
                "UPDATE governance_auditchain SET last_seq = %s, last_hash = %s "
                "WHERE workspace_id = %s",
                [last.seq, last.hash, workspace.pk],
            )


def test_a_wiped_log_verifies_alone_but_fails_against_a_kept_head(acme, tmp_path):
    written = chain_of(acme, 3)
    kept = tmp_path / "heads.jsonl"
    kept.write_text(export_heads())

    wipe(acme)

    assert verify("acme").startswith("acme: no records")
    with pytest.raises(CommandError) as failure:
        verify_against("acme", kept)
    assert failure.value.returncode == 1
    assert str(failure.value) == (
        f"acme: the kept head seq 3 ({written[-1].hash}) is no longer in the chain: the chain "
        "now has no records (records were deleted, or the log was wiped)"
    )


def test_a_log_cut_back_fails_against_a_kept_head(acme, tmp_path):
    chain_of(acme, 5)
    kept = tmp_path / "heads.jsonl"
    kept.write_text(export_heads("acme"))

    wipe(acme, from_seq=4)

    assert "acme: intact, 3 records" in verify("acme")
    with pytest.raises(CommandError, match="kept head seq 5 .* the chain now ends at seq 3"):
        verify_against(None, kept)


def test_a_kept_bare_hash_must_still_be_in_a_chain(acme):
    written = chain_of(acme, 3)

    assert "acme: intact, 3 records" in verify_against(None, heads=[written[1].hash])
    wipe(acme, from_seq=2)
    with pytest.raises(CommandError, match=f"the kept head {written[1].hash} is in no chain"):
        verify_against(None, heads=[written[1].hash])


def test_an_exported_head_file_round_trips(acme, globex, settings, tmp_path):
    settings.HIERARCH_AUDIT = {**settings.HIERARCH_AUDIT, "HEAD_FILE": str(tmp_path / "heads")}
    chain_of(acme, 2)
    chain_of(globex, 1)

    assert audit_heads_export(moved_only=False) == 2
    newest = chain_of(acme, 1)[0]  # acme's chain moves on: seq 1 of a new run of records
    assert audit_heads_export(moved_only=False) == 2

    with (tmp_path / "heads").open() as lines:
        kept = kept_heads_read(lines, source="heads")
    assert [(head.workspace, head.seq) for head in kept] == [
        ("acme", 2),
        ("globex", 1),
        ("acme", 3),
        ("globex", 1),
    ]
    assert kept[2].hash == newest.hash
    out = verify_against(None, tmp_path / "heads")
    assert "acme: intact, 3 records" in out
    assert "4 kept heads" not in out and "2 kept heads found in it" in out


def test_the_periodic_export_logs_only_the_heads_that_moved(acme, globex, caplog):
    chain_of(acme, 1)
    chain_of(globex, 1)
    audit_heads_export()
    audit_record(workspace=acme, action="entity.created")
    caplog.clear()

    with caplog.at_level("INFO", logger="hierarch.audit"):
        assert audit_heads_export() == 1

    (line,) = [record.getMessage() for record in caplog.records]
    assert line.startswith('audit head {"workspace": "acme", "seq": 2, ')


def test_export_audit_head_refuses_to_export_a_broken_chain(acme, globex):
    chain_of(acme, 2)
    chain_of(globex, 1)
    with tampering() as cursor:
        cursor.execute(
            "UPDATE governance_auditrecord SET object_label = 'x' WHERE workspace_id = %s",
            [acme.pk],
        )

    out = StringIO()
    with pytest.raises(
        CommandError, match="acme: broken at seq 1: edited: .*; its head not exported"
    ):
        call_command("export_audit_head", stdout=out)
    assert json.loads(out.getvalue())["workspace"] == "globex"


def test_a_malformed_heads_file_is_refused_naming_its_line(acme, tmp_path):
    kept = tmp_path / "heads"
    kept.write_text("# heads\n\n" + "a" * 64 + "\nnot a hash\n")

    with pytest.raises(CommandError, match=r"heads, line 4: not a kept head"):
        verify_against(None, kept)


# The admin


@pytest.fixture
def logged(acme, globex, alice, charlie):
    EntityFactory(workspace=acme, name="acme_writer", user=alice)
    EntityFactory(workspace=globex, name="globex_writer", user=charlie)


def test_the_admin_lists_only_the_users_workspaces_records(client, alice, logged):
    client.force_login(alice)

    response = client.get(reverse("admin:governance_auditrecord_changelist"))

    assert response.status_code == 200
    labels = {record.object_label for record in response.context["cl"].result_list}
    assert "acme_writer" in labels
    assert "globex_writer" not in labels
    assert b"globex_writer" not in response.content


def test_the_admin_filters_records_by_action(client, alice, logged):
    client.force_login(alice)

    response = client.get(
        reverse("admin:governance_auditrecord_changelist"), {"action": "entity.created"}
    )

    assert {r.action for r in response.context["cl"].result_list} == {"entity.created"}


def test_the_admin_shows_a_record_read_only(client, alice, acme, logged):
    client.force_login(alice)
    record = records(acme, "entity.created")[0]
    url = reverse("admin:governance_auditrecord_change", args=[record.pk])

    page = client.get(url)
    posted = client.post(url, {"object_label": "forged"})

    assert page.status_code == 200
    assert b"acme_writer" in page.content
    assert b'name="object_label"' not in page.content
    assert posted.status_code == 403
    assert AuditRecord.objects.get(pk=record.pk).object_label == "acme_writer"
    assert client.get(reverse("admin:governance_auditrecord_add")).status_code == 403
    delete_url = reverse("admin:governance_auditrecord_delete", args=[record.pk])
    assert client.post(delete_url, {"post": "yes"}).status_code == 403


def test_another_workspaces_record_is_not_found_in_the_admin(client, charlie, acme, logged):
    client.force_login(charlie)
    record = records(acme)[0]

    response = client.get(
        reverse("admin:governance_auditrecord_change", args=[record.pk]), follow=True
    )

    assert b"acme_writer" not in response.content


# Concurrent writers


WRITERS = 8
EACH = 25


def _in_thread(function):
    def call(*args):
        try:
            return function(*args)
        finally:
            connection.close()

    return call


@pytest.mark.django_db(transaction=True)
@postgresql_only(
    "SQLite lets one writer in at a time, so there is no race to test; "
    "it runs on PostgreSQL (DATABASE_URL)"
)
def test_concurrent_writers_in_one_workspace_keep_one_chain():
    # A fresh workspace: the writers also race to create its chain head.
    workspace = WorkspaceFactory(slug="busy")
    start = threading.Barrier(WRITERS)

    @_in_thread
    def writer(number: int) -> list[int]:
        start.wait()
        written = []
        for n in range(EACH):
            # Each in its own transaction that does some other work after appending, so
            # the chain head stays locked while others wait.
            with transaction.atomic():
                record = audit_record(
                    workspace=workspace.pk, action="entity.updated", after={"w": number, "n": n}
                )
                AuditChain.objects.filter(workspace=workspace).exists()
            written.append(record.seq)
        return written

    with ThreadPoolExecutor(WRITERS) as pool:
        results = list(pool.map(writer, range(WRITERS)))

    seqs = sorted(seq for written in results for seq in written)
    assert seqs == list(range(1, WRITERS * EACH + 1))
    result = audit_verify(workspace=workspace)
    assert result.intact, result.broken
    assert result.count == WRITERS * EACH
