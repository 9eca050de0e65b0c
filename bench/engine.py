"""Engine speed: run a generated hierarchy end to end and print what it cost.

    .venv/bin/python bench/engine.py --shape 10,10,10 [--links sequential|parallel]
        [--executor sync|inline|celery] [--workers N] [--latency-ms N] [--governed] [--otlp]
        [--react K] [--delegate K] [--repeat N] [--json] [--profile FILE]

Builds process → agents → skills → actions of the given shape (3,2,2 is 22 nodes; 5,5,5 is
156; 10,10,10 is 1,111). Each action makes one model call (the offline model, through
litellm; `--latency-ms` makes each call of the run that slow, 0 by default) to fill the
arguments of one tool call. The hierarchy is imported into a fresh workspace of the database
of DATABASE_URL, run once, and measured:

- `sync`: advanced in this process and thread, one step after another (one worker), with
  exact query counts, through the engine's wiring (runs/engine_factory.py);
- `inline`: the inline executor's thread pool (`--workers` threads);
- `celery`: `--workers` Celery workers started for the run with the README's command
  (config/celery.py WORKER_COMMAND; a node name each when there are several) and the
  settings' pool of threads (needs a broker).

With --governed the tree runs under a budget and call limits (seed 000 §3.7, never reached),
so the difference to a run without shows what checking them costs per node. With --otlp the
trace is exported as OpenTelemetry spans to a loopback receiver (bench/otlp_sink.py, its own
process) when the root ends; the sync figures include the export.

With --delegate K (sync; `--repeat 3` for three rounds) every agent of the tree, the second
level, has a budget of its own and hires K subordinates of a template entity (an action like
the leaves) through DELEGATE steps of its static plan, each hire with a budget of its own set
aside from the agent's and what it does not spend returned when it ends. Every agent rather
than the root alone: a hire nests like any child, and the figures per hire are a difference of
two whole runs, so the more hires a tree makes (shape 10,1,1 with K 5: 50), the less the
run-to-run noise weighs on each. Each round runs, in turn, that tree, the same tree with K
designed child steps of the template instead (a child like any other, spending its agent's
budget) and with neither, and prints worker CPU, statements and round trips (and the
database's CPU) per hire, per designed child, and what a hire adds over a designed child.

Prints a summary, or one JSON line with --json: nodes, wall_s, per_node_ms, queries_per_node
and round_trips_per_node (sync only, where they are counted in this process: queries sent,
BEGIN and COMMIT included (each statement of a pipeline counts), and the exchanges with the
database the worker waited for), cpu_ms_per_node (sync only), db_cpu_ms_per_node (sync,
PostgreSQL on this host: its backend process's CPU), rows_per_node, peak_rss_mb (this process)
and worker_peak_rss_mb (celery). On PostgreSQL also db_connections_peak (the most connections
to the database at once over the run, sampled every 10 ms from pg_stat_activity: every
process's, this one's included) and, with celery, worker_db_connections_peak (the workers'
alone); calls_in_flight_peak (the most model calls at once, from their records' end and
latency), worker_rss_mb_per_call_in_flight and worker_cpu_ms_per_node (celery: the workers' CPU
over the run).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("SECRET_KEY", "bench-only-" + "k" * 50)
os.environ.setdefault("ALLOWED_HOSTS", "localhost")

import django  # noqa: E402
import psycopg  # noqa: E402
from psycopg.pq import PipelineStatus, TransactionStatus  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from entities.models import Entity, Workspace  # noqa: E402
from entities.services import entities_import  # noqa: E402
from runs import background, sql  # noqa: E402
from runs.models import TERMINAL, LLMCall, Run, RunEvent, StepRun, ToolCall  # noqa: E402
from runs.tracing import trace_export  # noqa: E402

TYPES = ("PROCESS", "AGENT", "SKILL", "ACTION")
TOOL = {
    "tool_id": "lookup",
    "name": "Lookup",
    "description": "Selects a field of a JSON value.",
    "implementation": "json_extract",
    "function_schema": {
        "name": "lookup",
        "description": "Apply a JMESPath expression to a JSON value.",
        "parameters": {
            "type": "object",
            "properties": {
                "data": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "expression": {"type": "string", "enum": ["n"]},
            },
            "required": ["data", "expression"],
        },
    },
    "permissions": "READ",
}


def governance(level: int, governed: bool) -> dict:
    """With --governed: the process has a budget and call limits that every model and tool
    call of the tree is checked against (big enough never to stop it), and each agent a
    budget of its own set aside from the process's; else no limit but the depth."""
    limits: dict = {"execution_limits": {"max_recursion_depth": 5}}
    if governed and level == 0:
        limits["cost_controls"] = {"max_cost_usd": 1000, "alert_threshold_usd": 900}
        limits["execution_limits"].update(max_llm_calls=100_000, max_tool_calls=100_000)
    elif governed and level == 1:
        limits["cost_controls"] = {"max_cost_usd": 10}
    return limits


def react_tools(count: int) -> list[dict]:
    """`count` copies of the lookup tool, each a tool of its own that the offline model,
    told to look up with every lookup tool, calls in its reasoning loop's first turn."""
    return [
        {
            **TOOL,
            "tool_id": f"lookup_{i}",
            "name": f"Lookup {i}",
            "description": f"Lookup tool {i}: selects a field of a JSON value.",
            "function_schema": {**TOOL["function_schema"], "name": f"lookup_{i}"},
        }
        for i in range(1, count + 1)
    ]


REACT_STEP = {
    "step_id": "answer",
    "order": 1,
    "name": "Answer",
    "type": "THOUGHT",
    "target": {"prompt_template": "Lookup the value n with every lookup tool, then answer."},
}


def bundle(shape: list[int], links: str, governed: bool = False, react: int = 0) -> list[dict]:
    """The generated hierarchy; with `react` K, each leaf is a REACT entity with K tools
    whose reasoning loop calls all K in its first turn, then answers (two model calls and K
    tool calls a leaf) instead of a TOOL_CALL step."""
    definitions: list[dict] = []

    def make(level: int, path: str) -> str:
        ref = f"n{path}"
        fanout = shape[level] if level < len(shape) else 0
        children = [make(level + 1, f"{path}.{i}") for i in range(fanout)]
        atomic = not children
        definitions.append(
            {
                "metadata": {"id": ref, "type": TYPES[level], "status": "ACTIVE"},
                "identity": {
                    "name": f"{TYPES[level].lower()}{path.replace('.', '_')}",
                    "description": f"Generated {TYPES[level].lower()} {path}",
                    "persona": {"system_prompt": "You are a generated entity."},
                },
                "hierarchy": {
                    "children": [{"child_id": c, "relationship": links.upper()} for c in children]
                },
                "governance": governance(level, governed),
                "capabilities": {"tools": [TOOL] if atomic else []},
                "planning": {
                    "static_plan": {
                        "enabled": atomic,
                        "steps": [
                            {
                                "step_id": "lookup",
                                "order": 1,
                                "name": "Look up",
                                "type": "TOOL_CALL",
                                "target": {"tool_id": "lookup"},
                            }
                        ]
                        if atomic
                        else [],
                    }
                },
            }
        )
        if atomic and react:
            leaf = definitions[-1]
            leaf["capabilities"] = {"tools": react_tools(react)}
            leaf["planning"]["static_plan"]["steps"] = [REACT_STEP]
            leaf["logic_gate"] = {"reasoning_config": {"reasoning_mode": "REACT"}}
        return ref

    make(0, "0")
    return definitions


TEMPLATE = "hire_template"  # the entity an agent hires (or, designed, invokes) K times
HIRE_BUDGET_USD = 0.05  # each hire's budget, set aside from its hirer's while it runs
HIRER_BUDGET_USD = 10  # each agent's own budget, which its hires are set aside from
EXTRAS = ("none", "designed", "hired")  # --delegate: the three trees of a round


def with_extras(definitions: list[dict], k: int, kind: str) -> list[dict]:
    """The hierarchy of `bundle` for --delegate: every agent (the second level) has a budget
    of its own and a static plan that runs its children, then, unless `kind` is "none", K
    more steps, each a run of the template (an action like the leaves: one model call, one
    tool call). "hired": K DELEGATE steps (its delegation names the template; each hire with
    a budget of its own, reserved from the agent's and what it does not spend returned);
    "designed": K child steps of the template, a child of the agent like any other (it spends
    the agent's budget). Both sequential, one child run at a time (a DELEGATE step always
    is), so the only difference is what a hire adds over a designed child."""
    definitions = [dict(d) for d in definitions]
    template = {
        **next(d for d in definitions if d["metadata"]["type"] == "ACTION"),
        "metadata": {"id": TEMPLATE, "type": "ACTION", "status": "ACTIVE"},
        "identity": {
            "name": TEMPLATE,
            "description": "The entity agents hire",
            "persona": {"system_prompt": "You are a hired hand."},
        },
        "hierarchy": {"children": []},
        "governance": governance(3, False),
    }
    for definition in definitions:
        if definition["metadata"]["type"] != "AGENT":
            continue
        links = list(definition["hierarchy"]["children"])
        steps = [
            {
                "step_id": f"child{i}",
                "order": i,
                "name": f"Child {i}",
                "type": "CHILD_ENTITY_INVOCATION",
                "target": {"entity_id": link["child_id"]},
            }
            for i, link in enumerate(links, start=1)
        ]
        for j in range(1, k + 1 if kind != "none" else 1):
            order = len(links) + j
            if kind == "hired":
                hire = {
                    "role": f"Hand {j}",
                    "task": f"Look up n for the agent ({j} of {k})",
                    "reason": "the agent wants a hand",
                    "budget_usd": HIRE_BUDGET_USD,
                }
                target: dict = {"entity_id": TEMPLATE, "hire": hire}
                steps.append(
                    {
                        "step_id": f"hire{j}",
                        "order": order,
                        "name": f"Hire {j}",
                        "type": "DELEGATE",
                        "target": target,
                    }
                )
            else:
                steps.append(
                    {
                        "step_id": f"extra{j}",
                        "order": order,
                        "name": f"Extra {j}",
                        "type": "CHILD_ENTITY_INVOCATION",
                        "target": {"entity_id": TEMPLATE},
                    }
                )
        if kind == "designed":
            links.append({"child_id": TEMPLATE, "relationship": "SEQUENTIAL"})
        limits = dict(definition["governance"])
        limits["cost_controls"] = {"max_cost_usd": HIRER_BUDGET_USD}
        definition.update(
            hierarchy={"children": links},
            governance=limits,
            planning={"static_plan": {"enabled": True, "steps": steps}},
            capabilities={
                **definition["capabilities"],
                "delegation": {
                    "enabled": kind == "hired",
                    "templates": [TEMPLATE] if kind == "hired" else [],
                    "max_subordinates": max(k, 1),
                    "max_budget_usd_each": HIRE_BUDGET_USD,
                },
            },
        )
    return [template, *definitions]


def rows_in_trace(trace_id: uuid.UUID) -> int:
    return (
        Run.objects.filter(trace_id=trace_id).count()
        + StepRun.objects.filter(run__trace_id=trace_id).count()
        + LLMCall.objects.filter(run__trace_id=trace_id).count()
        + ToolCall.objects.filter(run__trace_id=trace_id).count()
        + RunEvent.objects.filter(trace_id=trace_id).count()
    )


IDLE = TransactionStatus.IDLE
COUNTED: dict[str, int] = {}  # round trips and queries over the run (sync only)
CPU: dict[str, float] = {}  # this process's CPU time over the run (sync only)
OTLP: dict[str, int] = {}  # with --otlp: the receiver's port, and what it took


def run_sync(root: Entity, profile: str | None = None) -> tuple[Run, int, float]:
    from governance.safety import SafetyScreening
    from runs.engine.core import Engine
    from runs.engine_factory import parts
    from runs.services import run_start
    from runs.store import OrmRunStore

    queue: list[str] = []
    model, tools = parts()  # as a worker has them: each lets go of the connection to wait
    engine = Engine(
        store=OrmRunStore(),
        model=model,
        tools=tools,
        enqueue=queue.append,
        screening=SafetyScreening(),
        handoff_s=settings.HIERARCH_ENGINE["HANDOFF_SECONDS"],
    )
    from runs.gateway import litellm_module

    litellm_module()  # imported lazily; not part of the measurement
    # litellm imports more on its first call (its provider and logging modules, about 0.5 s):
    # a worker pays that once, so one call of an action's shape goes before the clock.
    from runs.engine.ports import ModelRequest

    engine.model.complete(
        ModelRequest(
            provider="local",
            model="offline",
            messages=({"role": "user", "content": "warm up"},),
            tools=(TOOL["function_schema"],),
            tool_choice=TOOL["function_schema"]["name"],
            purpose="TOOL_ARGUMENTS",
        )
    )
    from governance import safety

    safety.scan("warm up: +44 20 7946 0958", ["PII"])  # the PII scanner's data, loaded once
    # Queries: every query sent, BEGIN and COMMIT included (a transaction's statements sent
    # together in a pipeline, runs/sql.py `one_trip`, count each); round trips: each exchange
    # the engine waits for (a query outside a pipeline, a pipeline's Sync). Counted by
    # wrapping the public methods that send them (psycopg's Cursor.execute, Connection.commit
    # and rollback, Pipeline.sync and the end of a pipeline, and the BEGIN psycopg sends before
    # a query outside autocommit), on whichever connection the
    # pool hands this thread (the lease heartbeat's thread not); on SQLite, under Django's
    # execute wrapper (there runs/sql.py's statements go through Django's cursors).
    counted = {"round_trips": 0, "queries": 0}
    postgresql = connection.vendor == "postgresql"
    counting_thread = threading.get_ident()
    restore: list = []

    def sent(queries: int = 1, round_trips: int | None = None) -> None:
        if threading.get_ident() == counting_thread:
            counted["queries"] += queries
            counted["round_trips"] += queries if round_trips is None else round_trips

    if not postgresql:

        def count(execute, sql, params, many, context):  # noqa: ANN001
            sent()
            return execute(sql, params, many, context)

        wrapper = connection.execute_wrapper(count)
        wrapper.__enter__()
        restore.append(lambda: wrapper.__exit__(None, None, None))
        commit = connection.commit

        def counting_commit() -> None:
            sent(2)  # its BEGIN here too
            commit()

        connection.commit = counting_commit
        restore.append(lambda: delattr(connection, "commit"))
    else:
        originals = {
            "execute": psycopg.Cursor.execute,
            "commit": psycopg.Connection.commit,
            "rollback": psycopg.Connection.rollback,
            "sync": psycopg.Pipeline.sync,
            "exit": psycopg.Pipeline.__exit__,
        }

        def counting_execute(self, query, params=None, **kwargs):  # noqa: ANN001, ANN202
            raw = self.connection
            queries = 1 + (not raw.autocommit and raw.info.transaction_status == IDLE)
            # In a pipeline a statement is queued: its round trip is the pipeline's Sync.
            piped = raw.pgconn.pipeline_status != PipelineStatus.OFF
            sent(queries, 0 if piped else queries)
            return originals["execute"](self, query, params, **kwargs)

        def counting_sync(self):  # noqa: ANN001, ANN202
            sent(0, 1)
            return originals["sync"](self)

        def counting_exit(self, *exc):  # noqa: ANN001, ANN202
            sent(0, 1)  # the pipeline's Sync, waited for
            return originals["exit"](self, *exc)

        def counting_commit(self):  # noqa: ANN001, ANN202
            sent()
            return originals["commit"](self)

        def counting_rollback(self):  # noqa: ANN001, ANN202
            sent()
            return originals["rollback"](self)

        psycopg.Cursor.execute = counting_execute
        psycopg.Connection.commit = counting_commit
        psycopg.Connection.rollback = counting_rollback
        psycopg.Pipeline.sync = counting_sync
        psycopg.Pipeline.__exit__ = counting_exit
        restore.append(lambda: setattr(psycopg.Pipeline, "sync", originals["sync"]))
        restore.append(lambda: setattr(psycopg.Pipeline, "__exit__", originals["exit"]))
        restore.append(lambda: setattr(psycopg.Cursor, "execute", originals["execute"]))
        restore.append(lambda: setattr(psycopg.Connection, "commit", originals["commit"]))
        restore.append(lambda: setattr(psycopg.Connection, "rollback", originals["rollback"]))
    profiler = cProfile.Profile(time.process_time) if profile else None
    backend = _backend_cpu_s()
    CPU["before"] = time.process_time()
    started = time.perf_counter()
    try:
        if profiler is not None:
            profiler.enable()
        # run_start hands the root to the configured executor (the inline pool by default):
        # here this loop is the executor, or a pool thread would race it for the root.
        with _handed_to(queue):
            run = run_start(entity=root, input_data={})
        analysed = time.monotonic()
        while queue:
            engine.advance(queue.pop(0))
            if time.monotonic() - analysed >= settings.HIERARCH_ENGINE["SWEEP_SECONDS"]:
                # What the sweeper does meanwhile in a deployment (runs/sweeper.py): fresh
                # planner statistics once a runs table has doubled.
                sql.analyze(grown_only=True)
                analysed = time.monotonic()
        # The work the run's end left to this process's background threads (the trace's
        # export with --otlp; nothing otherwise) is the run's too.
        background.settle(60)
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
        for undo in restore:
            undo()
    CPU["spent"] = time.process_time() - CPU.pop("before")
    if backend is not None:
        CPU["database"] = _backend_cpu_s() - backend
    COUNTED.update(counted)
    return Run.objects.get(pk=run.pk), counted["round_trips"], time.perf_counter() - started


@contextlib.contextmanager
def _handed_to(queue: list[str]) -> Iterator[None]:
    """Runs handed to the executor in the block go to `queue` instead."""
    from runs import services

    enqueue = services.enqueue
    services.enqueue = queue.append
    try:
        yield
    finally:
        services.enqueue = enqueue


def _backend_cpu_s() -> float | None:
    """The CPU time so far of the PostgreSQL backend processes serving this database, when
    they run on this host (Linux /proc): what the database spent on the engine's statements
    (the engine's thread takes whichever connection its pool hands it)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend'"
        )
        pids = [pid for (pid,) in cursor.fetchall()]
    spent = [_process_cpu_s(pid) for pid in pids]
    if None in spent:
        return None  # a database on another host
    return sum(spent)


def _process_cpu_s(pid: int) -> float | None:
    """A process's CPU time so far (user and system), Linux /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class ConnectionSampler:
    """The most connections to the bench database at once (pg_stat_activity every 10 ms, on a
    connection of its own, not counted): all of them, and the workers' alone (their
    application_name, from PGAPPNAME)."""

    def __init__(self) -> None:
        self.peak_all = self.peak_workers = 0
        self.done = threading.Event()
        params = connection.get_connection_params()
        params.pop("pool", None)
        params.pop("prepare_threshold", None)
        self.conn = psycopg.connect(**params, autocommit=True)
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join(timeout=5)
        self.conn.close()

    def sample(self) -> None:
        query = (
            "SELECT count(*), count(*) FILTER (WHERE application_name LIKE %s) "
            "FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        while not self.done.wait(0.01):
            every, workers = self.conn.execute(query, [f"{WORKER_APP}%"]).fetchone()
            self.peak_all = max(self.peak_all, every)
            self.peak_workers = max(self.peak_workers, workers)


WORKER_APP = "hierarch-bench-worker"


def calls_in_flight_peak(trace_id: uuid.UUID) -> int:
    """The most model calls of the run under way at once: each call's record is written the
    moment it returns, with its latency."""
    edges = []
    for ended, latency_ms in LLMCall.objects.filter(run__trace_id=trace_id).values_list(
        "timestamp", "latency_ms"
    ):
        end = ended.timestamp()
        edges += [(end - latency_ms / 1000, 1), (end, -1)]
    peak = now = 0
    for _, step in sorted(edges):
        now += step
        peak = max(peak, now)
    return peak


def run_waiting(root: Entity, timeout: float = 3600) -> Run:
    from runs.services import run_start

    run = run_start(entity=root, input_data={})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in TERMINAL:
            return run
        time.sleep(0.05)
    raise SystemExit(f"the run did not finish within {timeout} s")


def _peak_rss_mb(pid: int) -> float | None:
    """A worker process's peak resident memory (Linux), read before it is stopped."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="3,2,2")
    parser.add_argument("--links", choices=["sequential", "parallel"], default="sequential")
    parser.add_argument("--executor", choices=["sync", "inline", "celery"], default="sync")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--latency-ms",
        type=int,
        default=0,
        metavar="N",
        help="the offline model answers each call of the run after N ms (HIERARCH_OFFLINE_"
        "LATENCY_MS, in this process and the workers): the time a real model takes",
    )
    parser.add_argument(
        "--governed",
        action="store_true",
        help="give the tree a budget and call limits, to measure what enforcing them costs",
    )
    parser.add_argument(
        "--otlp",
        action="store_true",
        help="export the trace as OpenTelemetry spans (runs/tracing.py) to a loopback OTLP/HTTP "
        "receiver in a process of its own (bench/otlp_sink.py); sync counts the export's "
        "CPU and time in the run's",
    )
    parser.add_argument(
        "--react",
        type=int,
        default=0,
        metavar="K",
        help="each leaf a REACT agent with K tools: its reasoning loop calls all K in one turn, "
        "then answers (two model calls and K tool calls a leaf, instead of a TOOL_CALL step)",
    )
    parser.add_argument(
        "--delegate",
        type=int,
        default=0,
        metavar="K",
        help="sync only: each agent (the second level) hires K subordinates through DELEGATE "
        "steps, each with a budget set aside from the agent's own; run in turn with the same "
        "tree with K designed child steps of the same entity instead and with neither, --repeat "
        "rounds, and print what a hire and a designed child cost and what hiring adds",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="sync only: write a cProfile of the run itself (not the set-up; with --repeat, the "
        "last run) to FILE, for pstats",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="sync only: run the hierarchy N times in this process, each run printed, then "
        "the median (a noisy machine's figures vary from run to run)",
    )
    args = parser.parse_args()
    shape = [int(n) for n in args.shape.split(",")]
    if args.repeat < 1 or (args.repeat > 1 and args.executor != "sync"):
        parser.error("--repeat takes a positive number, and more than 1 only with sync")
    if args.delegate and (args.executor != "sync" or args.otlp or args.profile or args.react):
        parser.error("--delegate runs sync, without --otlp, --profile or --react")
    if args.delegate < 0 or (args.delegate and len(shape) < 2):
        parser.error("--delegate takes 0 or more, and a shape with agents (two levels or more)")

    if args.latency_ms < 0:
        parser.error("--latency-ms takes 0 or more")
    settings.HIERARCH_OFFLINE_MODEL = {
        **settings.HIERARCH_OFFLINE_MODEL,
        "LATENCY_MS": args.latency_ms,
    }
    call_command("migrate", verbosity=0)
    if args.delegate:
        delegate_main(args, shape)
        return
    sink = otlp_sink_start() if args.otlp else None
    workspace = Workspace.objects.create(name="bench", slug=f"bench-{uuid.uuid4().hex[:8]}")
    definitions = bundle(shape, args.links, args.governed, args.react)
    entities_import(workspace=workspace, definitions=definitions)
    root = Entity.objects.get(workspace=workspace, name="process0")
    nodes = Entity.objects.filter(workspace=workspace).count()

    workers: list[subprocess.Popen] = []
    queries = None
    sampled: ConnectionSampler | None = None
    worker_cpu: list[float | None] = []
    if args.executor == "sync":
        walls = []
        for index in range(args.repeat):
            run, queries, wall = run_sync(root, args.profile)
            walls.append(wall * 1000 / nodes)
            if index < args.repeat - 1:
                report(args, nodes, run, queries, wall, [])
        if args.repeat > 1:
            otlp_finish(sink, run)
            report(args, nodes, run, queries, wall, [])
            print(
                json.dumps({"median_per_node_ms": round(statistics.median(walls), 3)})
                if args.json
                else f"median of {args.repeat} runs: {statistics.median(walls):.3f} ms per node"
            )
            return
    else:
        settings.HIERARCH_ENGINE["INLINE_WORKERS"] = args.workers
        if args.executor == "celery":
            settings.HIERARCH_EXECUTOR = "celery"
            for index in range(args.workers):
                workers.append(start_worker(index, args))
            time.sleep(3)
        # Warm up: every worker imports litellm on its first model call (about 2 s); a small
        # parallel run gives each one a call before the clock starts.
        warm = Workspace.objects.create(name="warm", slug=f"warm-{uuid.uuid4().hex[:8]}")
        entities_import(workspace=warm, definitions=bundle([args.workers * 2], "parallel"))
        run_waiting(Entity.objects.get(workspace=warm, name="process0"))
        cpu_before = [_process_cpu_s(worker.pid) for worker in workers]
        with contextlib.ExitStack() as stack:
            if connection.vendor == "postgresql":
                sampled = stack.enter_context(ConnectionSampler())
            start_wall = time.perf_counter()
            run = run_waiting(root)
            wall = time.perf_counter() - start_wall
        worker_cpu = [
            None if before is None or after is None else after - before
            for before, after in zip(
                cpu_before, [_process_cpu_s(worker.pid) for worker in workers], strict=True
            )
        ]
    worker_rss = [_peak_rss_mb(worker.pid) for worker in workers]
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.wait(timeout=30)
    otlp_finish(sink, run)
    report(args, nodes, run, queries, wall, worker_rss, sampled, worker_cpu)


def delegate_main(args: argparse.Namespace, shape: list[int]) -> None:
    """--delegate K: rounds (--repeat, 3 advised) of three trees run in turn, sync, each in a
    workspace of its own (`with_extras`): agents with no extra step, with K designed child
    steps of the template, with K hires of it. What a hire costs is the hired tree's figures
    less the plain tree's, over the hires; a designed child's, the same for the designed
    tree; what hiring adds, the hired tree's less the designed tree's."""
    roots = {}
    for kind in EXTRAS:
        workspace = Workspace.objects.create(name=kind, slug=f"{kind}-{uuid.uuid4().hex[:8]}")
        definitions = with_extras(bundle(shape, args.links, args.governed), args.delegate, kind)
        entities_import(workspace=workspace, definitions=definitions)
        roots[kind] = Entity.objects.get(workspace=workspace, name="process0")
    for kind in EXTRAS:  # a round first, not counted: what a process does once is not a hire's
        run_sync(roots[kind])
    rounds: list[dict[str, dict]] = []
    for index in range(args.repeat):
        measured = {}
        for kind in EXTRAS:
            run, round_trips, wall = run_sync(roots[kind])
            if run.status != "COMPLETED":
                raise SystemExit(f"the {kind} tree ended {run.status}: {run.error_message}")
            measured[kind] = {
                "cpu_ms": CPU["spent"] * 1000,
                "db_cpu_ms": CPU["database"] * 1000 if "database" in CPU else None,
                "statements": COUNTED["queries"],
                "round_trips": round_trips,
                "wall_ms": wall * 1000,
                "runs": Run.objects.filter(trace_id=run.trace_id).count(),
                "hires": Run.objects.filter(trace_id=run.trace_id, hired_by__isnull=False).count(),
            }
        rounds.append(measured)
        if not args.json:
            print(f"round {index + 1}: " + "; ".join(_tree_line(k, measured[k]) for k in EXTRAS))
    extras = rounds[0]["hired"]["hires"]
    if extras != rounds[0]["designed"]["runs"] - rounds[0]["none"]["runs"] or not extras:
        raise SystemExit(f"expected as many hires as designed children: {rounds[0]}")
    figures = {"database": connection.vendor, "shape": args.shape, "delegate": args.delegate}
    figures["extra_runs"] = extras
    for name, minus, plus in (
        ("designed_child", "none", "designed"),
        ("hire", "none", "hired"),
        ("hire_over_designed", "designed", "hired"),
    ):
        figures[name] = {
            measure: [
                round((r[plus][measure] - r[minus][measure]) / extras, 2)
                for r in rounds
                if r[plus][measure] is not None
            ]
            for measure in ("cpu_ms", "db_cpu_ms", "statements", "round_trips", "wall_ms")
        }
    figures["rounds"] = rounds
    if args.json:
        print(json.dumps(figures))
        return
    print(
        f"{extras} extra child runs a tree ({args.delegate} a agent, shape {args.shape}) on "
        f"{connection.vendor}; per extra run, median of {args.repeat} rounds (each round's):"
    )
    for name, label in (
        ("designed_child", "a designed child step"),
        ("hire", "a hire (DELEGATE step)"),
        ("hire_over_designed", "what a hire adds"),
    ):
        per = figures[name]
        print(
            f"  {label}: "
            + ", ".join(
                f"{statistics.median(per[m]):.2f} {unit} ({', '.join(f'{v:g}' for v in per[m])})"
                for m, unit in (
                    ("cpu_ms", "ms worker CPU"),
                    ("statements", "statements"),
                    ("round_trips", "round trips"),
                    ("db_cpu_ms", "ms database CPU"),
                )
                if per[m]
            )
        )


def _tree_line(kind: str, measured: dict) -> str:
    return (
        f"{kind} {measured['runs']} runs, {measured['cpu_ms']:.0f} ms CPU, "
        f"{measured['statements']} statements, {measured['round_trips']} round trips"
    )


def otlp_sink_start() -> subprocess.Popen:
    """The loopback OTLP receiver (bench/otlp_sink.py), and the trace export pointed at it."""
    sink = subprocess.Popen(  # noqa: S603
        [sys.executable, str(ROOT / "bench" / "otlp_sink.py")], stdout=subprocess.PIPE, text=True
    )
    assert sink.stdout is not None
    port = int(sink.stdout.readline())
    settings.HIERARCH_TRACING = {
        **settings.HIERARCH_TRACING,
        "ENDPOINT": f"http://127.0.0.1:{port}/v1/traces",
        "SAMPLING_RATE": 1.0,
    }
    OTLP["port"] = port
    return sink


def otlp_finish(sink: subprocess.Popen | None, run: Run) -> None:
    """With --otlp: what the receiver took, and the CPU one export of the run's trace takes
    in this process (read, spans, encoding, the request), the median of 5, measured apart
    from the run (the run's figures are noisier than the export's share)."""
    if sink is None:
        return
    background.settle(60)
    OTLP.update(otlp_sink_stats(sink))
    spent = []
    for _ in range(5):
        before = time.process_time()
        trace_export(trace_id=run.trace_id)
        spent.append(time.process_time() - before)
    OTLP["export_cpu_ms"] = round(statistics.median(spent) * 1000, 2)
    sink.terminate()
    sink.wait(timeout=10)


def otlp_sink_stats(sink: subprocess.Popen) -> dict:
    """What the receiver took: requests, spans and bytes."""
    url = f"http://127.0.0.1:{OTLP['port']}/stats"
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - loopback
        return json.loads(answer.read())


def start_worker(index: int, args: argparse.Namespace) -> subprocess.Popen:
    """A Celery worker started with the README's command (WORKER_COMMAND), with a node name of
    its own when there are several, its connections named for the sampler."""
    from config.celery import WORKER_COMMAND

    command = [sys.executable, "-m", *WORKER_COMMAND]  # `celery …`, from this venv
    if args.workers > 1:
        command += ["-n", f"bench{index}@%h"]
    env = {
        **os.environ,
        "HIERARCH_EXECUTOR": "celery",
        "HIERARCH_OFFLINE_LATENCY_MS": str(args.latency_ms),
        "PGAPPNAME": f"{WORKER_APP}{index}",
    }
    return subprocess.Popen(command, cwd=ROOT, env=env)  # noqa: S603


def report(
    args: argparse.Namespace,
    nodes: int,
    run: Run,
    queries: int | None,
    wall: float,
    worker_rss: list[float | None],
    sampled: ConnectionSampler | None = None,
    worker_cpu: list[float | None] | None = None,
) -> None:
    in_flight = calls_in_flight_peak(run.trace_id)
    rss = max((r for r in worker_rss if r is not None), default=None)
    cpu = [c for c in worker_cpu or [] if c is not None]
    figures = {
        "database": connection.vendor,
        "executor": args.executor,
        "workers": args.workers,
        "links": args.links,
        "governed": args.governed,
        "react_tools": args.react,
        "shape": args.shape,
        "status": run.status,
        "error": f"{run.error_code}: {run.error_message}" if run.status != "COMPLETED" else None,
        "nodes": nodes,
        "wall_s": round(wall, 3),
        "per_node_ms": round(wall * 1000 / nodes, 3),
        # Sync only (counted in this process): statements sent, BEGIN and COMMIT included,
        # and the round trips they took (statements in a pipeline share one).
        "queries_per_node": round(COUNTED["queries"] / nodes, 1) if COUNTED else None,
        "round_trips_per_node": round(queries / nodes, 1) if queries is not None else None,
        # The engine's own work (Python), apart from waiting on the database: sync only.
        "cpu_ms_per_node": round(CPU["spent"] * 1000 / nodes, 3) if CPU else None,
        # The database backend's CPU for the run (sync, PostgreSQL on this host).
        "db_cpu_ms_per_node": (
            round(CPU["database"] * 1000 / nodes, 3) if "database" in CPU else None
        ),
        "rows_per_node": round(rows_in_trace(run.trace_id) / nodes, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "worker_peak_rss_mb": rss,
        "latency_ms": args.latency_ms,
        "db_connections_peak": sampled.peak_all if sampled else None,
        "worker_db_connections_peak": (
            sampled.peak_workers if sampled and args.executor == "celery" else None
        ),
        "calls_in_flight_peak": in_flight,
        "worker_rss_mb_per_call_in_flight": (
            round(rss / args.workers / in_flight, 2) if rss and in_flight else None
        ),
        "worker_cpu_ms_per_node": round(sum(cpu) * 1000 / nodes, 3) if cpu else None,
        "otlp_spans": OTLP.get("spans"),
        "otlp_requests": OTLP.get("requests"),
        "otlp_bytes": OTLP.get("bytes"),
        "otlp_export_cpu_ms": OTLP.get("export_cpu_ms"),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"{nodes} nodes ({args.shape}, {args.links}) on {figures['database']} with "
            f"{args.executor} x{args.workers}: {run.status} in {figures['wall_s']} s, "
            f"{figures['per_node_ms']} ms per node"
        )
        if queries is not None:
            print(
                f"  {figures['queries_per_node']} queries and "
                f"{figures['round_trips_per_node']} round trips per node, "
                f"{figures['cpu_ms_per_node']} ms CPU per node"
                + (
                    f" (the database: {figures['db_cpu_ms_per_node']} ms)"
                    if figures["db_cpu_ms_per_node"] is not None
                    else ""
                )
            )
        print(f"  {figures['rows_per_node']} rows per node, peak RSS {figures['peak_rss_mb']} MB")
        if run.status != "COMPLETED":
            print(f"  the run ended {run.status}: {run.error_code} {run.error_message}")
        if figures["worker_peak_rss_mb"] is not None:
            print(
                f"  worker peak RSS {figures['worker_peak_rss_mb']} MB, "
                f"{figures['worker_rss_mb_per_call_in_flight']} MB per call in flight, "
                f"worker CPU {figures['worker_cpu_ms_per_node']} ms per node"
            )
        print(f"  model calls in flight at most: {in_flight}")
        if figures["otlp_spans"] is not None:
            print(
                f"  exported {figures['otlp_spans']} spans in {figures['otlp_requests']} "
                f"requests ({figures['otlp_bytes']} bytes); one export takes "
                f"{figures['otlp_export_cpu_ms']} ms of CPU"
            )
        if figures["db_connections_peak"] is not None:
            print(
                f"  database connections at most: {figures['db_connections_peak']} "
                + (
                    f"(the workers': {figures['worker_db_connections_peak']})"
                    if figures["worker_db_connections_peak"] is not None
                    else "(this process)"
                )
            )


if __name__ == "__main__":
    main()
