"""A reasoning loop's turn of several READ tool calls that wait on the network: how long the
run takes end to end when the model asks for K of them at once.

    DATABASE_URL=postgres://… .venv/bin/python bench/tool_turn.py [--tools 4]
        [--latency-ms 100] [--runs 10] [--json]

A REACT agent with K `http_request` tools (READ, each a GET of a server on loopback that
answers after `--latency-ms`) is asked a question every tool's description shares a word
with, so the offline model calls all K in its first turn, then answers. The runs are advanced
in this process (one worker, the engine's wiring: runs/engine_factory.py) in a fresh
workspace of the database of DATABASE_URL (SQLite by default, migrated first). Prints the
median and the spread of the wall time per run, and what the calls would take one after
the other (K x latency), or one JSON line with --json. Run it at two commits to compare them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("SECRET_KEY", "bench-only-" + "k" * 50)
os.environ.setdefault("HIERARCH_EXECUTOR", "inline")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from entities.models import Entity, Workspace  # noqa: E402
from entities.services import entities_import  # noqa: E402


def serve(latency_s: float) -> tuple[ThreadingHTTPServer, int]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            time.sleep(latency_s)
            body = json.dumps({"path": self.path, "rows": 3}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, server.server_address[1]


def agent(tools: int) -> dict[str, Any]:
    fetchers = [
        {
            "tool_id": f"fetch_{n}",
            "name": f"Fetch {n}",
            "description": f"Fetches market figures, part {n}",
            "provider": "internal",
            "implementation": "http_request",
            "permissions": "READ",
            "function_schema": {
                "name": f"fetch_{n}",
                "description": f"Fetch the market figures of part {n} from a URL",
                "parameters": {
                    "type": "object",
                    "properties": {"url": {"type": "string"}},
                    "required": ["url"],
                },
            },
        }
        for n in range(1, tools + 1)
    ]
    return {
        "metadata": {"type": "AGENT", "status": "ACTIVE", "version": "1.0.0", "tags": []},
        "identity": {
            "name": "market_analyst",
            "description": "Looks up market figures",
            "persona": {"system_prompt": "You look up market figures before you answer."},
        },
        "logic_gate": {"reasoning_config": {"reasoning_mode": "REACT"}},
        "capabilities": {"tools": fetchers},
        "io_contract": {
            "input": {
                "schema": {
                    "type": "object",
                    "properties": {"url": {"type": "string"}, "question": {"type": "string"}},
                    "required": ["url", "question"],
                }
            },
            "output": {
                "schema": {
                    "type": "object",
                    "properties": {"answer": {"type": "string"}},
                    "required": ["answer"],
                }
            },
        },
    }


def run_once(entity: Entity, run_input: dict[str, Any]) -> float:
    from governance.safety import SafetyScreening
    from runs import services
    from runs.engine.core import Engine
    from runs.engine_factory import parts
    from runs.store import OrmRunStore

    queue: list[str] = []
    model, tools = parts()
    engine = Engine(
        store=OrmRunStore(),
        model=model,
        tools=tools,
        enqueue=queue.append,
        screening=SafetyScreening(),
    )
    # This loop is the executor: the run's start is handed to the queue, not to a pool.
    enqueue, services.enqueue = services.enqueue, queue.append
    try:
        started = time.perf_counter()
        run = services.run_start(entity=entity, input_data=run_input)
        while queue:
            engine.advance(queue.pop(0))
        wall = time.perf_counter() - started
    finally:
        services.enqueue = enqueue
    run.refresh_from_db()
    if run.status != "COMPLETED":
        raise SystemExit(f"the run ended {run.status}: {run.error_message}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=100)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True
    server, port = serve(args.latency_ms / 1000)
    workspace = Workspace.objects.create(
        name="tool turn bench", slug=f"tool-turn-{uuid.uuid4().hex[:8]}"
    )
    entities_import(workspace=workspace, definitions=[agent(args.tools)])
    entity = Entity.objects.get(workspace=workspace, name="market_analyst")
    run_input = {"url": f"http://127.0.0.1:{port}/figures", "question": "What market figures?"}
    run_once(entity, run_input)  # warm: litellm's first call, the PII scanner's data
    walls = [run_once(entity, run_input) for _ in range(args.runs)]
    server.shutdown()
    figures = {
        "tools": args.tools,
        "latency_ms": args.latency_ms,
        "runs": args.runs,
        "wall_ms_median": round(statistics.median(walls) * 1000, 1),
        "wall_ms_min": round(min(walls) * 1000, 1),
        "wall_ms_max": round(max(walls) * 1000, 1),
        "calls_one_after_another_ms": round(args.tools * args.latency_ms, 1),
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(
        f"{args.tools} READ calls of {args.latency_ms:g} ms in one turn: run wall "
        f"{figures['wall_ms_median']} ms median ({figures['wall_ms_min']}-"
        f"{figures['wall_ms_max']}), over {args.runs} runs; the calls one after another "
        f"would take {figures['calls_one_after_another_ms']} ms"
    )


if __name__ == "__main__":
    main()
