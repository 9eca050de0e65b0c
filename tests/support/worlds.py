"""Worlds: entities, runs and a synchronous executor over one RunStore, the in-memory one
(`MemoryWorld`, no database, a clock that moves when a test says so) or the ORM's
(`OrmWorld`), with the same small API, so one scenario runs against both. Each hint the engine
sends is queued and advanced in the test thread, each advance by a new worker (a new lease
owner), as `runs.engine_factory` does. Also the definitions the scenarios build with."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from approvals.models import Approval
from approvals.services import approval_decide, approval_fire_due
from entities.definition import normalize
from entities.models import Entity, EntityVersion, Workspace
from entities.services import entity_save
from entities.versioning import bump_version, classify
from governance.safety import SafetyScreening
from runs.engine.core import Engine, RunStore, RunView
from runs.engine.memory_store import InMemoryRunStore
from runs.gateway import LiteLLMGateway
from runs.models import LLMCall, MemoryItem, Run, RunEvent, StepRun
from runs.models import ToolCall as ToolCallModel
from runs.services import run_cancel, run_fire, run_grant_passes, run_start
from runs.store import OrmRunStore
from tests.factories import EntityFactory, UserFactory, grant, tool_definition
from tests.factories import definition as factory_definition
from tools.runner import RegistryToolRunner


class StoreWrapper:
    """A worker's store with a fault a test injects: a subclass overrides the method where the
    fault strikes and reaches the world it runs in (see tests/engine/test_store_contract.py)."""

    def __init__(self, store: RunStore, world: World):
        self._store, self._world = store, world

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@dataclass(frozen=True)
class Call:
    """A model call as recorded: why (purpose), under which step record, its prompt as the
    log keeps it, and the JSON it answered."""

    purpose: str
    step: str
    iteration: int
    attempt: int
    prompt: str
    parsed: Any


@dataclass(frozen=True)
class ToolCallRow:
    """A tool call as recorded: its tool, arguments as the log keeps them, whether it
    succeeded (and why not), and its idempotency key."""

    tool_id: str
    arguments: Any
    success: bool
    error: str
    key: str


class World:
    """Entities, runs and a synchronous executor over one store; subclasses read the store."""

    lease_seconds: float
    clock: Any = None  # the engine's clock, when the store's time is not the real one
    handoff_s = 0.0  # the engine's handoff (runs/engine/core.py Engine.handoff_s)
    max_tool_turns = 20  # the engine's turn cap of a reasoning loop (Engine.max_tool_turns)

    def __init__(self) -> None:
        self.queue: list[str] = []
        self.later: list[tuple[str, float]] = []
        self.wrap_next: type[StoreWrapper] | None = None
        self.overtaken: tuple[RunStore, RunView] | None = None
        self.model = LiteLLMGateway()
        self.tools = RegistryToolRunner()

    def worker_store(self) -> RunStore:
        raise NotImplementedError

    def engine(self) -> Engine:
        store = self.worker_store()
        if self.wrap_next is not None:
            store, self.wrap_next = self.wrap_next(store, self), None
        engine = Engine(
            store=store,
            model=self.model,
            tools=self.tools,
            enqueue=self.queue.append,
            enqueue_later=lambda run_id, delay_s: self.later.append((run_id, delay_s)),
            screening=SafetyScreening(),
            handoff_s=self.handoff_s,
            max_tool_turns=self.max_tool_turns,
        )
        if self.clock is not None:
            engine.clock = self.clock
        self.engine_in_use = engine
        return engine

    def advance(self, run_id: str) -> None:
        self.engine().advance(run_id)

    def advance_all(self, limit: int = 1000) -> None:
        for _ in range(limit):
            if not self.queue:
                return
            self.advance(self.queue.pop(0))
        raise AssertionError("the runs never settled")

    def run(self, name: str, run_input: Any) -> str:
        run_id = self.start(name, run_input)
        self.advance_all()
        return run_id

    def event_types(self, trace_id: str) -> list[str]:
        return [kind for _seq, _run, kind, _payload in self.events(trace_id)]

    def events_of(self, run_id: str, kind: str) -> list[dict]:
        return [
            payload
            for _seq, rid, k, payload in self.events(self.trace(run_id))
            if rid == run_id and k == kind
        ]

    # What each store answers.
    def add(self, name: str, type: str = "ACTION", **sections: Any) -> str: ...  # noqa: A002
    def edit(self, name: str, type: str = "ACTION", **sections: Any) -> None: ...  # noqa: A002
    def forget_version(self, name: str, version: str) -> None: ...
    def version(self, run_id: str) -> str: ...
    def start(self, name: str, run_input: Any) -> str: ...
    def status(self, run_id: str) -> str: ...
    def error(self, run_id: str) -> tuple[str, str]: ...
    def input(self, run_id: str) -> Any: ...
    def output(self, run_id: str) -> Any: ...
    def trace(self, run_id: str) -> str: ...
    def trace_runs(self, trace_id: str) -> list[str]: ...
    def entity_name(self, run_id: str) -> str: ...
    def children(self, run_id: str) -> list[str]: ...
    def events(self, trace_id: str) -> list[tuple[int, str, str, dict]]: ...
    def step_statuses(self, run_id: str) -> list[tuple[str, int, str]]: ...
    def step_passes(self, run_id: str) -> list[tuple[str, int]]: ...
    def model_call_count(self, run_id: str) -> int: ...
    def model_calls(self, run_id: str) -> list[tuple[int, Decimal]]: ...
    def prompts(self, run_id: str) -> list[str]: ...
    def call_log(self, run_id: str) -> list[Call]: ...
    def tool_calls(self, run_id: str) -> list[ToolCallRow]: ...
    def memory_contents(self) -> list[Any]: ...
    def expire_memory_of(self, run_id: str) -> None: ...
    def counters(self, run_id: str) -> tuple[Decimal, int, int]: ...
    def budget(self, run_id: str) -> tuple[Decimal | None, Decimal, Decimal]: ...
    def call_counts(self, run_id: str) -> tuple[int, int]: ...
    def cancel(self, run_id: str) -> None: ...
    def fire(self, run_id: str, reason: str) -> None: ...
    def hire_record(self, run_id: str) -> dict[str, Any]: ...
    def set_monthly_cost_quota(self, quota_usd: Decimal | None) -> None: ...
    def quota_held(self) -> Decimal: ...
    def flag_only(self, run_id: str) -> None: ...
    def let_time_pass(self, seconds: float) -> None: ...
    def approvals(self, run_id: str) -> list[dict]: ...
    def decide(self, run_id: str, decision: str = "approve", **kwargs: Any) -> None: ...
    def time_out(self, run_id: str) -> None: ...
    def grant_passes(self, run_id: str, passes: int) -> None: ...


class ManualClock:
    """Time that moves only when a test says so."""

    def __init__(self) -> None:
        self.moment = datetime(2025, 1, 1, 12, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.moment

    def now(self) -> datetime:  # the engine's Clock port; the store calls it
        return self.moment

    def advance(self, seconds: float) -> None:
        self.moment += timedelta(seconds=seconds)


class MemoryWorld(World):
    lease_seconds = 30.0

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.store = InMemoryRunStore(
            screening=SafetyScreening(), clock=self.clock, lease_seconds=self.lease_seconds
        )
        self.workers = itertools.count(1)
        self.saved: dict[str, dict] = {}

    def worker_store(self) -> RunStore:
        return self.store.worker(f"worker-{next(self.workers)}")

    def add(self, name: str, type: str = "ACTION", **sections: Any) -> str:  # noqa: A002
        definition, problems = normalize(factory_definition(name, type, **sections))
        assert not problems, problems
        # Versioned as `entity_save` versions it (entities/versioning.py).
        previous = self.saved.get(name)
        if previous is None:
            version = definition["metadata"].get("version") or "1.0.0"
        else:
            kind = classify(previous, definition).kind
            version = bump_version(previous["metadata"]["version"], kind)
        definition["metadata"]["version"] = version
        self.saved[name] = definition
        self.store.add_entity(name, definition, status=definition["metadata"]["status"])
        return name

    def forget_version(self, name: str, version: str) -> None:
        self.store.forget_version(name, version)

    def version(self, run_id: str) -> str:
        return self.store.run(run_id).definition["metadata"]["version"]

    def edit(self, name: str, type: str = "ACTION", **sections: Any) -> None:  # noqa: A002
        self.add(name, type, **sections)  # a new version of the same entity

    def start(self, name: str, run_input: Any) -> str:
        run_id = self.store.start(name, run_input)
        self.queue.append(run_id)
        return run_id

    def status(self, run_id: str) -> str:
        return self.store.run(run_id).status

    def error(self, run_id: str) -> tuple[str, str]:
        run = self.store.run(run_id)
        return run.error_code, run.error_message

    def input(self, run_id: str) -> Any:
        return self.store.run(run_id).input

    def output(self, run_id: str) -> Any:
        return self.store.run(run_id).output

    def trace(self, run_id: str) -> str:
        return self.store.run(run_id).trace_id

    def trace_runs(self, trace_id: str) -> list[str]:
        found, frontier = [trace_id], [trace_id]
        while frontier:
            frontier = [c.id for rid in frontier for c in self.store.children_of(rid)]
            found += frontier
        return found

    def entity_name(self, run_id: str) -> str:
        return self.store.run(run_id).definition["identity"]["name"]

    def children(self, run_id: str) -> list[str]:
        return [child.id for child in self.store.children_of(run_id)]

    def events(self, trace_id: str) -> list[tuple[int, str, str, dict]]:
        return [(e.seq, e.run_id, e.type, e.payload) for e in self.store.events(trace_id)]

    def step_statuses(self, run_id: str) -> list[tuple[str, int, str]]:
        steps = sorted(self.store.steps(run_id), key=lambda s: (s.iteration, s.position, s.attempt))
        return [(s.name, s.attempt, s.status) for s in steps]

    def step_passes(self, run_id: str) -> list[tuple[str, int]]:
        steps = sorted(self.store.steps(run_id), key=lambda s: (s.iteration, s.position, s.attempt))
        return [(s.name, s.iteration) for s in steps]

    def model_call_count(self, run_id: str) -> int:
        return len(self._calls(run_id))

    def model_calls(self, run_id: str) -> list[tuple[int, Decimal]]:
        return [
            (c.reply.prompt_tokens + c.reply.completion_tokens, c.reply.cost_usd)
            for c in self._calls(run_id)
        ]

    def prompts(self, run_id: str) -> list[str]:
        return [
            "\n\n".join(f"[{m['role']}] {m.get('content') or ''}" for m in c.request.messages)
            for c in self._calls(run_id)
        ]

    def _calls(self, run_id: str) -> list[Any]:
        return [c for c in self.store.model_calls if c.run_id == run_id]

    def call_log(self, run_id: str) -> list[Call]:
        return [
            Call(
                c.request.purpose,
                c.step,
                c.iteration,
                c.attempt,
                "\n\n".join(f"[{m['role']}] {m.get('content') or ''}" for m in c.request.messages),
                c.reply.parsed,
            )
            for c in self._calls(run_id)
        ]

    def tool_calls(self, run_id: str) -> list[ToolCallRow]:
        return [
            ToolCallRow(c.tool_id, c.arguments, c.success, c.error_message, c.idempotency_key)
            for c in self.store._world.tool_calls.values()
            if c.run_id == run_id
        ]

    def memory_contents(self) -> list[Any]:
        """Every memory item's content, newest first."""
        items = sorted(self.store._world.memory, key=lambda m: (m.created_at, m.id), reverse=True)
        return [m.content for m in items]

    def expire_memory_of(self, run_id: str) -> None:
        for item in self.store._world.memory:
            if item.run_id == run_id:
                item.expires_at = self.clock() - timedelta(seconds=1)

    def counters(self, run_id: str) -> tuple[Decimal, int, int]:
        run = self.store.run(run_id)
        return run.total_cost_usd, run.total_tokens, run.llm_calls

    def budget(self, run_id: str) -> tuple[Decimal | None, Decimal, Decimal]:
        run = self.store.run(run_id)
        return run.budget_usd, run.reserved_usd, run.total_cost_usd

    def call_counts(self, run_id: str) -> tuple[int, int]:
        run = self.store.run(run_id)
        return run.llm_calls, run.tool_calls

    def cancel(self, run_id: str) -> None:
        self.store.cancel(run_id)

    def fire(self, run_id: str, reason: str) -> None:
        self.store.fire(run_id, reason, "operator")

    def hire_record(self, run_id: str) -> dict[str, Any]:
        run = self.store.run(run_id)
        return {
            name: getattr(run, name)
            for name in ("role", "task", "hired_reason", "hired_by", "fired_reason", "fired_by")
        }

    def set_monthly_cost_quota(self, quota_usd: Decimal | None) -> None:
        self.store.set_monthly_cost_quota(quota_usd)

    def quota_held(self) -> Decimal:
        return self.store.quota_held()

    def flag_only(self, run_id: str) -> None:
        """The run's cancel flag alone, as a cancel sets it before its descendants'."""
        with self.store._world.lock:
            self.store._world.runs[run_id].cancel_requested = True

    def let_time_pass(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def approvals(self, run_id: str) -> list[dict]:
        return [
            {
                "trigger": a.ask.trigger,
                "status": a.status,
                "subject": a.ask.subject,
                "payload": a.ask.payload,
                "step": a.ask.step_name,
                "risk": a.risk_level,
                "summary": a.ask.reasoning_summary,
                "judge": a.ask.judge,
                "reversibility": a.ask.downstream_impact["reversibility"],
                "affected_steps": a.ask.downstream_impact["affected_steps"],
            }
            for a in self.store.approvals(run_id)
        ]

    def decide(self, run_id: str, decision: str = "approve", **kwargs: Any) -> None:
        self.store.decide(run_id, decision=decision, **kwargs)
        self.queue.append(run_id)

    def time_out(self, run_id: str) -> None:
        self.store.time_out(run_id)
        self.queue.append(run_id)

    def grant_passes(self, run_id: str, passes: int) -> None:
        assert self.store.grant_passes(run_id, passes)
        self.queue.append(run_id)


class OrmWorld(World):
    def __init__(self, workspace: Any) -> None:
        super().__init__()
        self.workspace = workspace
        self.lease_seconds = settings.HIERARCH_ENGINE["LEASE_SECONDS"]

    def worker_store(self) -> RunStore:
        return OrmRunStore()

    def add(self, name: str, type: str = "ACTION", **sections: Any) -> str:  # noqa: A002
        EntityFactory(workspace=self.workspace, name=name, type=type, **sections)
        return name

    def edit(self, name: str, type: str = "ACTION", **sections: Any) -> None:  # noqa: A002
        entity = Entity.objects.get(workspace=self.workspace, name=name)
        data = factory_definition(name, type, **sections)
        entity_save(workspace=self.workspace, entity=entity, definition=data)

    def forget_version(self, name: str, version: str) -> None:
        EntityVersion.objects.filter(
            entity__workspace=self.workspace, entity__name=name, version=version
        ).delete()

    def version(self, run_id: str) -> str:
        return Run.objects.select_related("entity_version").get(pk=run_id).entity_version.version

    def start(self, name: str, run_input: Any) -> str:
        entity = Entity.objects.get(workspace=self.workspace, name=name)
        run_id = str(run_start(entity=entity, input_data=run_input).pk)
        self.queue.append(run_id)
        return run_id

    def _run(self, run_id: str) -> Run:
        return Run.objects.select_related("entity").get(pk=run_id)

    def status(self, run_id: str) -> str:
        return self._run(run_id).status

    def error(self, run_id: str) -> tuple[str, str]:
        run = self._run(run_id)
        return run.error_code, run.error_message

    def input(self, run_id: str) -> Any:
        return self._run(run_id).input_data

    def output(self, run_id: str) -> Any:
        return self._run(run_id).output_data

    def trace(self, run_id: str) -> str:
        return str(self._run(run_id).trace_id)

    def trace_runs(self, trace_id: str) -> list[str]:
        return [
            str(pk) for pk in Run.objects.filter(trace_id=trace_id).values_list("pk", flat=True)
        ]

    def entity_name(self, run_id: str) -> str:
        return self._run(run_id).entity.name

    def children(self, run_id: str) -> list[str]:
        rows = Run.objects.filter(parent_id=run_id).order_by("created_at", "group_index")
        return [str(pk) for pk in rows.values_list("pk", flat=True)]

    def events(self, trace_id: str) -> list[tuple[int, str, str, dict]]:
        rows = RunEvent.objects.filter(trace_id=trace_id).order_by("seq")
        return [(r.seq, str(r.run_id), r.type, r.payload) for r in rows]

    def step_statuses(self, run_id: str) -> list[tuple[str, int, str]]:
        rows = StepRun.objects.filter(run_id=run_id).order_by("iteration", "position", "attempt")
        return [(r.name, r.attempt, r.status) for r in rows]

    def step_passes(self, run_id: str) -> list[tuple[str, int]]:
        rows = StepRun.objects.filter(run_id=run_id).order_by("iteration", "position", "attempt")
        return [(r.name, r.iteration) for r in rows]

    def model_call_count(self, run_id: str) -> int:
        return LLMCall.objects.filter(run_id=run_id).count()

    def model_calls(self, run_id: str) -> list[tuple[int, Decimal]]:
        rows = LLMCall.objects.filter(run_id=run_id)
        return [(r.total_tokens, r.cost_usd) for r in rows]

    def prompts(self, run_id: str) -> list[str]:
        return list(LLMCall.objects.filter(run_id=run_id).values_list("input_prompt", flat=True))

    def call_log(self, run_id: str) -> list[Call]:
        return [
            Call(
                row.purpose,
                row.metadata["step"],
                row.metadata["iteration"],
                row.metadata["attempt"],
                row.input_prompt,
                row.metadata.get("parsed"),
            )
            for row in LLMCall.objects.filter(run_id=run_id)
        ]

    def tool_calls(self, run_id: str) -> list[ToolCallRow]:
        rows = ToolCallModel.objects.filter(run_id=run_id).order_by("timestamp", "pk")
        return [
            ToolCallRow(
                r.tool_id, r.input_parameters, r.success, r.error_message, r.idempotency_key
            )
            for r in rows
        ]

    def memory_contents(self) -> list[Any]:
        """Every memory item's content, newest first."""
        return list(MemoryItem.objects.values_list("content", flat=True))

    def expire_memory_of(self, run_id: str) -> None:
        MemoryItem.objects.filter(run_id=run_id).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )

    def counters(self, run_id: str) -> tuple[Decimal, int, int]:
        run = self._run(run_id)
        return run.total_cost_usd, run.total_tokens, run.llm_calls

    def budget(self, run_id: str) -> tuple[Decimal | None, Decimal, Decimal]:
        run = self._run(run_id)
        return run.budget_usd, run.reserved_usd, run.total_cost_usd

    def call_counts(self, run_id: str) -> tuple[int, int]:
        run = self._run(run_id)
        return run.llm_calls, run.tool_calls

    def cancel(self, run_id: str) -> None:
        run_cancel(run=self._run(run_id))

    def fire(self, run_id: str, reason: str) -> None:
        run_fire(run=self._run(run_id), reason=reason, by="operator")

    def hire_record(self, run_id: str) -> dict[str, Any]:
        run = self._run(run_id)
        return {
            "role": run.role,
            "task": run.task,
            "hired_reason": run.hired_reason,
            "hired_by": None if run.hired_by_id is None else str(run.hired_by_id),
            "fired_reason": run.fired_reason,
            "fired_by": run.fired_by,
        }

    def set_monthly_cost_quota(self, quota_usd: Decimal | None) -> None:
        Workspace.objects.filter(pk=self.workspace.pk).update(monthly_cost_quota_usd=quota_usd)

    def quota_held(self) -> Decimal:
        return Workspace.objects.get(pk=self.workspace.pk).quota_held_usd

    def flag_only(self, run_id: str) -> None:
        """The run's cancel flag alone, as a cancel sets it before its descendants'."""
        Run.objects.filter(pk=run_id).update(cancel_requested=True)

    def approvals(self, run_id: str) -> list[dict]:
        return [
            {
                "trigger": a.checkpoint_trigger,
                "status": a.status,
                "subject": a.subject,
                "payload": a.payload,
                "step": a.step_name,
                "risk": a.risk_level,
                "summary": a.reasoning_summary,
                "judge": a.judge,
                "reversibility": a.downstream_impact["reversibility"],
                "affected_steps": a.downstream_impact["affected_steps"],
            }
            for a in Approval.objects.filter(run_id=run_id).order_by("requested_at", "pk")
        ]

    def decide(self, run_id: str, decision: str = "approve", **kwargs: Any) -> None:
        by = kwargs.pop("by", "alice")
        payload = kwargs.pop("payload", None)
        approval = Approval.objects.get(run_id=run_id, status__in=["PENDING", "ESCALATED"])
        role = "admin" if approval.status == "ESCALATED" else "approver"
        user = grant(UserFactory(username=by), self.workspace, role)
        approval_decide(approval=approval, user=user, decision=decision, payload=payload, **kwargs)
        self.queue.append(run_id)

    def grant_passes(self, run_id: str, passes: int) -> None:
        user = grant(UserFactory(username="olga"), self.workspace, "operator")
        run_grant_passes(run=self._run(run_id), passes=passes, user=user)
        self.queue.append(run_id)

    def time_out(self, run_id: str) -> None:
        Approval.objects.filter(run_id=run_id, status__in=["PENDING", "ESCALATED"]).update(
            due_at=timezone.now() - timedelta(seconds=1)
        )
        approval_fire_due()
        self.queue.append(run_id)

    def let_time_pass(self, seconds: float) -> None:
        # Every due time, lease expiry and deadline comes `seconds` closer.
        delta = timedelta(seconds=seconds)
        Run.objects.update(
            wake_at=F("wake_at") - delta,
            lease_expires_at=F("lease_expires_at") - delta,
            deadline_at=F("deadline_at") - delta,
        )
        Approval.objects.update(requested_at=F("requested_at") - delta, due_at=F("due_at") - delta)


# -- definitions -----------------------------------------------------------------------------


def io(inputs: dict[str, str] | None = None, **outputs: str) -> dict:
    def schema(properties: dict[str, str]) -> dict:
        return {
            "type": "object",
            "properties": {name: {"type": kind} for name, kind in properties.items()},
            "required": list(properties),
        }

    return {"input": {"schema": schema(inputs or {})}, "output": {"schema": schema(outputs)}}


def limits(**execution_limits: Any) -> dict:
    return {"execution_limits": {"max_recursion_depth": 5, **execution_limits}}


def render_tool() -> dict:
    return tool_definition(
        "render",
        implementation="template_render",
        function_schema={
            "name": "render",
            "parameters": {
                "type": "object",
                "properties": {"template": {"type": "string"}, "variables": {"type": "object"}},
                "required": ["template"],
            },
        },
    )


def advance_at_once(world: World, run_ids: list[str]) -> None:
    """Advance each run on a thread of its own, all let go at the same moment: workers
    racing for the same budget, quota or row (PostgreSQL; each thread closes its connection)."""
    from django.db import connection

    start = threading.Barrier(len(run_ids))

    def advance(run_id: str) -> None:
        try:
            start.wait()
            world.engine().advance(run_id)
        finally:
            connection.close()

    with ThreadPoolExecutor(len(run_ids)) as pool:
        list(pool.map(advance, run_ids))
