"""The tamper-evident audit log: one hash chain per workspace.

`audit_record` is the one way to write. Each record's `hash` is the SHA-256 of a canonical
JSON of its fields plus `prev_hash`, the hash of the workspace's previous record, so editing,
deleting or reordering a record breaks the chain where `audit_verify` (and
`manage.py verify_audit`) finds it. Appending locks the workspace's chain head
(`AuditChain`), so concurrent writers in several processes still form one chain. On PostgreSQL
a trigger (migration 0002) refuses UPDATE and DELETE of audit rows outright.

Records never hold a secret's value: vault changes are recorded by name and kind only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from governance.models import AuditAction, AuditChain, AuditRecord

# The `prev_hash` of a workspace's first record.
GENESIS = "0" * 64


def audit_record(
    *,
    workspace: Any,
    action: str,
    actor: Any = None,
    target: Any = None,
    object_type: str = "",
    object_id: Any = "",
    object_label: str = "",
    before: Any = None,
    after: Any = None,
) -> AuditRecord:
    """Append a record to the workspace's chain; call it inside the transaction of the change.

    `workspace` is a Workspace or its id; `actor` the user who acted (None, or an anonymous
    user: the system). `target`, a model instance, fills the object type, id and label that
    are not given. `before` and `after` are JSON (dates, UUIDs and decimals become strings)."""
    if action not in AuditAction.values:
        raise ValueError(
            f"{action!r} is not an audit action; use one of {', '.join(AuditAction.values)}"
        )
    workspace_id = getattr(workspace, "pk", workspace)
    if not isinstance(workspace_id, int):
        raise ValueError(f"audit_record needs a workspace or its id, not {workspace!r}")
    if target is not None:
        object_type = object_type or target._meta.model_name
        object_id = object_id or target.pk
        object_label = object_label or str(target)
    actor = actor if getattr(actor, "is_authenticated", False) else None
    with transaction.atomic():
        head = _lock_head(workspace_id)
        record = AuditRecord(
            workspace_id=workspace_id,
            seq=head.last_seq + 1,
            created_at=timezone.now(),
            actor=actor,
            actor_name=actor.get_username()[:150] if actor is not None else "",
            action=action,
            object_type=str(object_type)[:50],
            object_id=str(object_id)[:100],
            object_label=str(object_label)[:200],
            before=_as_json(before),
            after=_as_json(after),
            prev_hash=head.last_hash or GENESIS,
        )
        record.hash = record_hash(record)
        record.save()
        head.last_seq, head.last_hash = record.seq, record.hash
        head.save(update_fields=["last_seq", "last_hash"])
    return record


def _lock_head(workspace_id: int) -> AuditChain:
    """The workspace's chain head, locked until the transaction ends (created when missing;
    two first writers racing both end up locking the one row)."""
    chain = AuditChain.objects.select_for_update()
    head = chain.filter(workspace_id=workspace_id).first()
    if head is None:
        AuditChain.objects.bulk_create(
            [AuditChain(workspace_id=workspace_id)], ignore_conflicts=True
        )
        head = chain.get(workspace_id=workspace_id)
    return head


def _as_json(value: Any) -> Any:
    """The value as the JSON column will give it back, so the hash reads the same later."""
    if value is None:
        return None
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def _numbers_by_value(value: Any) -> Any:
    # PostgreSQL's jsonb keeps numbers as numerics: a float such as 1e16 comes back as the
    # integer 10000000000000000. Hashing every whole number as an integer reads it the same
    # before and after the round trip.
    if isinstance(value, dict):
        return {key: _numbers_by_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers_by_value(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def canonical_json(value: Any) -> bytes:
    """The one serialisation every hash here is taken over: sorted keys, no spaces, UTF-8."""
    return json.dumps(
        _numbers_by_value(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()


def digest(value: Any) -> str:
    """SHA-256 of a JSON value's canonical form (records pin entity versions with it)."""
    return hashlib.sha256(canonical_json(_as_json(value))).hexdigest()


def record_hash(record: AuditRecord) -> str:
    """The hash a record must carry: over every field but its id and its own hash."""
    moment = record.created_at.astimezone(UTC).isoformat(timespec="microseconds")
    fields = {
        "workspace": record.workspace_id,
        "seq": record.seq,
        "created_at": moment,
        "actor_id": record.actor_id,
        "actor_name": record.actor_name,
        "action": record.action,
        "object_type": record.object_type,
        "object_id": record.object_id,
        "object_label": record.object_label,
        "before": record.before,
        "after": record.after,
        "prev_hash": record.prev_hash,
    }
    return hashlib.sha256(canonical_json(fields)).hexdigest()


@dataclass(frozen=True)
class BrokenLink:
    """Where a chain stops being intact: the record's sequence number and why."""

    seq: int
    reason: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.reason}"


@dataclass(frozen=True)
class Verification:
    count: int
    last_hash: str
    broken: BrokenLink | None

    @property
    def intact(self) -> bool:
        return self.broken is None


def audit_verify(*, workspace: Any) -> Verification:
    """Recompute the workspace's chain and report the first broken link, if any.

    Reads the records in sequence order, a chunk at a time, and checks for each one: no
    sequence number skipped (deleted), its `prev_hash` is the hash of the record before it
    (else reordered, or the one before was edited or replaced), its own hash matches its
    contents (else edited). Finally the newest record must be the one the chain head names
    (else the newest records were deleted or rewritten)."""
    workspace_id = getattr(workspace, "pk", workspace)
    records = AuditRecord.objects.filter(workspace_id=workspace_id).order_by("seq")
    expected_seq, previous_hash, count = 1, GENESIS, 0
    for record in records.iterator(chunk_size=2000):
        broken = _check(record, expected_seq, previous_hash, workspace_id)
        if broken is not None:
            return Verification(count=count, last_hash=previous_hash, broken=broken)
        expected_seq, previous_hash, count = record.seq + 1, record.hash, count + 1
    head = AuditChain.objects.filter(workspace_id=workspace_id).first()
    last_seq, last_hash = (head.last_seq, head.last_hash) if head else (0, "")
    newest = expected_seq - 1
    if last_seq > newest:
        span = f"{newest + 1}" if last_seq == newest + 1 else f"{newest + 1} to {last_seq}"
        broken = BrokenLink(
            newest + 1,
            f"deleted: the newest records (seq {span}) are missing; the chain head says the "
            f"last record is seq {last_seq}",
        )
    elif last_seq < newest:
        broken = BrokenLink(
            last_seq + 1,
            f"added outside audit_record: the chain head says the last record is seq {last_seq}",
        )
    elif count and last_hash != previous_hash:
        broken = BrokenLink(
            newest,
            "edited or replaced: its hash is not the one the chain head recorded for it",
        )
    else:
        broken = None
    return Verification(count=count, last_hash=previous_hash, broken=broken)


def _check(
    record: AuditRecord, expected_seq: int, previous_hash: str, workspace_id: int
) -> BrokenLink | None:
    if record.seq != expected_seq:
        missing = (
            f"seq {expected_seq}"
            if record.seq == expected_seq + 1
            else f"seq {expected_seq} to {record.seq - 1}"
        )
        return BrokenLink(
            expected_seq, f"deleted: {missing} missing (a gap before seq {record.seq})"
        )
    if record.prev_hash != previous_hash:
        linked = (
            AuditRecord.objects.filter(workspace_id=workspace_id, hash=record.prev_hash)
            .exclude(pk=record.pk)
            .values_list("seq", flat=True)
            .first()
        )
        if linked is not None:
            return BrokenLink(
                record.seq,
                f"reordered: it follows the record now at seq {linked}, not seq {record.seq - 1}",
            )
        before = "the start of the chain" if record.seq == 1 else f"seq {record.seq - 1}"
        return BrokenLink(
            record.seq,
            f"edited or replaced: its link to {before} does not match "
            f"({before} was changed, or this record was)",
        )
    if record_hash(record) != record.hash:
        return BrokenLink(record.seq, "edited: its contents do not match its hash")
    return None
