"""Live trace speed: event delivery to 50 watchers of one trace, and the trace page's server time
for a 1,000-node trace.

    .venv/bin/python bench/trace_ws.py [--runs 3] [--watchers 50] [--agents 4] [--actions 5]
                                       [--latency-ms 50] [--repeat 30] [--json]

Everything runs as in production, on loopback: the console (daphne serving
config.asgi:application, HIERARCH_EXECUTOR=celery), one Celery worker (prefork, one process),
PostgreSQL (DATABASE_URL; by default a fresh database created and dropped here) and Redis
(REDIS_URL for the channel layer, default db 12; CELERY_BROKER_URL, default db 13).

1. Delivery. A process (campaign → `--agents` agents → `--actions` actions each, every action
   one offline-model call of `--latency-ms`) asks a person before it starts, so its watchers
   connect first: `--watchers - 1` websocket clients (aiohttp, each with the session cookie
   and the Origin a browser sends) on `/ws/runs/<trace>/?after=<seq>`, and one trace page in
   Debian's Chromium (Playwright) whose own script (static/hierarch/trace.js) connects (the
   clients run in processes of ten). Then the request is approved and the worker runs the
   tree. For every event and every watcher:
   from the event's `RunEvent.created_at` (the worker's clock when it numbered the event,
   just before its transaction commits, so the figure includes the commit) to its arrival
   (the client's clock; for the page, a wrapper of `WebSocket` records `Date.now()` when the
   frame arrives). Also, for the page, from each `run.created` event to the new node's row
   entering the DOM (the script fetches the row from the server). All on one machine, one
   clock. Each watcher must receive every number once, in order: the bench checks.
2. The page. A finished trace of 1 + 10 + 100 + 900 = 1,011 runs (process → agents → skills →
   actions, inserted directly), read through Django's test client in this process (the
   view's server time, with its query count) and over HTTP from daphne: the first render at
   the root, at a deep action (its path open, its details shown), a collapsed subtree's
   children, a node's details and a rows refresh. Median and p95 of `--repeat` requests.

Prints a summary, or one JSON line with --json. Every process started here is stopped on the
way out, also on an error or SIGTERM; the database created here is dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, suppress
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness import (  # noqa: E402 - bench/harness.py
    Processes,
    database_create,
    database_drop,
    free_port,
    summary,
    until_up,
    wait_for,
)

CHROMIUM = "/usr/bin/chromium"

# In the page: when each event number's frame arrived, and when each node's row appeared.
PAGE_PROBE = """
window.benchSeen = {}; window.benchNodes = {};
const NativeWebSocket = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const socket = protocols === undefined
    ? new NativeWebSocket(url) : new NativeWebSocket(url, protocols);
  socket.addEventListener('message', (message) => {
    const now = Date.now();
    let data; try { data = JSON.parse(message.data) } catch (e) { return }
    if (data.type !== 'run.events') return;
    for (const event of data.events) {
      if (event.seq in window.benchSeen) window.benchDuplicates = (window.benchDuplicates || 0) + 1;
      else window.benchSeen[event.seq] = now;
    }
  });
  return socket;
};
window.WebSocket.prototype = NativeWebSocket.prototype;
Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
new MutationObserver((mutations) => {
  const now = Date.now();
  for (const m of mutations) for (const node of m.addedNodes) {
    if (node.nodeType === 1 && node.matches('li.node') && !(node.dataset.run in window.benchNodes))
      window.benchNodes[node.dataset.run] = now;
  }
}).observe(document, {childList: true, subtree: true});
"""


# -- the environment (as bench/hitl.py sets it up) ---------------------------------------------


def child_environment(var_dir: str, latency_ms: int) -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": os.environ.get("DEBUG", "0"),
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-" + "k" * 50),
        "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "SECURE_HSTS_SECONDS": "0",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": "0",
        "SECURE_HSTS_PRELOAD": "0",
        "HIERARCH_EXECUTOR": "celery",
        "HIERARCH_OFFLINE_LATENCY_MS": str(latency_ms),
        "HIERARCH_VAR_DIR": var_dir,
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/12"),
        "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/13"),
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "PYTHONPATH": str(ROOT),
    }


# -- the entities ------------------------------------------------------------------------------


def definition(name: str, kind: str, children: list[str] = (), **sections: Any) -> dict:
    data = {
        "metadata": {"type": kind, "status": "ACTIVE", "tags": []},
        "identity": {
            "name": name,
            "description": f"{name} for the trace benchmark",
            "persona": {"system_prompt": f"You are {name}."},
        },
        "hierarchy": {"children": [{"child_id": child} for child in children]},
        "governance": {"execution_limits": {"max_recursion_depth": 5}},
        "io_contract": {
            "output": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}}}
        },
    }
    data.update(sections)
    return data


def entities(workspace: Any, agents: int, actions: int) -> dict[str, Any]:
    """The live run's hierarchy, and one entity of each type for the 1,000-node trace."""
    from entities.services import entity_save

    def save(data: dict) -> Any:
        return entity_save(workspace=workspace, definition=data).entity

    agent_names = []
    for a in range(agents):
        names = [f"act_{a}_{n}" for n in range(actions)]
        for name in names:
            save(definition(name, "ACTION"))
        agent_names.append(f"agent_{a}")
        save(definition(f"agent_{a}", "AGENT", names))
    oversight = {
        "execution_limits": {"max_recursion_depth": 5},
        "human_oversight": {"hitl_checkpoints": [{"trigger": "BEFORE_EXECUTION"}]},
    }
    campaign = save(definition("campaign", "PROCESS", agent_names, governance=oversight))
    skill = save(definition("skill_0", "SKILL", ["act_0_0"]))
    return {"campaign": campaign, "skill": skill}


def big_trace(workspace: Any, kinds: dict[str, Any], shape: tuple[int, int, int]) -> dict:
    """A finished trace of 1 + a + a*s + a*s*n runs, inserted at once."""
    from django.utils import timezone

    from runs.models import Run, RunStatus, TraceSequence
    from runs.store import latest_version

    versions = {kind: latest_version(entity) for kind, entity in kinds.items()}
    now = timezone.now()
    root_id = uuid.uuid4()
    rows: list[Run] = []

    def run(kind: str, parent: Run | None, index: int) -> Run:
        row = Run(
            id=root_id if parent is None else uuid.uuid4(),
            workspace_id=workspace.pk,
            entity=kinds[kind],
            entity_version=versions[kind],
            parent=parent,
            root_id=None if parent is None else root_id,
            trace_id=root_id,
            depth=0 if parent is None else parent.depth + 1,
            lineage=[] if parent is None else [*parent.lineage, str(parent.pk)],
            status=RunStatus.COMPLETED,
            group_index=index,
            started_at=now,
            completed_at=now,
            execution_time_ms=250,
            total_tokens=300,
            total_cost_usd=Decimal("0.00018"),
            input_data={"brief": "x" * 200},
            output_data={"text": "y" * 200},
        )
        rows.append(row)
        return row

    agents, skills, actions = shape
    root = run("PROCESS", None, 0)
    last = {}
    for a in range(agents):
        agent = run("AGENT", root, a)
        for s in range(skills):
            skill = run("SKILL", agent, s)
            for n in range(actions):
                last = {"agent": agent, "skill": skill, "action": run("ACTION", skill, n)}
    Run.objects.bulk_create(rows, batch_size=500)
    TraceSequence.objects.create(trace_id=root_id, last_seq=0)
    return {"root": root, "count": len(rows), **last}


# -- 1. delivery -------------------------------------------------------------------------------


class Watchers:
    """`count` websocket clients in processes of their own (an asyncio loop each, at most
    PER_PROCESS clients a process), so that their clock readings wait neither for this
    process's GIL (Playwright, the ORM polling) nor for one another."""

    PER_PROCESS = 10

    def __init__(self, count: int, base_url: str, cookie: str) -> None:
        sizes = [self.PER_PROCESS] * (count // self.PER_PROCESS)
        if count % self.PER_PROCESS:
            sizes.append(count % self.PER_PROCESS)
        self.children = [
            subprocess.Popen(  # noqa: S603 - our own interpreter and script
                [sys.executable, __file__, "--watchers-child", str(size), base_url],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            for size in sizes
        ]
        self.cookie = cookie  # sent over the pipe, never on a command line
        self.seen: list[dict[int, float]] = []
        self.orders: list[list[int]] = []
        self.problems: list[str] = []

    def _ask(self, command: dict) -> list[dict]:
        for child in self.children:
            assert child.stdin is not None
            child.stdin.write(json.dumps(command) + "\n")
            child.stdin.flush()
        answers = []
        for child in self.children:
            assert child.stdout is not None
            line = child.stdout.readline()
            if not line:
                raise SystemExit(f"a watchers' process stopped ({child.poll()})")
            answers.append(json.loads(line))
        return answers

    def watch(self, trace_id: str, after: int) -> None:
        """Connect every client; return once each says it is live."""
        for answer in self._ask({"watch": trace_id, "after": after, "cookie": self.cookie}):
            self.problems += answer["problems"]

    def collect(self) -> None:
        """Close the clients and read what each received: {seq: arrival ms} and the order."""
        self.seen, self.orders = [], []
        for answer in self._ask({"stop": True}):
            self.seen += [{int(k): v for k, v in seen.items()} for seen in answer["seen"]]
            self.orders += answer["orders"]
            self.problems += answer["problems"]

    def close(self) -> None:
        for child in self.children:
            if child.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGTERM)
                child.wait(timeout=10)


def watchers_child(count: int, base_url: str) -> None:
    """The watchers' process: commands on stdin, one JSON answer a line on stdout."""
    import aiohttp

    async def client(index: int, url: str, state: dict, ready: asyncio.Event) -> None:
        headers = {"Origin": base_url, "Cookie": state["cookie"]}
        try:
            async with state["session"].ws_connect(url, headers=headers, max_msg_size=0) as ws:
                async for message in ws:
                    now = time.time() * 1000
                    if message.type != aiohttp.WSMsgType.TEXT:
                        continue
                    data = json.loads(message.data)
                    if data["type"] == "live":
                        ready.set()
                    elif data["type"] == "run.events":
                        for event in data["events"]:
                            state["seen"][index].setdefault(event["seq"], now)
                            state["orders"][index].append(event["seq"])
                    elif data["type"] == "error":
                        state["problems"].append(f"watcher {index}: {data['message']}")
                if ws.close_code not in (None, 1000):
                    state["problems"].append(f"watcher {index}: closed {ws.close_code}")
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - a watcher that fails is a figure
            state["problems"].append(f"watcher {index}: {error!r}")
        finally:
            ready.set()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        session = aiohttp.ClientSession()
        state: dict[str, Any] = {}
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            command = json.loads(line)
            if "watch" in command:
                state.update(
                    session=session,
                    cookie=command["cookie"],
                    seen=[{} for _ in range(count)],
                    orders=[[] for _ in range(count)],
                    problems=[],
                )
                url = (
                    f"{base_url.replace('http', 'ws', 1)}/ws/runs/{command['watch']}/"
                    f"?after={command['after']}"
                )
                ready = [asyncio.Event() for _ in range(count)]
                state["tasks"] = [
                    asyncio.ensure_future(client(i, url, state, ready[i])) for i in range(count)
                ]
                await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 60)
                answer = {"problems": list(state["problems"])}
            else:
                for task in state.get("tasks", []):
                    task.cancel()
                await asyncio.gather(*state.get("tasks", []), return_exceptions=True)
                answer = {
                    "seen": state.get("seen", []),
                    "orders": state.get("orders", []),
                    "problems": state.get("problems", []),
                }
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
        await session.close()

    asyncio.run(serve())


def deliver(args: argparse.Namespace, base_url: str, processes: Processes, setup: dict) -> dict:
    from django.db import transaction
    from django.test import Client
    from playwright.sync_api import sync_playwright

    from approvals.models import Approval
    from approvals.services import approval_decide
    from runs.models import TERMINAL, Run, RunEvent, TraceSequence
    from runs.services import run_start

    user = setup["user"]
    client = Client()
    client.force_login(user)
    session = client.cookies["sessionid"].value
    watchers = Watchers(args.watchers - 1, base_url, f"sessionid={session}")
    sockets: list[float] = []
    page_socket: list[float] = []
    page_nodes: list[float] = []
    problems: list[str] = []
    events_total = 0
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            context = browser.new_context(base_url=base_url)
            context.set_default_timeout(args.timeout * 1000)
            context.add_cookies([{"name": "sessionid", "value": session, "url": base_url}])
            context.add_init_script(PAGE_PROBE)
            page = context.new_page()
            page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
            page.on(
                "console",
                lambda m: (
                    problems.append(f"console: {m.text}")
                    if m.type == "error" and not m.text.startswith("Failed to load resource")
                    else None
                ),
            )
            page.on(
                "response",
                lambda r: (
                    problems.append(f"{r.status} {r.url}")
                    if r.status >= 400 and not r.url.endswith("/favicon.ico")
                    else None
                ),
            )
            for index in range(args.warmup + args.runs):
                counted = index >= args.warmup
                run = run_start(entity=setup["campaign"], input_data={}, user=user)
                approval = wait_for(
                    lambda run=run: Approval.objects.filter(run_id=run.pk).first(),
                    args.timeout,
                    "the run's request",
                    processes,
                )
                after = TraceSequence.objects.get(trace_id=run.pk).last_seq
                page.goto(f"/runs/{run.pk}/")
                page.wait_for_function("window.hierarchTraceLive === true")
                watchers.watch(str(run.pk), after)
                with transaction.atomic():
                    approval_decide(approval=approval, user=user, decision="approve")

                def ended(run: Run = run) -> bool:
                    run.refresh_from_db(fields=["status"])
                    return run.status in TERMINAL

                wait_for(ended, args.timeout * 4, f"run {run.pk} to end", processes)
                if run.status != "COMPLETED":
                    raise SystemExit(f"run {run.pk} ended {run.status}")
                events = dict(
                    RunEvent.objects.filter(trace_id=run.pk, seq__gt=after).values_list(
                        "seq", "created_at"
                    )
                )
                created = {
                    payload["run_id"]: events[seq]
                    for seq, payload in RunEvent.objects.filter(
                        trace_id=run.pk, type="run.created", seq__gt=after
                    ).values_list("seq", "payload")
                }
                # Everything has been sent once the run ended; give the last frames (and the
                # rows the page's script fetches) a moment.
                page.wait_for_timeout(1500)
                watchers.collect()
                seen_page = {int(k): v for k, v in page.evaluate("window.benchSeen").items()}
                nodes = page.evaluate("window.benchNodes")
                duplicates = page.evaluate("window.benchDuplicates || 0")
                expected = sorted(events)
                for number, seen in enumerate([*watchers.seen, seen_page]):
                    missing = set(expected) - set(seen)
                    if missing:
                        problems.append(f"run {index} watcher {number}: {len(missing)} missed")
                for number, order in enumerate(watchers.orders):
                    if order != expected:
                        problems.append(f"run {index} watcher {number}: not once and in order")
                if duplicates:
                    problems.append(f"run {index} page: {duplicates} numbers twice")
                missing_nodes = set(created) - set(nodes)
                if missing_nodes:
                    problems.append(f"run {index} page: {len(missing_nodes)} nodes never shown")
                if counted:
                    events_total += len(expected)
                    for seen in watchers.seen:
                        sockets += [t - events[s].timestamp() * 1000 for s, t in seen.items()]
                    page_socket += [
                        t - events[s].timestamp() * 1000
                        for s, t in seen_page.items()
                        if s in events
                    ]
                    page_nodes += [
                        nodes[rid] - at.timestamp() * 1000
                        for rid, at in created.items()
                        if rid in nodes
                    ]
                problems += [f"run {index} {p}" for p in watchers.problems]
                watchers.problems = []
            browser.close()
    finally:
        watchers.close()
    return {
        "events": events_total,
        "websocket_clients": summary(sockets),
        "page_frames": summary(page_socket),
        "all_watchers": summary(sockets + page_socket),
        "page_node_rows": summary(page_nodes),
        "problems": list(dict.fromkeys(problems)),
    }


# -- 2. the page -------------------------------------------------------------------------------


def page_times(args: argparse.Namespace, base_url: str, setup: dict) -> dict:
    import httpx
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    trace = setup["big"]
    root, skill, agent, action = trace["root"], trace["skill"], trace["agent"], trace["action"]
    urls = {
        "first render (root)": f"/runs/{root.pk}/",
        "first render (a deep action)": f"/runs/{action.pk}/",
        "collapsed subtree (an agent's 10 skills)": f"/runs/{root.pk}/nodes/{agent.pk}/children/",
        "collapsed subtree (a skill's 9 actions)": f"/runs/{root.pk}/nodes/{skill.pk}/children/",
        "a node's details": f"/runs/{root.pk}/nodes/{action.pk}/",
        "rows refresh (3 ids)": f"/runs/{root.pk}/rows/?ids={action.pk},{skill.pk},{agent.pk}",
    }
    client = Client()
    client.force_login(setup["user"])
    cookie = {"sessionid": client.cookies["sessionid"].value}
    figures = {}
    with httpx.Client(base_url=base_url, cookies=cookie, timeout=30) as http:
        for label, url in urls.items():
            server, wire, queries, size = [], [], 0, 0
            for i in range(args.repeat + 2):
                started = time.perf_counter()
                with CaptureQueriesContext(connection) as captured:
                    answer = client.get(url)
                took = (time.perf_counter() - started) * 1000
                assert answer.status_code == 200, (url, answer.status_code)
                started = time.perf_counter()
                over_http = http.get(url)
                wire_took = (time.perf_counter() - started) * 1000
                assert over_http.status_code == 200, (url, over_http.status_code)
                if i >= 2:  # two warm-up requests
                    server.append(took)
                    wire.append(wire_took)
                queries, size = len(captured.captured_queries), len(answer.content)
            figures[label] = {
                "server_ms": summary(server),
                "http_ms": summary(wire),
                "queries": queries,
                "bytes": size,
            }
    return {"nodes": trace["count"], "urls": figures}


def main() -> None:
    if sys.argv[1:2] == ["--watchers-child"]:
        watchers_child(int(sys.argv[2]), sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--watchers", type=int, default=50)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--actions", type=int, default=5)
    parser.add_argument("--latency-ms", type=int, default=50, help="each offline model call")
    parser.add_argument("--repeat", type=int, default=30, help="requests per page figure")
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with ExitStack() as stack:
        if not os.environ.get("DATABASE_URL"):
            os.environ["DATABASE_URL"] = database_create("trace")
            stack.callback(database_drop, os.environ["DATABASE_URL"])
        var_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-trace-"))
        env = child_environment(var_dir, args.latency_ms)
        os.environ.update(env)
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's loop in this thread

        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.db import connections

        from entities.models import Workspace
        from governance.permissions import membership_grant

        stack.callback(connections.close_all)
        call_command("migrate", verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)

        tag = secrets.token_hex(4)
        workspace = Workspace.objects.create(name="Bench trace", slug=f"bench-trace-{tag}")
        user = get_user_model().objects.create_user(f"watcher-{tag}", password=tag)
        membership_grant(workspace=workspace, user=user, role="admin")
        made = entities(workspace, args.agents, args.actions)
        from entities.models import Entity

        kinds = {
            "PROCESS": made["campaign"],
            "AGENT": Entity.objects.get(workspace=workspace, name="agent_0"),
            "SKILL": made["skill"],
            "ACTION": Entity.objects.get(workspace=workspace, name="act_0_0"),
        }
        setup = {
            "user": user,
            "campaign": made["campaign"],
            "big": big_trace(workspace, kinds, (10, 10, 9)),
        }

        processes = Processes(env, var_dir)
        stack.callback(processes.stop_all)
        port = free_port()
        processes.start(
            "daphne",
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
            + ["config.asgi:application"],
        )
        processes.start(
            "celery",
            [sys.executable, "-m", "celery", "-A", "config", "worker", "-c", "1"]
            + ["--pool", "prefork", "-l", "warning", "-n", f"bench-trace-{port}@%h"],
        )
        base_url = f"http://127.0.0.1:{port}"
        until_up(base_url, processes)
        load_before = os.getloadavg()[0]
        delivery = deliver(args, base_url, processes, setup)
        if delivery["problems"]:
            delivery["server_log"] = processes.log_tail("daphne", 40)
        pages = page_times(args, base_url, setup)
        load_after = os.getloadavg()[0]

    result = {
        "watchers": args.watchers,
        "runs": args.runs,
        "nodes_per_run": 1 + args.agents * (1 + args.actions),
        "delivery": delivery,
        "page": pages,
        "load_1m": [round(load_before, 2), round(load_after, 2)],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{args.runs} runs of {result['nodes_per_run']} nodes, {delivery['events']} events, "
        f"{args.watchers} watchers ({args.watchers - 1} websocket clients + 1 Chromium page), "
        f"one Celery worker; load {result['load_1m'][0]} → {result['load_1m'][1]} "
        f"on {os.cpu_count()} cores"
    )
    print(
        f"{'delivery, event commit → watcher':<44}{'n':>7}{'p50':>8}{'p95':>8}{'p99':>8}{'max':>8}"
    )
    for label, key in (
        ("websocket clients (aiohttp)", "websocket_clients"),
        ("the Chromium page's socket", "page_frames"),
        (f"all {args.watchers} watchers", "all_watchers"),
        ("run.created → its row in the page's DOM", "page_node_rows"),
    ):
        row = delivery[key]
        print(
            f"  {label:<42}{row['n']:>7}"
            + "".join(f"{row[k] or 0:>8.1f}" for k in ("p50", "p95", "p99", "max"))
        )
    print(f"\ntrace page, {pages['nodes']} runs in the trace (ms; server = the view in-process)")
    print(f"{'':<44}{'server p50':>11}{'p95':>7}{'http p50':>10}{'p95':>7}{'queries':>9}{'KB':>7}")
    for label, row in pages["urls"].items():
        print(
            f"  {label:<42}{row['server_ms']['p50']:>11.1f}{row['server_ms']['p95']:>7.1f}"
            f"{row['http_ms']['p50']:>10.1f}{row['http_ms']['p95']:>7.1f}"
            f"{row['queries']:>9}{row['bytes'] / 1024:>7.1f}"
        )
    for problem in delivery["problems"]:
        print(f"  problem: {problem}")
    if delivery.get("server_log"):
        print("the server's log, last lines:\n" + delivery["server_log"])


if __name__ == "__main__":
    main()
