"""What an entity's `observability` section (seed 000 §3.9) does to its runs beyond what the
call logs keep (`log_thoughts`, `log_tool_calls`: runs/engine/thoughts.py, tool_steps.py):

- `logging.log_level` decides which of a run's events are written (`events_kept`, applied by
  both stores where they write a run's events). Every kind of event has a level in one table,
  `EVENT_LEVELS`, below; the product's own record is written at every level.
- `tracing.trace_id_propagation` decides whether a run passes its trace on (`traceparent`):
  the W3C `traceparent` header of the calls it makes (the built-in HTTP tool, a real model
  provider), and, in the OpenTelemetry export (runs/tracing.py), whether its child runs are
  spans of its trace. The database keeps one trace for the whole run tree either way (the
  trace page is the same); what changes is what leaves Hierarch:

  - true (the default): calls carry `traceparent: 00-<trace id>-<span of the step>-01`, the
    trace id and step span id the export gives the trace and the step, so a service that
    continues the trace shows under the step that called it; child runs are spans under the
    step that started them, as before.
  - false: the entity's runs pass nothing on. Their calls carry no `traceparent`, and each of
    their child runs starts a trace of its own outside Hierarch: the export sends the child's
    subtree as a trace whose id is the child run's UUID, its root span linked (an
    OpenTelemetry span link) to the parent's step span. The stores note that trace on the
    child's row when they create it (`export_trace_id`), so every run below it, and their
    calls, stay in it (unless another entity below says false again).

Pure functions of the definition and ids: no Django, no I/O.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from runs.engine.definition import Definition

if TYPE_CHECKING:
    from runs.engine.state import RunView, StepRecord

# An event as the engine buffers it, or as a store passes it on: (kind, payload).
E = TypeVar("E", bound=tuple[str, Mapping[str, Any]])

# -- log_level ----------------------------------------------------------------------------------

DEBUG, INFO, WARN, ERROR = 10, 20, 30, 40
ALWAYS = 100  # the product's own record: written whatever the level
LEVELS = {"DEBUG": DEBUG, "INFO": INFO, "WARN": WARN, "ERROR": ERROR}
DEFAULT_LEVEL = "INFO"

# The level of every kind of event (runs/engine/state.py EventKind; a test holds the two
# equal). DEBUG: everything, INFO: key events, WARN: issues, ERROR: failures (seed 000).
# Two rules read the payload too:
# - a failure is ERROR whatever its kind's level: a step that finished FAILED, a tool call
#   that failed;
# - a person's act (a payload with `by`: a step a person approved or sent back, a review a
#   person passed or a request's timeout passed) is ALWAYS.
# ALWAYS is what the product reads from events to work, and a person's acts: the live trace
# page adds a node on `run.created` and sets a node's status on `run.status` (and refreshes
# the node a live event names: `step.started` at INFO is how a running step shows), webhooks
# name a block by its `run.status` event (runs/webhooks.py), and the approvals inbox and the
# audit of a run are its `approval.*` events and people's edits. needs_attention, metrics,
# alerts and the OpenTelemetry export read the run, step and call rows, which every level
# keeps.
EVENT_LEVELS: dict[str, int] = {
    # the run
    "run.created": ALWAYS,
    "run.status": ALWAYS,
    "cost.alert": WARN,
    "run.hired": ALWAYS,
    "run.fired": ALWAYS,
    # its plan
    "plan.ready": INFO,
    "plan.reconciled": INFO,
    "plan.replanned": INFO,  # after a review.failed, which is the WARN
    "plan.edited": ALWAYS,
    # its steps
    "step.started": INFO,
    "step.finished": INFO,  # ERROR when it failed
    "step.skipped": INFO,
    "step.retry": WARN,
    "step.rate_limited": WARN,
    "step.exit": INFO,  # which way the run went; the live trace shows it
    # Written only under audit_level COMPREHENSIVE with log_state_changes (their own
    # switches, asked for by name): INFO, so the default level keeps what they ask for.
    "state.changed": INFO,
    "loop.next": INFO,
    "loop.stopped": WARN,  # out of passes: the run blocks or ends as on_exhausted says
    "memory.summarized": INFO,  # the memory's oldest items folded into a summary
    "memory.not_summarized": WARN,  # the fold's summary call failed or had no room
    "context.trimmed": DEBUG,  # the prompt the call log keeps shows what was sent
    "safety.flagged": WARN,
    # its calls (the LLMCall and ToolCall rows keep every call at every level)
    "llm.call": INFO,
    "tool.call": INFO,  # ERROR when it failed
    "tool.arguments_edited": ALWAYS,
    # its review and its people
    "review.passed": INFO,
    "review.failed": WARN,
    "review.escalated": WARN,
    "output.edited": ALWAYS,
    "approval.requested": ALWAYS,
    "approval.noted": ALWAYS,
    "approval.decided": ALWAYS,
    "approval.escalated": ALWAYS,
    "approval.timed_out": ALWAYS,
    "constraint.locked": ALWAYS,
}

# By level: the kinds whose own level is below it (a failure or a person's act among them is
# kept all the same). A kind missing from the table is never dropped.
_BELOW: dict[int, frozenset[str]] = {
    level: frozenset(kind for kind, at in EVENT_LEVELS.items() if at < level)
    for level in LEVELS.values()
}


def log_level(definition: Definition) -> int:
    """The entity's `observability.logging.log_level`, as a number (INFO when unset)."""
    logging = definition["observability"]["logging"]
    return LEVELS.get(logging.get("log_level") or DEFAULT_LEVEL, INFO)


def event_level(kind: str, payload: Mapping[str, Any]) -> int:
    """The level an event is written at: its kind's, unless it tells of a failure (ERROR)
    or of a person's act (ALWAYS)."""
    if "by" in payload:
        return ALWAYS
    if (kind == "step.finished" and payload.get("status") == "FAILED") or (
        kind == "tool.call" and payload.get("success") is False
    ):
        return ERROR
    return EVENT_LEVELS.get(kind, ALWAYS)


def events_kept(definition: Definition, items: list[E]) -> list[E]:
    """The events of `items` the entity's log_level writes, in order: `items` itself when
    it writes them all (the default level drops only DEBUG's few kinds)."""
    level = log_level(definition)
    below = _BELOW[level]
    if not below:
        return items
    for kind, _payload in items:
        if kind in below:
            break
    else:
        return items
    return [item for item in items if item[0] not in below or event_level(*item) >= level]


# -- trace_id_propagation ----------------------------------------------------------------------


def propagates(definition: Definition) -> bool:
    """The entity's `observability.tracing.trace_id_propagation` (true when unset)."""
    tracing = definition["observability"].get("tracing") or {}
    return tracing.get("trace_id_propagation", True) is not False


def span_id(kind: str, key: Any) -> int:
    """A span id made from what it stands for (`run` and its id, `step` and its key…): 64
    bits of a hash, never 0, the same in every process and every export."""
    digest = hashlib.blake2b(f"{kind}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


def step_span_id(run_id: str, step_key: str, iteration: int, attempt: int) -> int:
    """The span of one attempt of a step in one pass: its record's unique key, which the
    engine knows before the record is written and the export reads from the row."""
    return span_id("step", f"{run_id}:{step_key}:{iteration}:{attempt}")


def trace_id_int(trace_id: str) -> int:
    """The 128 bits of a trace id: a run's UUID as it is; any other id (an in-memory
    store's) hashed to 128 bits."""
    digits = str(trace_id).replace("-", "")
    if len(digits) == 32:
        try:
            value = int(digits, 16)
        except ValueError:
            pass
        else:
            if value:
                return value
    digest = hashlib.blake2b(str(trace_id).encode(), digest_size=16).digest()
    return int.from_bytes(digest, "big") or 1


def traceparent_header(trace_id: str, span: int) -> str:
    """A W3C Trace Context `traceparent` value (version 00, sampled: Hierarch records every
    run's trace, whether or not it exports it)."""
    return f"{_version_and_trace(trace_id)}{span:016x}-01"


@functools.lru_cache(maxsize=1024)
def _version_and_trace(trace_id: str) -> str:
    return f"00-{trace_id_int(trace_id):032x}-"


def traceparent(run: RunView, step: StepRecord) -> str:
    """The `traceparent` of the calls `step` of `run` makes: the run's trace outside
    Hierarch and the step's span; "" when the entity passes its trace on to nothing."""
    if not propagates(run.definition):
        return ""
    span = step_span_id(run.id, step.key, step.iteration, step.attempt)
    return traceparent_header(run.export_trace_id or run.trace_id, span)


def child_export_trace(run: RunView, child_id: str) -> str | None:
    """The trace outside Hierarch of a child run `run` starts: the run's own (None: the
    trace's id) when its entity passes its trace on, else a trace of the child's own."""
    if propagates(run.definition):
        return run.export_trace_id
    return child_id
