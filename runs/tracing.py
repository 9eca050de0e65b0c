"""Traces exported as OpenTelemetry spans over OTLP/HTTP, so Langfuse, Jaeger or Grafana
Tempo show what Hierarch ran.

When a root run ends (COMPLETED, FAILED or CANCELLED), its whole trace is read from the
rows the engine recorded and sent to HIERARCH_TRACING["ENDPOINT"], after commit and off
the engine's path (the inline executor's background thread, or a Celery task):

- one span per run (`invoke_agent <entity name>`), under the span of the step of its parent
  that started it; the root run's span has no parent;
- one span per step attempt (`step <name>`), under its run's span;
- one span per model call (`chat <model>`, the GenAI semantic conventions:
  `gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.provider.name`,
  `gen_ai.usage.input_tokens` / `output_tokens`, and `gen_ai.usage.cost` as Langfuse reads
  it) and per tool call (`execute_tool <tool>`, `gen_ai.tool.name`), under the step that
  made it (a planning call, made before any step, under its run).

The trace id is the 128 bits of the run's trace id (the root run's UUID); each span id is
made from its row (a step attempt's from its unique key, which the engine also knows: the
`traceparent` a step's calls carry names that span), so a trace exported twice is the same
trace. An entity whose `observability.tracing.trace_id_propagation` is false does not pass
its trace on (runs/engine/observability.py): each of its runs' child runs is sent as a trace
of its own (the id its row notes, `export_trace_id`: the child's UUID), its span with no
parent and a span link to the step span that started it; the database keeps one trace, and
sampling decides for the whole of it by its id. Only metadata leaves:
never a prompt, an answer, an input, an output, the state, a tool's arguments or result,
or an error message (they may hold personal data); error codes do.

An entity's `observability.tracing.span_annotations` are labels (seed 000 §3.9: "custom
labels for trace spans", e.g. `["video_production"]`): they go on its runs' spans as the
`hierarch.span_annotations` attribute. They are the designer's words, not run data.

Sampling keeps HIERARCH_TRACING["SAMPLING_RATE"] of the traces, decided by the trace id
alone (OpenTelemetry's TraceIdRatioBased), so every process decides the same. Nothing is
scheduled without an endpoint. An export is a hint, like a webhook's: a process that dies
before sending loses that trace's spans and nothing else; a receiver that fails or is down
is logged (the host only) and the run is not touched.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from urllib.parse import urlsplit

from django.conf import settings
from django.db import close_old_connections, connections, transaction
from opentelemetry import trace as otel
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Status, StatusCode

from runs import background
from runs.engine import observability
from runs.models import TERMINAL
from runs.selectors import trace_export_rows

log = logging.getLogger(__name__)

SCOPE = "hierarch.runs"
MOST_ANNOTATIONS = 20
LONGEST_ANNOTATION = 100
ANNOTATIONS = "entity_version__definition__observability__tracing__span_annotations"


def _config() -> dict[str, Any]:
    return settings.HIERARCH_TRACING


# -- scheduling ---------------------------------------------------------------------------------


class _Hintable(Protocol):
    """A Celery task that takes a trace id (runs.tasks.export_trace)."""

    def delay_on_commit(self, *args: Any) -> None: ...


_export_task: _Hintable | None = None
# One thread: exports go one after another, never competing with the steps for the cores.
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hierarch-otlp")


def trace_hints_install(*, export_task: _Hintable) -> None:
    """The Celery task that exports a trace with HIERARCH_EXECUTOR=celery, handed over once
    the runs app is ready (runs/apps.py): the tasks sit above this module."""
    global _export_task
    _export_task = export_task


def trace_sampled(trace_id: Any) -> bool:
    """Whether the trace is exported: HIERARCH_TRACING["SAMPLING_RATE"] of the traces, by
    the trace id alone, as OpenTelemetry's TraceIdRatioBased decides."""
    sampler = TraceIdRatioBased(float(_config()["SAMPLING_RATE"]))
    return sampler.should_sample(None, _trace_int(trace_id), "").decision.is_sampled()


def trace_export_schedule(*, trace_id: Any, status: str) -> bool:
    """In the transaction that ends a root run: export its trace after commit, when an
    endpoint is set, the run ended and the trace is sampled. Answers whether it will."""
    if not _config()["ENDPOINT"] or status not in TERMINAL or not trace_sampled(trace_id):
        return False
    trace_id = str(trace_id)
    if settings.HIERARCH_EXECUTOR == "celery":
        if _export_task is None:
            raise RuntimeError("no trace export task installed: is the runs app loaded?")
        _export_task.delay_on_commit(trace_id)
    else:
        transaction.on_commit(lambda: background.submit(_pool, _export_in_thread, trace_id))
    return True


def _export_in_thread(trace_id: str) -> None:
    close_old_connections()
    try:
        trace_export(trace_id=trace_id)
    finally:
        connections.close_all()


# -- the export ---------------------------------------------------------------------------------


def trace_export(*, trace_id: Any) -> bool:
    """Send the trace's spans to the endpoint; True when the receiver took them. A failure
    is logged and answered False, never raised: the run it tells of is done already."""
    endpoint = _config()["ENDPOINT"]
    if not endpoint:
        return False
    try:
        spans = trace_spans(trace_id, trace_export_rows(trace_id))
        result = _exporter(endpoint, float(_config()["TIMEOUT_SECONDS"])).export(spans)
    except Exception as exc:
        log.warning(
            "trace %s not exported to %s: %s", trace_id, _host(endpoint), type(exc).__name__
        )
        return False
    if result is not SpanExportResult.SUCCESS:
        log.warning("trace %s not exported: %s did not take it", trace_id, _host(endpoint))
        return False
    return True


def _host(endpoint: str) -> str:
    """The endpoint as logged: its host and port, never a path, query or user."""
    return urlsplit(endpoint).netloc.rpartition("@")[2] or "the endpoint"


_exporters: dict[tuple[str, float], OTLPSpanExporter] = {}
_exporters_lock = threading.Lock()


def _exporter(endpoint: str, timeout: float) -> OTLPSpanExporter:
    """One exporter (and its connections) per endpoint for the life of the process; its
    headers come from OTEL_EXPORTER_OTLP_(TRACES_)HEADERS."""
    with _exporters_lock:
        exporter = _exporters.get((endpoint, timeout))
        if exporter is None:
            exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout)
            _exporters[(endpoint, timeout)] = exporter
        return exporter


# -- the spans ----------------------------------------------------------------------------------


def _trace_int(trace_id: Any) -> int:
    return observability.trace_id_int(str(trace_id))


def span_id_of(kind: str, pk: Any) -> int:
    """The span id of a row: 64 bits of a hash of its table and key, never 0."""
    return observability.span_id(kind, pk)


def step_span_of(step: dict) -> int:
    """The span id of a step attempt's row: made from its unique key, as the engine makes
    the span of the `traceparent` its calls carry."""
    run_id, key = str(step["run_id"]), step["step_key"]
    return observability.step_span_id(run_id, key, step["iteration"], step["attempt"])


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(moment: datetime) -> int:
    """Nanoseconds since the epoch, exactly (a float's timestamp loses the microseconds)."""
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


def _annotations(raw: Any) -> list[str]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return []
    if not isinstance(raw, list):
        return []
    return [str(label)[:LONGEST_ANNOTATION] for label in raw[:MOST_ANNOTATIONS]]


_SAMPLED = otel.TraceFlags(otel.TraceFlags.SAMPLED)
_ERROR = Status(StatusCode.ERROR)
_SCOPE = InstrumentationScope(SCOPE)


@functools.cache
def _resource(service_name: str) -> Resource:
    """What sends the spans: the service, and what OTEL_RESOURCE_ATTRIBUTES adds."""
    return Resource.create({"service.name": service_name})


class _Builder:
    """The spans of one trace, made from the recorded rows as the SDK's finished spans are:
    `ReadableSpan`, the type its exporters take (its constructor is public; its docstring
    prefers spans made by a tracer, which checks each attribute and locks each span again,
    for rows that are finished already: half the export's time)."""

    def __init__(self, trace_id: int) -> None:
        self.trace_id = trace_id  # of the spans added next (a run's subtree may have its own)
        self.resource = _resource(_config()["SERVICE_NAME"])
        self.spans: list[ReadableSpan] = []

    def span(
        self,
        name: str,
        *,
        span_id: int,
        parent: int | None,
        start: datetime,
        end: datetime,
        attributes: dict[str, Any],
        kind: otel.SpanKind = otel.SpanKind.INTERNAL,
        error: str = "",
        link: otel.SpanContext | None = None,
    ) -> None:
        attributes = {k: v for k, v in attributes.items() if v is not None and v != ""}
        if error:
            attributes["error.type"] = error
        self.spans.append(
            ReadableSpan(
                name,
                context=otel.SpanContext(self.trace_id, span_id, False, _SAMPLED),
                parent=(
                    otel.SpanContext(self.trace_id, parent, False, _SAMPLED)
                    if parent is not None
                    else None
                ),
                resource=self.resource,
                attributes=attributes,
                links=(otel.Link(link),) if link is not None else (),
                kind=kind,
                status=_ERROR if error else Status(StatusCode.UNSET),
                start_time=_ns(start),
                end_time=max(_ns(end), _ns(start)),
                instrumentation_scope=_SCOPE,
            )
        )


def trace_spans(trace_id: Any, rows: dict[str, list[dict]]) -> Sequence[ReadableSpan]:
    """The spans of a trace's rows (runs.selectors.trace_export_rows), parents first."""
    runs = rows["runs"]
    builder = _Builder(_trace_int(trace_id))
    steps_of: dict[Any, list[dict]] = {}
    for step in rows["steps"]:
        steps_of.setdefault(step["run_id"], []).append(step)
    calls_of: dict[Any, list[tuple[str, dict]]] = {}
    for call in rows["model_calls"]:
        calls_of.setdefault(call["step_id"] or ("run", call["run_id"]), []).append(("llm", call))
    for call in rows["tool_calls"]:
        calls_of.setdefault(call["step_id"] or ("run", call["run_id"]), []).append(("tool", call))
    step_spans: dict[tuple[Any, str], list[tuple[datetime, int]]] = {}
    # Each run's trace outside Hierarch, by run id: the trace's own, or the one its row notes
    # (a run below an entity that does not pass its trace on).
    root = builder.trace_id
    traces: dict[Any, int] = {}
    for run in runs:  # parents first (by creation)
        own = run["export_trace_id"]
        builder.trace_id = traces[run["id"]] = _trace_int(own) if own else root
        parent, link = None, None
        if run["parent_id"] is not None:
            parent = _step_span_for(step_spans, run) or span_id_of("run", run["parent_id"])
            parent_trace = traces.get(run["parent_id"], root)
            if parent_trace != builder.trace_id:  # a trace of its own, linked to where it began
                parent, link = None, otel.SpanContext(parent_trace, parent, False, _SAMPLED)
        _run_spans(builder, run, parent, steps_of.get(run["id"], []), calls_of, step_spans, link)
    return builder.spans


def _step_span_for(
    step_spans: dict[tuple[Any, str], list[tuple[datetime, int]]], run: dict
) -> int | None:
    """The span of the parent's step attempt that started the run: the last one of its step
    started by the time the run was made."""
    key = (run["parent_id"], run["parent_step_key"].rsplit("#", 1)[0])
    found = None
    for started, span_id in step_spans.get(key, []):
        if started <= run["created_at"]:
            found = span_id
    return found


def _run_spans(
    builder: _Builder,
    run: dict,
    parent: int | None,
    steps: list[dict],
    calls_of: dict[Any, list[tuple[str, dict]]],
    step_spans: dict[tuple[Any, str], list[tuple[datetime, int]]],
    link: otel.SpanContext | None = None,
) -> None:
    start = run["started_at"] or run["created_at"]
    end = run["completed_at"] or max([start, *(s["finished_at"] or start for s in steps)])
    span_id = span_id_of("run", run["id"])
    name = run["entity__name"]
    failed = run["status"] == "FAILED"
    builder.span(
        f"invoke_agent {name}",
        span_id=span_id,
        parent=parent,
        start=start,
        end=end,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.agent.version": run["entity_version__version"],
            "gen_ai.usage.cost": float(run["total_cost_usd"]),
            "hierarch.run.id": str(run["id"]),
            "hierarch.entity.type": run["entity__type"],
            "hierarch.run.status": run["status"],
            "hierarch.span_annotations": _annotations(run[ANNOTATIONS]) or None,
        },
        error=(run["error_code"] or "RUN_FAILED") if failed else "",
        link=link,
    )
    for call in calls_of.get(("run", run["id"]), []):
        _call_span(builder, call, span_id)
    for step in steps:
        step_span = step_span_of(step)
        step_spans.setdefault((run["id"], step["step_key"]), []).append(
            (step["started_at"], step_span)
        )
        _step_span(builder, step, step_span, span_id, end)
        for call in calls_of.get(step["id"], []):
            _call_span(builder, call, step_span)


def _step_span(builder: _Builder, step: dict, span_id: int, parent: int, run_end: datetime) -> None:
    failed = step["status"] == "FAILED"
    builder.span(
        f"step {step['name']}",
        span_id=span_id,
        parent=parent,
        start=step["started_at"],
        end=step["finished_at"] or run_end,
        attributes={
            "hierarch.step.type": step["type"],
            "hierarch.step.status": step["status"],
            # The first pass's first attempt says nothing: left out (each attribute is sent).
            "hierarch.step.iteration": step["iteration"] if step["iteration"] > 1 else None,
            "hierarch.step.attempt": step["attempt"] if step["attempt"] > 1 else None,
        },
        error=(step["error_code"] or "STEP_FAILED") if failed else "",
    )


def _call_span(builder: _Builder, call: tuple[str, dict], parent: int) -> None:
    kind, row = call
    end = row["timestamp"]  # recorded when the call returned
    start = end - timedelta(milliseconds=row["latency_ms"])
    if kind == "llm":
        builder.span(
            f"chat {row['model_name']}",
            span_id=span_id_of("llm", row["id"]),
            parent=parent,
            start=start,
            end=end,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": row["model_name"],
                "gen_ai.provider.name": row["model_provider"],
                "gen_ai.usage.input_tokens": row["prompt_tokens"],
                "gen_ai.usage.output_tokens": row["completion_tokens"],
                "gen_ai.usage.cost": float(row["cost_usd"]),
                "gen_ai.request.temperature": row["temperature"],
            },
            kind=otel.SpanKind.CLIENT,
        )
        return
    builder.span(
        f"execute_tool {row['tool_id']}",
        span_id=span_id_of("tool", row["id"]),
        parent=parent,
        start=start,
        end=end,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": row["tool_id"]},
        error="" if row["success"] else "TOOL_FAILED",
    )
