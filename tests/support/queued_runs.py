"""Runs advanced in the test thread from queues the test holds: each hint the engine sends is
queued (`queue`), each delayed one kept with its delay (`later`), and `drain()` advances them
in order. A test can hold a run back, advance one step, or replay a due retry by hand.
`tests/support/runs.py` has the Driver that runs to the end as the server wires the engine
(with the vault's cipher)."""

from __future__ import annotations

from entities.models import Entity
from governance.safety import SafetyScreening
from runs import services
from runs.engine.core import Engine
from runs.gateway import LiteLLMGateway
from runs.models import Run
from runs.services import run_start
from runs.store import OrmRunStore
from tools.runner import RegistryToolRunner


class Driver:
    """Advance runs in this thread, in the order the engine asks."""

    def __init__(self) -> None:
        self.queue: list[str] = []
        self.engine = Engine(
            store=OrmRunStore(),
            model=LiteLLMGateway(),
            tools=RegistryToolRunner(),
            enqueue=self.queue.append,
            enqueue_later=lambda run_id, delay_s: self.later.append((run_id, delay_s)),
            screening=SafetyScreening(),
        )
        self.later: list[tuple[str, float]] = []

    def run(self, entity: Entity, input_data: dict) -> Run:
        # run_start hands the root to the configured executor: in a test that commits, the
        # inline pool's threads would advance it too, racing this one. Here this thread is
        # the executor.
        handed_to = services.enqueue
        services.enqueue = self.queue.append
        try:
            run = run_start(entity=entity, input_data=input_data)
        finally:
            services.enqueue = handed_to
        self.drain()
        run.refresh_from_db()
        return run

    def drain(self, limit: int = 10_000) -> None:
        for _ in range(limit):
            if not self.queue:
                return
            self.engine.advance(self.queue.pop(0))
        raise AssertionError("the run never settled")
