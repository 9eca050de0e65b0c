"""The execution engine core: plain Python, no Django (see ../shared/DESIGN.md).

Where things are, for a reader new to the engine:

- **The driver**: `core.py` (`Engine.advance(run_id)`: claim, do the next piece of work,
  commit, return), with a run's first entry in `start.py`, its steps in `thoughts.py`,
  `tool_steps.py` and `children.py`, people asked in `checkpoints.py`, its end in
  `endings.py`, and the summaries the model makes (of earlier passes, of old memory items)
  in `summaries.py`.
- **The rules**, as functions of a definition and a run's state: `plan.py`, `planning.py`,
  `loop.py`, `retry.py`, `limits.py`, `memory.py`, `hitl.py`, `review.py`, `context.py`,
  `prompts.py`, `schemas.py`, `transforms.py`, `validators.py`, `jsonlogic.py`; the typed
  definition in `definition.py` and what is worked out once per pinned version in
  `pinned.py`; a run and a step's outcome as data in `state.py` and `outcomes.py`.
- **The ports** (what the engine asks of the world: the store, the model, the tools,
  screening, the clock, ids): `ports.py`. What both stores share (the dispatch of the port's
  typed requests): `storage.py`; the walk over descendants: `tree.py`.
- **The stores**: in memory for the engine's own tests, `memory_store.py`; on the ORM,
  `runs/store.py` (its hot statements in `runs/sql.py`).
- **Outside this package**, wired together in `runs/engine_factory.py`: the executors
  (`runs/executors.py`: inline threads and Celery, `runs/tasks.py`), the model gateway
  through litellm (`runs/gateway.py`), the offline model (`runs/offline.py`), the sweeper
  (`runs/sweeper.py`) and every way a run changes (`runs/services.py`).
"""
