"""The tamper-evident audit log: one keyed hash chain per workspace.

`audit_record` is the one way to write. Each record's `hash` is an HMAC-SHA256, under a key
that is not in the database, of a canonical JSON of its fields plus `prev_hash`, the hash of
the workspace's previous record, so editing, deleting or reordering a record breaks the chain
where `audit_verify` (and `manage.py verify_audit`) finds it, and someone who can write SQL but
does not hold the key cannot recompute the hashes of a forged chain. Appending locks the
workspace's chain head (`AuditChain`), so concurrent writers in several processes still form
one chain. On PostgreSQL triggers refuse UPDATE and DELETE of audit rows (migration 0002) and
TRUNCATE of the records and the chain heads (migration 0007).

The key: `HIERARCH_AUDIT_KEYS` (newest first; the newest signs, every one verifies), else one
derived from SECRET_KEY (HKDF, info "hierarch audit log"), as the credential vault derives its
own. Each record names the key that signed it (`key_id`, a fingerprint of the key, never the
key), so adding a new key in front keeps every older record verifiable as long as its key
stays in the list (or in SECRET_KEY_FALLBACKS, for derived keys).

Records written before the chain was keyed carry no `key_id` and a plain SHA-256 hash. They
still verify, but only as the start of a chain that a signed record follows: migration 0008
appended an `audit.keyed` record to every chain that had any, which signs the hash of the
last plain one. A chain rewritten with recomputed plain hashes, or cut back to its plain part,
no longer verifies.

What the key cannot catch is a log cut back (or wiped) to an earlier, genuine state: the chain
head lives in the same database. For that, operators keep heads outside it
(`audit_heads_export`: the log, and a file when HIERARCH_AUDIT["HEAD_FILE"] is set, every
HIERARCH_AUDIT["EXPORT_SECONDS"]; `manage.py export_audit_head`), and `verify_audit
--heads-file` fails when a head kept earlier is no longer in the chain.

Records never hold a secret's value: vault changes are recorded by name and kind only.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from governance.models import AuditAction, AuditChain, AuditRecord

logger = logging.getLogger("hierarch.audit")

# The `prev_hash` of a workspace's first record.
GENESIS = "0" * 64
_DERIVATION_INFO = b"hierarch audit log"
# A configured key shorter than this is refused: HMAC-SHA256 wants 32 bytes of entropy.
MIN_KEY_CHARS = 32


@dataclass(frozen=True)
class AuditKey:
    """A key that signs or verifies records; `id` is its fingerprint, stored on each record."""

    id: str
    secret: bytes = b""

    def __repr__(self) -> str:
        return f"AuditKey({self.id!r})"


def _key(secret: bytes) -> AuditKey:
    fingerprint = hmac.new(secret, b"hierarch audit key id", hashlib.sha256).hexdigest()
    return AuditKey(id=fingerprint[:16], secret=secret)


def derived_audit_key(secret_key: str) -> bytes:
    """The audit key derived from a Django SECRET_KEY (distinct from the vault's)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_DERIVATION_INFO)
    return hkdf.derive(secret_key.encode())


@functools.lru_cache(maxsize=8)
def _keys_for(configured: tuple[str, ...], secret_keys: tuple[str, ...]) -> tuple[AuditKey, ...]:
    keys = []
    for position, key in enumerate(configured, start=1):
        if len(key) < MIN_KEY_CHARS:
            raise ImproperlyConfigured(
                f"HIERARCH_AUDIT_KEYS: key {position} is shorter than {MIN_KEY_CHARS} characters"
            )
        keys.append(_key(key.encode()))
    keys += [_key(derived_audit_key(secret_key)) for secret_key in secret_keys if secret_key]
    return tuple(keys)


def audit_keys() -> tuple[AuditKey, ...]:
    """Every key that verifies, the signing one first: HIERARCH_AUDIT_KEYS in order, then the
    keys derived from SECRET_KEY and SECRET_KEY_FALLBACKS."""
    return _keys_for(
        tuple(settings.HIERARCH_AUDIT["KEYS"]),
        (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])),
    )


def _key_by_id(key_id: str) -> AuditKey | None:
    return next((key for key in audit_keys() if key.id == key_id), None)


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
            key_id=audit_keys()[0].id,
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


class UnknownAuditKey(LookupError):
    """A record names a key that is not configured (removed from the settings, or forged)."""


def record_hash(record: Any) -> str:
    """The hash a record must carry: over every field but its id and its own hash; the HMAC
    under the key the record names, or, for a record from before keys, plain SHA-256."""
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
    if not record.key_id:
        return hashlib.sha256(canonical_json(fields)).hexdigest()
    key = _key_by_id(record.key_id)
    if key is None:
        raise UnknownAuditKey(record.key_id)
    fields["key_id"] = record.key_id
    return hmac.new(key.secret, canonical_json(fields), hashlib.sha256).hexdigest()


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
    last_seq: int = 0

    @property
    def intact(self) -> bool:
        return self.broken is None


def audit_verify(*, workspace: Any) -> Verification:
    """Recompute the workspace's chain and report the first broken link, if any.

    Reads the records in sequence order, a chunk at a time, and checks for each one: no
    sequence number skipped (deleted), its `prev_hash` is the hash of the record before it
    (else reordered, or the one before was edited or replaced), its own hash matches its
    contents under the key it names (else edited or forged), and a record without a key only
    before the signed ones. Finally the newest record must be the one the chain head names
    (else the newest records were deleted or rewritten), and signed (else the chain was cut
    back to, or forged as, records with plain hashes)."""
    workspace_id = getattr(workspace, "pk", workspace)
    records = AuditRecord.objects.filter(workspace_id=workspace_id).order_by("seq")
    expected_seq, previous_hash, count, signed = 1, GENESIS, 0, False
    for record in records.iterator(chunk_size=2000):
        broken = _check(record, expected_seq, previous_hash, workspace_id, signed)
        if broken is not None:
            return Verification(
                count=count, last_hash=previous_hash, broken=broken, last_seq=expected_seq - 1
            )
        expected_seq, previous_hash, count = record.seq + 1, record.hash, count + 1
        signed = signed or bool(record.key_id)
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
    elif count and not signed:
        broken = BrokenLink(
            newest,
            "unsigned: the chain ends in a record with a plain SHA-256 hash and no key; a "
            "chain from before keyed hashes ends in a signed audit.keyed record, so the "
            "signed records were removed, or the chain was forged without the key",
        )
    else:
        broken = None
    return Verification(count=count, last_hash=previous_hash, broken=broken, last_seq=newest)


def _check(
    record: AuditRecord, expected_seq: int, previous_hash: str, workspace_id: int, signed: bool
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
    if signed and not record.key_id:
        return BrokenLink(
            record.seq,
            "unsigned: a record with a plain SHA-256 hash and no key after signed ones "
            "(written outside audit_record, without the key)",
        )
    try:
        expected = record_hash(record)
    except UnknownAuditKey:
        return BrokenLink(
            record.seq,
            f"signed with a key that is not configured (key id {record.key_id}): forged, or "
            "its key was removed from HIERARCH_AUDIT_KEYS (or SECRET_KEY_FALLBACKS)",
        )
    if not hmac.compare_digest(expected, record.hash):
        return BrokenLink(record.seq, "edited: its contents do not match its hash")
    return None


def audit_legacy_chains_seal(
    *, record_model: Any = AuditRecord, chain_model: Any = AuditChain
) -> int:
    """Append a signed `audit.keyed` record to every chain whose newest record has a plain
    SHA-256 hash (written before keyed hashes), so its plain part keeps verifying while a
    rewrite of it does not: the signed record's HMAC covers the last plain hash. Returns how
    many chains it sealed. Migration 0008 runs it with its historical models."""
    sealed = 0
    key = audit_keys()[0]
    for head in chain_model.objects.select_for_update().filter(last_seq__gt=0).order_by("pk"):
        newest = record_model.objects.filter(workspace_id=head.pk, seq=head.last_seq).first()
        if newest is None or newest.key_id:
            continue  # already signed, or broken: verify_audit will say so
        record = record_model(
            workspace_id=head.pk,
            seq=head.last_seq + 1,
            created_at=timezone.now(),
            actor_name="",
            action=AuditAction.AUDIT_KEYED,
            object_type="audit_chain",
            object_id=str(head.pk),
            object_label="",
            before=None,
            after={"unsigned_records": head.last_seq},
            prev_hash=head.last_hash,
            key_id=key.id,
        )
        record.hash = record_hash(record)
        record.save()
        head.last_seq, head.last_hash = record.seq, record.hash
        head.save(update_fields=["last_seq", "last_hash"])
        sealed += 1
    return sealed


# Heads kept outside the database


@dataclass(frozen=True)
class KeptHead:
    """A chain head an operator kept: its hash, and the workspace and seq when known."""

    hash: str
    workspace: str = ""
    seq: int | None = None

    def __str__(self) -> str:
        where = f"{self.workspace} seq {self.seq} " if self.workspace else ""
        return f"{where}({self.hash})"


def kept_heads_read(lines: Iterable[str], *, source: str) -> list[KeptHead]:
    """Heads from a file `audit_heads_export` or `export_audit_head` wrote: JSON lines with
    `workspace`, `seq` and `hash`, or bare hashes; blank lines and `#` comments are skipped."""
    heads = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            heads.append(_kept_head(json.loads(line) if line.startswith("{") else line))
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"{source}, line {number}: not a kept head ({exc})") from None
    return heads


def _kept_head(value: Any) -> KeptHead:
    if isinstance(value, str):
        head = KeptHead(hash=value.lower())
    else:
        seq = value.get("seq")
        if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool) or seq < 1):
            raise ValueError(f"seq {seq!r} is not a sequence number")
        head = KeptHead(hash=str(value["hash"]).lower(), workspace=str(value["workspace"]), seq=seq)
    if len(head.hash) != 64 or any(char not in "0123456789abcdef" for char in head.hash):
        raise ValueError(f"{head.hash!r} is not a 64-character hex hash")
    return head


def kept_head_problem(head: KeptHead, *, workspace_id: int | None = None) -> str | None:
    """Why a kept head is no longer in its chain, or None when it is. A head that names its
    workspace and seq must be the record at that seq; a bare hash, some record's (of
    `workspace_id` when given)."""
    records = AuditRecord.objects.all()
    if workspace_id is not None:
        records = records.filter(workspace_id=workspace_id)
    if head.seq is None:
        if records.filter(hash=head.hash).exists():
            return None
        return f"the kept head {head.hash} is in no chain: the records up to it are gone"
    at_seq = records.filter(seq=head.seq).values_list("hash", flat=True).first()
    if at_seq is None:
        newest = records.order_by("-seq").values_list("seq", flat=True).first()
        now = f"now ends at seq {newest}" if newest else "now has no records"
        return (
            f"the kept head seq {head.seq} ({head.hash}) is no longer in the chain: the chain "
            f"{now} (records were deleted, or the log was wiped)"
        )
    if not hmac.compare_digest(at_seq, head.hash):
        return (
            f"the kept head seq {head.seq} ({head.hash}) is no longer in the chain: the record "
            f"at seq {head.seq} now has hash {at_seq} (the chain was rewritten)"
        )
    return None


def kept_head_line(*, workspace: str, seq: int, hash: str) -> str:
    """One head as the JSON line the export writes and `verify_audit --heads-file` reads."""
    moment = timezone.now().astimezone(UTC).isoformat(timespec="seconds")
    return json.dumps({"workspace": workspace, "seq": seq, "hash": hash, "exported_at": moment})


_exported: dict[str, tuple[int, str]] = {}


def audit_heads_export(*, moved_only: bool = True) -> int:
    """Write every workspace's chain head (its slug, last seq and hash) as a JSON line to the
    log (logger `hierarch.audit`, INFO) and, when HIERARCH_AUDIT["HEAD_FILE"] is set, append
    it to that file, for an operator to keep where the database's users cannot reach.
    `moved_only`: only the heads that moved since this process last exported them (the
    periodic export). Returns how many heads it wrote."""
    rows = (
        AuditChain.objects.filter(last_seq__gt=0)
        .order_by("workspace__slug")
        .values_list("workspace__slug", "last_seq", "last_hash")
    )
    lines = []
    for slug, seq, last_hash in rows:
        if moved_only and _exported.get(slug) == (seq, last_hash):
            continue
        _exported[slug] = (seq, last_hash)
        lines.append(kept_head_line(workspace=slug, seq=seq, hash=last_hash))
    for line in lines:
        logger.info("audit head %s", line)
    path = settings.HIERARCH_AUDIT["HEAD_FILE"]
    if lines and path:
        kept_heads_append(Path(path), lines)
    return len(lines)


def kept_heads_append(path: Path, lines: list[str]) -> None:
    """Append head lines to a file (never rewriting it), synced to disk."""
    with path.open("a", encoding="utf-8") as kept:
        kept.write("".join(f"{line}\n" for line in lines))
        kept.flush()
        os.fsync(kept.fileno())
