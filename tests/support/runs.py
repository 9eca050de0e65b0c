"""Runs driven to their end in the test thread, by an engine wired as the server's is, and
the pieces of definition tests build them from: steps, a static plan, an io contract."""

from __future__ import annotations

from typing import Any

from governance.safety import SafetyScreening
from governance.vault import PiiCipher
from runs import services
from runs.engine.core import Engine
from runs.gateway import LiteLLMGateway
from runs.models import Run
from runs.services import run_start
from runs.store import OrmRunStore
from tools.runner import RegistryToolRunner


class Driver:
    """Advances runs in this thread, in the order the engine asks, with the vault's cipher
    for pii_handling (as `runs/engine_factory.py` wires it)."""

    def __init__(self, *, steps_per_advance: int = 200) -> None:
        """`steps_per_advance=1`: every step starts from the run as stored (as after a
        crash, or on another worker)."""
        self.queue: list[str] = []
        self.engine = Engine(
            max_steps_per_advance=steps_per_advance,
            store=OrmRunStore(),
            model=LiteLLMGateway(),
            tools=RegistryToolRunner(),
            enqueue=self.queue.append,
            screening=SafetyScreening(),
            cipher=PiiCipher(),
        )

    def run(self, entity: Any, input_data: Any, **options: Any) -> Run:
        """`options` go to `run_start` (`trial=True`, `user=…`)."""
        handed_to = services.enqueue
        services.enqueue = self.queue.append  # this thread is the executor
        try:
            run = run_start(entity=entity, input_data=input_data, **options)
        finally:
            services.enqueue = handed_to
        for _ in range(10_000):
            if not self.queue:
                break
            self.engine.advance(self.queue.pop(0))
        else:
            raise AssertionError("the run never settled")
        run.refresh_from_db()
        return run


def step(order: int, name: str, kind: str, **target: Any) -> dict:
    return {"step_id": f"s{order}", "order": order, "name": name, "type": kind, "target": target}


def static_plan(*steps: dict) -> dict:
    return {"static_plan": {"enabled": True, "steps": list(steps)}}


def output_schema(**properties: str) -> dict:
    return {
        "output": {
            "schema": {
                "type": "object",
                "properties": {name: {"type": kind} for name, kind in properties.items()},
                "required": list(properties),
            }
        }
    }


def io(inputs: dict | None = None, **outputs: str) -> dict:
    contract = output_schema(**outputs)
    contract["input"] = {
        "schema": {
            "type": "object",
            "properties": {name: {"type": kind} for name, kind in (inputs or {}).items()},
            "required": list(inputs or {}),
        }
    }
    return contract


def saver(workspace: Any, name: str = "saver", **sections: Any) -> Any:
    """An ACTION whose one step records its input with the WRITE tool `save_row` (the
    built-in `record`): an effect outside the run, unless the call is sandboxed. `sections`
    are merged into its definition."""
    from tests.factories import EntityFactory, tool_definition

    tool = tool_definition(
        "save_row",
        implementation="record",
        permissions="WRITE",
        function_schema={
            "name": "save_row",
            "parameters": {
                "type": "object",
                "properties": {"table": {"type": "string"}, "data": {"type": "object"}},
                "required": ["table", "data"],
            },
        },
    )
    plan_step = step(1, "Save", "TOOL_CALL", tool_id="save_row")
    plan_step["input_mapping"] = {"table": "leads", "data": {"var": "input"}}
    return EntityFactory(
        workspace=workspace, name=name, tools=[tool], planning=static_plan(plan_step), **sections
    )
