"""The engine's RunStore on the ORM: leases, step records, events and counters.

Each method is one short transaction. The database is the truth: a broker message or a
thread-pool task is only a hint to look, so `load` answers None for a run that is finished,
waiting on a due time, or leased by someone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from entities.models import Entity, EntityVersion
from runs.engine.core import ChildOutcome, ChildRequest, Events, LeaseLost, RunView, StepRecord
from runs.engine.ports import ModelReply, ModelRequest, ToolInvocation, ToolResult
from runs.models import (
    TERMINAL,
    Artifact,
    LLMCall,
    MemoryItem,
    Run,
    RunEvent,
    RunStatus,
    StepRun,
    ToolCall,
    TraceSequence,
)

_DEFINITIONS: OrderedDict[tuple[int, str], dict] = OrderedDict()
_DEFINITIONS_LOCK = threading.Lock()


def pinned_definition(version_id: int, entity_id: Any) -> dict:
    """A version's snapshot; versions never change, so each process reads one once. The key
    includes the entity's UUID: a version id alone can come back after a delete (SQLite)."""
    key = (version_id, str(entity_id))
    with _DEFINITIONS_LOCK:
        found = _DEFINITIONS.get(key)
        if found is not None:
            _DEFINITIONS.move_to_end(key)
            return found
    definition = EntityVersion.objects.values_list("definition", flat=True).get(pk=version_id)
    with _DEFINITIONS_LOCK:
        _DEFINITIONS[key] = definition
        while len(_DEFINITIONS) > 2048:
            _DEFINITIONS.popitem(last=False)
    return definition


def lease_seconds() -> int:
    return settings.HIERARCH_ENGINE["LEASE_SECONDS"]


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{uuid.uuid4().hex[:8]}"


def latest_version(entity: Entity) -> EntityVersion:
    return entity.versions.order_by("-created_at", "-id").first()


class OrmRunStore:
    def __init__(self, owner: str | None = None):
        self.owner = owner or new_owner()

    # -- lease ---------------------------------------------------------------------------------

    def load(self, run_id: str) -> RunView | None:
        self.__dict__.pop("_children", None)  # child resolutions hold for one advance only
        now = timezone.now()
        with transaction.atomic():
            row = (
                Run.objects.select_for_update()
                .select_related("entity")
                .filter(pk=run_id)
                .only(*_VIEW_FIELDS)
                .first()
            )
            if row is None or row.status in TERMINAL:
                return None
            if row.status in _ASLEEP and not row.cancel_requested:
                return None  # a paused or blocked run moves only on a decision or a cancel
            leased = row.lease_expires_at is not None and row.lease_expires_at > now
            if leased and row.lease_owner != self.owner:
                return None
            if row.wake_at is not None and row.wake_at > now:
                return None
            Run.objects.filter(pk=row.pk).update(
                lease_owner=self.owner,
                lease_expires_at=now + timedelta(seconds=lease_seconds()),
                wake_at=None,
            )
        view = RunView(
            id=str(row.pk),
            trace_id=str(row.trace_id),
            workspace_id=row.workspace_id,
            definition=pinned_definition(row.entity_version_id, row.entity_id),
            status=row.status,
            input=row.input_data,
            state=row.state,
            plan=row.dynamic_plan,
            cursor=row.cursor,
            iteration=row.iteration,
            attempt=row.attempt,
            depth=row.depth,
            depth_limit=row.depth_limit,
            parent_id=str(row.parent_id) if row.parent_id else None,
            entity_status=row.entity.status,
            output=row.output_data,
            error_code=row.error_code,
            error_message=row.error_message,
            cancel_requested=row.cancel_requested,
            lineage=list(row.lineage),
            parent_step_key=row.parent_step_key,
            spawn_group=row.spawn_group,
            began_at=row.started_at or row.created_at,
            started=row.started_at is not None,
            # A lease left behind means the last worker died mid-advance: look for calls it
            # recorded before paying for them again.
            resumed=bool(row.lease_owner),
            created_by_id=row.created_by_id,
            entity_id=str(row.entity_id),
        )
        _Heartbeat.start(view, self.owner)
        return view

    def cancel_requested(self, run: RunView) -> bool:
        if not run.cancel_requested:
            run.cancel_requested = Run.objects.filter(pk=run.id, cancel_requested=True).exists()
        return run.cancel_requested

    def release(self, run: RunView) -> None:
        _Heartbeat.stop(run)
        if run.status in TERMINAL or run.released:
            return  # finish, spawn or schedule already let go of the lease
        Run.objects.filter(pk=run.id, lease_owner=self.owner).update(
            lease_owner="", lease_expires_at=None
        )

    # -- progress -----------------------------------------------------------------------------

    def _write_run(self, run: RunView, **extra: Any) -> None:
        now = timezone.now()
        fields = {
            "status": run.status,
            "state": run.state,
            "dynamic_plan": run.plan,
            "cursor": run.cursor,
            "iteration": run.iteration,
            "attempt": run.attempt,
            "output_data": run.output,
            "error_code": run.error_code,
            "error_message": run.error_message[:10_000],
            "lease_expires_at": now + timedelta(seconds=lease_seconds()),
            **extra,
        }
        if run.status != RunStatus.PENDING and not run.started:
            fields["started_at"] = run.began_at or now
            run.started, run.began_at = True, run.began_at or now
        # Fenced: only the lease holder writes; a worker that lost the lease stops here.
        if not Run.objects.filter(pk=run.id, lease_owner=self.owner).update(**fields):
            raise LeaseLost(f"run {run.id} is held by another worker")

    def _touch(self, run: RunView) -> None:
        """Renew the lease, or learn that it is lost."""
        renewed = Run.objects.filter(pk=run.id, lease_owner=self.owner).update(
            lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds())
        )
        if not renewed:
            raise LeaseLost(f"run {run.id} is held by another worker")

    def _write_steps(self, run: RunView, steps: list[StepRecord]) -> None:
        """Insert or update the step records in one statement."""
        if not steps:
            return
        now = timezone.now()
        rows = [
            StepRun(
                run_id=run.id,
                step_key=step.key,
                iteration=step.iteration,
                attempt=step.attempt,
                position=step.position,
                name=step.name[:200],
                type=step.type,
                status=step.status,
                input=step.input,
                output=step.output,
                error_code=step.error_code,
                error_message=step.error_message[:10_000],
                started_at=step.started_at or now,
                finished_at=now if step.status in _STEP_DONE else None,
            )
            for step in steps
        ]
        StepRun.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["run", "step_key", "iteration", "attempt"],
            update_fields=[
                "position",
                "name",
                "type",
                "status",
                "input",
                "output",
                "error_code",
                "error_message",
                "finished_at",
            ],
        )

    @staticmethod
    def _take_pending(
        run: RunView, steps: list[StepRecord], events: list[tuple[str, dict]]
    ) -> tuple[list[StepRecord], list[tuple[str, dict]]]:
        """The records the engine buffered for this write, then the new ones."""
        merged_steps = {(s.key, s.iteration, s.attempt): s for s in [*run.pending_steps, *steps]}
        merged_events = [*run.pending_events.items, *events]
        run.pending_steps.clear()
        run.pending_events.items.clear()
        return list(merged_steps.values()), merged_events

    def save(self, run: RunView, *, steps: list[StepRecord], events: Events) -> None:
        steps, items = self._take_pending(run, steps, events.items)
        with transaction.atomic():
            # The trace's sequence row first, the runs' rows after: one lock order.
            append_events(run.trace_id, run.id, items)
            self._write_run(run)
            self._write_steps(run, steps)

    def schedule(
        self, run: RunView, delay_s: float, *, steps: list[StepRecord], events: Events
    ) -> None:
        steps, items = self._take_pending(run, steps, events.items)
        with transaction.atomic():
            # The trace's sequence row first, the runs' rows after: one lock order.
            append_events(run.trace_id, run.id, items)
            self._write_run(
                run,
                wake_at=timezone.now() + timedelta(seconds=delay_s),
                lease_owner="",
                lease_expires_at=None,
            )
            run.released = True
            self._write_steps(run, steps)

    def spawn(
        self, run: RunView, *, children: list[ChildRequest], steps: list[StepRecord], events: Events
    ) -> list[str]:
        self._resolve_many(run.workspace_id, [request.entity_ref for request in children])
        group = f"{children[0].step_key}#{run.iteration}#{run.attempt}"
        rows = []
        for request in children:
            entity, version = self._resolved(run.workspace_id, request.entity_ref)
            rows.append(
                Run(
                    workspace_id=run.workspace_id,
                    entity=entity,
                    entity_version=version,
                    parent_id=run.id,
                    root_id=run.trace_id,
                    trace_id=run.trace_id,
                    parent_step_key=f"{request.step_key}#{run.iteration}",
                    group_index=request.group_index,
                    spawn_group=group,
                    depth=run.depth + 1,
                    depth_limit=run.depth_limit,
                    lineage=[*run.lineage, run.id],
                    input_data=request.input,
                    created_by_id=run.created_by_id,
                )
            )
            events.add(
                "run.created",
                run_id=str(rows[-1].pk),
                parent_id=run.id,
                entity=entity.name,
                type=entity.type,
            )
        steps, items = self._take_pending(run, steps, events.items)
        with transaction.atomic():
            # The trace's sequence row first, the runs' rows after: one lock order.
            append_events(run.trace_id, run.id, items)
            # Under the run's row lock: a cancel that came first reaches the new children;
            # one that comes later finds them (run_cancel locks this row before it looks).
            cancelled = (
                Run.objects.select_for_update()
                .values_list("cancel_requested", flat=True)
                .get(pk=run.id)
            )
            for row in rows:
                row.cancel_requested = cancelled
            Run.objects.bulk_create(rows)
            # The run waits now: let go of the lease in the same write.
            self._write_run(run, lease_owner="", lease_expires_at=None)
            run.released = True
            self._write_steps(run, steps)
        return [str(row.pk) for row in rows]

    def children(self, run: RunView, step_keys: list[str]) -> list[ChildOutcome] | None:
        keys = [f"{key}#{run.iteration}" for key in step_keys]
        rows = list(
            Run.objects.filter(parent_id=run.id, parent_step_key__in=keys)
            .select_related("entity")
            .only(
                "status",
                "output_data",
                "error_code",
                "error_message",
                "parent_step_key",
                "group_index",
                "entity__name",
            )
            .order_by("group_index")
        )
        if any(row.status not in TERMINAL for row in rows):
            return None
        return [
            ChildOutcome(
                run_id=str(row.pk),
                step_key=row.parent_step_key.rsplit("#", 1)[0],
                status=row.status,
                output=row.output_data,
                error_code=row.error_code,
                error_message=row.error_message,
                entity_name=row.entity.name,
            )
            for row in rows
        ]

    def finish(self, run: RunView, *, steps: list[StepRecord], events: Events) -> str | None:
        now = timezone.now()
        steps, items = self._take_pending(run, steps, events.items)
        with transaction.atomic():
            # The trace's sequence row first, the runs' rows after: one lock order.
            append_events(run.trace_id, run.id, items)
            self._write_run(
                run,
                completed_at=now,
                execution_time_ms=int((now - run.began_at).total_seconds() * 1000),
                lease_owner="",
                lease_expires_at=None,
            )
            self._write_steps(run, steps)
            if run.parent_id is None:
                # SESSION memory lives as long as the trace (seed 000 §3.6.2).
                MemoryItem.objects.filter(session=run.trace_id, scope="SESSION").delete()
                return None
            # Lock the parent so siblings finishing at the same moment take turns; the last
            # one sees every sibling finished and wakes the parent.
            parent = Run.objects.select_for_update().only("status").get(pk=run.parent_id)
            if parent.status != RunStatus.WAITING:
                return None
            unfinished = (
                Run.objects.filter(parent_id=run.parent_id, spawn_group=run.spawn_group)
                .exclude(status__in=TERMINAL)
                .exists()
            )
            return None if unfinished else run.parent_id

    # -- calls ----------------------------------------------------------------------------------

    def recorded_reply(self, run: RunView, call_key: str) -> ModelReply | None:
        if not run.resumed:
            return None
        row = LLMCall.objects.filter(call_key=call_key).first()
        if row is None:
            return None
        meta = row.metadata or {}
        return ModelReply(
            content=row.output_response,
            prompt_tokens=row.prompt_tokens,
            completion_tokens=row.completion_tokens,
            cost_usd=row.cost_usd,
            latency_ms=row.latency_ms,
            provider=row.model_provider,
            model=row.model_name,
            parsed=meta.get("parsed"),
            tool_name=meta.get("tool_name"),
            tool_arguments=meta.get("tool_arguments"),
        )

    def record_model_call(
        self,
        run: RunView,
        step: StepRecord,
        call_key: str,
        request: ModelRequest,
        reply: ModelReply,
    ) -> None:
        prompt = "\n\n".join(f"[{m['role']}] {m.get('content') or ''}" for m in request.messages)
        tokens = reply.prompt_tokens + reply.completion_tokens
        event = {
            "step": step.name,
            "model": reply.model,
            "tokens": tokens,
            "cost_usd": str(reply.cost_usd),
            "latency_ms": reply.latency_ms,
        }
        steps, items = self._take_pending(run, [], [("llm.call", event)])
        try:
            self._record_call(run, step, call_key, request, reply, prompt, tokens, steps, items)
        except IntegrityError:
            # The same call was recorded by a worker that took the run over: this one is late.
            raise LeaseLost(f"run {run.id}: another worker recorded {call_key}") from None

    def _record_call(
        self,
        run: RunView,
        step: StepRecord,
        call_key: str,
        request: ModelRequest,
        reply: ModelReply,
        prompt: str,
        tokens: int,
        steps: list[StepRecord],
        items: list[tuple[str, dict]],
    ) -> None:
        with transaction.atomic():
            # The trace's sequence row first, the runs' rows after: one lock order.
            append_events(run.trace_id, run.id, items)
            if steps or len(items) > 1:  # the engine buffered changes of the run too
                self._write_run(run)
                self._write_steps(run, steps)
            # No lease check otherwise: the call's unique key stops a late worker here.
            LLMCall.objects.create(
                run_id=run.id,
                call_key=call_key,
                purpose=request.purpose,
                model_provider=reply.provider[:50],
                model_name=reply.model[:100],
                input_prompt=prompt,
                output_response=reply.content,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                total_tokens=tokens,
                cost_usd=reply.cost_usd,
                latency_ms=reply.latency_ms,
                temperature=request.temperature,
                reasoning_mode=request.reasoning_mode,
                metadata={
                    "step": step.key,
                    "iteration": step.iteration,
                    "attempt": step.attempt,
                    "parsed": reply.parsed,
                    "tool_name": reply.tool_name,
                    "tool_arguments": reply.tool_arguments,
                },
            )
            # Ancestors' rows after the trace's sequence row: every transaction that touches
            # both takes them in this order, so siblings on two workers cannot deadlock.
            _add_counters(run, cost=reply.cost_usd, tokens=tokens, llm_calls=1)

    def recorded_tool_result(self, run: RunView, key: str) -> ToolResult | None:
        if not run.resumed:
            return None
        row = ToolCall.objects.filter(idempotency_key=key, success=True).first()
        if row is None:
            return None
        return ToolResult(output=row.output_result, latency_ms=row.latency_ms, replayed=True)

    def record_tool_call(
        self,
        run: RunView,
        step: StepRecord,
        invocation: ToolInvocation,
        result: ToolResult | None,
        error: str = "",
    ) -> None:
        tool = invocation.tool
        event = {
            "step": step.name,
            "tool_id": tool["tool_id"],
            "success": result is not None,
            "latency_ms": result.latency_ms if result else 0,
        }
        steps, items = self._take_pending(run, [], [("tool.call", event)])
        with transaction.atomic():
            # The trace's sequence row first, the runs' rows after: one lock order.
            append_events(run.trace_id, run.id, items)
            if steps or len(items) > 1:  # the engine buffered changes of the run too
                self._write_run(run)
                self._write_steps(run, steps)
            else:
                self._touch(run)
            # One statement: a replay after a crash may write the same key again.
            ToolCall.objects.bulk_create(
                [
                    ToolCall(
                        idempotency_key=invocation.idempotency_key,
                        run_id=run.id,
                        tool_id=tool["tool_id"],
                        tool_name=tool.get("name", tool["tool_id"])[:200],
                        provider=tool.get("provider", "")[:50],
                        input_parameters=invocation.arguments,
                        output_result=result.output if result else None,
                        success=result is not None,
                        error_message=error[:10_000],
                        latency_ms=result.latency_ms if result else 0,
                        metadata={
                            "step": step.key,
                            "iteration": step.iteration,
                            "attempt": step.attempt,
                            "sandbox": invocation.sandbox,
                        },
                    )
                ],
                update_conflicts=True,
                unique_fields=["idempotency_key"],
                update_fields=["output_result", "success", "error_message", "latency_ms"],
            )
            # After the trace's sequence row, as in _record_call.
            _add_counters(run, cost=Decimal(0), tokens=0, tool_calls=1)

    # -- memory and artifacts --------------------------------------------------------------

    def memory_read(self, run: RunView) -> list[Any]:
        """What the entity remembers, oldest first (seed 000 §3.6.2: FULL or RECENT_N)."""
        config = run.definition["capabilities"]["memory"]
        if not config.get("enabled"):
            return []
        items = _memory_items(run, config).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        )
        if config.get("access_pattern") == "RECENT_N":
            items = items[:MEMORY_RECENT_N]
        return [item for item in reversed(list(items.values_list("content", flat=True)))]

    def memory_write(self, run: RunView, content: Any) -> None:
        """Remember one item; the retention policy's max_items and ttl_seconds apply."""
        config = run.definition["capabilities"]["memory"]
        if not config.get("enabled"):
            return
        retention = config.get("retention_policy") or {}
        ttl = retention.get("ttl_seconds")
        scope = config.get("scope", "SESSION")
        with transaction.atomic():
            MemoryItem.objects.create(
                workspace_id=run.workspace_id,
                scope=scope,
                entity_id=run.entity_id if scope != "GLOBAL" else None,
                session=run.trace_id if scope == "SESSION" else None,
                run_id=run.id,
                content=content,
                expires_at=timezone.now() + timedelta(seconds=ttl) if ttl else None,
            )
            limit = retention.get("max_items")
            if limit:
                keep = _memory_items(run, config).values_list("pk", flat=True)[:limit]
                _memory_items(run, config).exclude(pk__in=list(keep)).delete()

    def artifacts(self, run: RunView) -> _WorkspaceArtifacts:
        return _WorkspaceArtifacts(run.workspace_id)

    def child_definition(self, run: RunView, entity_ref: str) -> dict | None:
        found = self._resolved(run.workspace_id, entity_ref)
        return pinned_definition(found[1].pk, found[0].pk) if found else None

    def children_definitions(self, run: RunView, refs: list[str]) -> dict[str, dict]:
        self._resolve_many(run.workspace_id, refs)
        found = {}
        for ref in refs:
            definition = self.child_definition(run, ref)
            if definition is not None:
                found[ref] = definition
        return found

    def _resolved(self, workspace_id: int, ref: str) -> tuple[Entity, EntityVersion] | None:
        """A child entity and its current version, resolved once per advance."""
        self._resolve_many(workspace_id, [ref])
        return self._children[(workspace_id, ref)]

    def _resolve_many(self, workspace_id: int, refs: list[str]) -> None:
        """Resolve child references (id, string id or name) to entities and their current
        versions in one query, and read the versions' definitions not cached yet."""
        cache = self.__dict__.setdefault("_children", {})
        missing = [ref for ref in dict.fromkeys(refs) if (workspace_id, ref) not in cache]
        if not missing:
            return
        ids = []
        for ref in missing:
            with contextlib.suppress(ValueError):
                ids.append(uuid.UUID(str(ref)))
        newest = EntityVersion.objects.filter(entity=OuterRef("pk")).order_by("-created_at", "-id")
        # One query: the entities and the id of each one's newest version.
        entities = list(
            Entity.objects.filter(workspace_id=workspace_id)
            .filter(Q(pk__in=ids) | Q(external_id__in=missing) | Q(name__in=missing))
            .annotate(newest_version_id=Subquery(newest.values("pk")[:1]))
            .only("id", "workspace_id", "external_id", "name", "type", "status")
        )
        versions = {
            entity.pk: EntityVersion(pk=entity.newest_version_id, entity_id=entity.pk)
            for entity in entities
            if entity.newest_version_id is not None
        }
        by_ref: dict[str, Entity] = {}
        for entity in entities:
            for key in (str(entity.pk), entity.external_id, entity.name):
                if key:
                    by_ref.setdefault(key, entity)
        uncached = [v.pk for v in versions.values() if (v.pk, str(v.entity_id)) not in _DEFINITIONS]
        if uncached:
            rows = EntityVersion.objects.filter(pk__in=uncached).values_list(
                "pk", "entity_id", "definition"
            )
            with _DEFINITIONS_LOCK:
                for pk, entity_id, definition in rows:
                    _DEFINITIONS[(pk, str(entity_id))] = definition
        for ref in missing:
            entity = by_ref.get(str(ref))
            if entity is None:
                try:
                    entity = by_ref.get(str(uuid.UUID(str(ref))))
                except ValueError:
                    entity = None
            version = versions.get(entity.pk) if entity is not None else None
            cache[(workspace_id, ref)] = (entity, version) if version is not None else None


class _Heartbeat:
    """Renews the leases of the runs this process is busy with (a slow model call must not let
    the sweeper hand a run to a second worker), every third of the lease, from one daemon
    thread per process: registering a run costs a dictionary entry, not a thread."""

    _held: dict[str, str] = {}  # run id -> lease owner
    _lock = threading.Lock()
    _thread: threading.Thread | None = None

    @classmethod
    def start(cls, run: RunView, owner: str) -> None:
        with cls._lock:
            cls._held[run.id] = owner
            if cls._thread is None or not cls._thread.is_alive():
                cls._thread = threading.Thread(
                    target=cls._beat, name="hierarch-leases", daemon=True
                )
                cls._thread.start()

    @classmethod
    def stop(cls, run: RunView) -> None:
        with cls._lock:
            cls._held.pop(run.id, None)

    @classmethod
    def _beat(cls) -> None:
        from django.db import close_old_connections

        while True:
            time.sleep(max(lease_seconds() / 3, 0.5))
            with cls._lock:
                held = list(cls._held.items())
            if not held:
                continue
            close_old_connections()
            until = timezone.now() + timedelta(seconds=lease_seconds())
            for run_id, owner in held:
                with contextlib.suppress(Exception):  # a missed beat only shortens a lease
                    Run.objects.filter(pk=run_id, lease_owner=owner).update(lease_expires_at=until)


MEMORY_RECENT_N = 10


def _memory_items(run: RunView, config: dict) -> Any:
    scope = config.get("scope", "SESSION")
    items = MemoryItem.objects.filter(workspace_id=run.workspace_id, scope=scope)
    if scope == "SESSION":
        return items.filter(session=run.trace_id)
    if scope == "ENTITY":
        return items.filter(entity_id=run.entity_id)
    return items


class _WorkspaceArtifacts:
    """The engine's ArtifactStore on the Artifact table, per workspace."""

    def __init__(self, workspace_id: int):
        self.workspace_id = workspace_id

    def has(self, digest: str) -> bool:
        return Artifact.objects.filter(workspace_id=self.workspace_id, digest=digest).exists()

    def put(self, digest: str, content: str) -> None:
        Artifact.objects.get_or_create(
            workspace_id=self.workspace_id,
            digest=digest,
            defaults={"content": content, "size": len(content.encode())},
        )

    def get(self, digest: str) -> str | None:
        return (
            Artifact.objects.filter(workspace_id=self.workspace_id, digest=digest)
            .values_list("content", flat=True)
            .first()
        )


_VIEW_FIELDS = (
    "id",
    "trace_id",
    "workspace_id",
    "entity_version_id",
    "entity_id",
    "status",
    "input_data",
    "state",
    "dynamic_plan",
    "cursor",
    "iteration",
    "attempt",
    "depth",
    "depth_limit",
    "parent_id",
    "output_data",
    "error_code",
    "error_message",
    "cancel_requested",
    "lineage",
    "parent_step_key",
    "spawn_group",
    "started_at",
    "created_at",
    "created_by_id",
    "lease_owner",
    "lease_expires_at",
    "wake_at",
    "entity__status",
)
_ASLEEP = (RunStatus.PAUSED, RunStatus.BLOCKED)
_STEP_DONE = ("COMPLETED", "FAILED", "SKIPPED", "CANCELLED")
_TAKE_SEQ = (  # the table name is the model's own, not input
    f"UPDATE {TraceSequence._meta.db_table} SET last_seq = last_seq + %s "  # noqa: S608
    "WHERE trace_id = %s RETURNING last_seq"
)


def _uuid_param(value: str) -> Any:
    """UUIDs as the backend stores them: native on PostgreSQL, 32 hex digits on SQLite."""
    parsed = uuid.UUID(str(value))
    return parsed if connection.vendor == "postgresql" else parsed.hex


def _add_counters(
    run: RunView, *, cost: Decimal, tokens: int, llm_calls: int = 0, tool_calls: int = 0
) -> None:
    """A call counts for the run and every ancestor."""
    Run.objects.filter(pk__in=[run.id, *run.lineage]).update(
        total_cost_usd=F("total_cost_usd") + cost,
        total_tokens=F("total_tokens") + tokens,
        llm_calls=F("llm_calls") + llm_calls,
        tool_calls=F("tool_calls") + tool_calls,
    )


def append_events(trace_id: str, run_id: str, items: list[tuple[str, dict]]) -> None:
    """Append events with the trace's next sequence numbers; send them after commit."""
    if not items:
        return
    # One statement takes the numbers (and the root's row lock until commit, so a trace's
    # events commit in order).
    with connection.cursor() as cursor:
        cursor.execute(_TAKE_SEQ, [len(items), _uuid_param(trace_id)])
        row = cursor.fetchone()
    if row is None:  # the trace's first events
        TraceSequence.objects.get_or_create(trace_id=trace_id)
        with connection.cursor() as cursor:
            cursor.execute(_TAKE_SEQ, [len(items), _uuid_param(trace_id)])
            row = cursor.fetchone()
    (last,) = row
    first = last - len(items) + 1
    rows = [
        RunEvent(trace_id=trace_id, seq=first + i, run_id=run_id, type=kind, payload=payload)
        for i, (kind, payload) in enumerate(items)
    ]
    RunEvent.objects.bulk_create(rows)
    messages = [
        {"seq": row.seq, "run_id": str(run_id), "type": row.type, "payload": row.payload}
        for row in rows
    ]
    transaction.on_commit(lambda: _broadcast(str(trace_id), messages))


def _broadcast(trace_id: str, events: list[dict]) -> None:
    """Hand the events to the channel layer without waiting: delivery is at most once, and a
    reader that misses one re-reads the trace from the database after its last number."""
    sender = _sender()
    if sender is None:
        return
    loop, layer = sender
    message = {"type": "run.events", "events": events}
    asyncio.run_coroutine_threadsafe(_send(layer, f"trace_{trace_id}", message), loop)


async def _send(layer: Any, group: str, message: dict) -> None:
    with contextlib.suppress(Exception):  # a full or absent layer must not break a run
        await layer.group_send(group, message)


_SENDER: tuple[asyncio.AbstractEventLoop, Any] | None = None
_SENDER_LOCK = threading.Lock()


def _sender() -> tuple[asyncio.AbstractEventLoop, Any] | None:
    """One event loop thread per process for channel-layer sends (async_to_sync per event
    cost about a millisecond)."""
    global _SENDER
    if _SENDER is not None:
        return _SENDER
    with _SENDER_LOCK:
        if _SENDER is None:
            from channels.layers import get_channel_layer

            layer = get_channel_layer()
            if layer is None:
                return None
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="hierarch-events", daemon=True).start()
            _SENDER = (loop, layer)
    return _SENDER
