"""What the benches that start real processes share: a throwaway PostgreSQL database, the
server and worker processes with their logs, waiting for them, and the percentiles.

Imported by bench/hitl.py, bench/api.py and bench/trace_ws.py (run as scripts, so this
folder is on their path).
"""

from __future__ import annotations

import math
import os
import secrets
import signal
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import suppress
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = "postgres://postgres@127.0.0.1:5432"


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def database_create(prefix: str) -> str:
    """A new, empty database on the local PostgreSQL: its URL."""
    import psycopg

    name = f"hierarch_bench_{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(with_database(POSTGRES, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(POSTGRES, name)


def database_drop(url: str) -> None:
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Processes:
    """The server and the workers, each in its own process group so that stopping one also
    stops what it forked (a worker's pool)."""

    def __init__(self, env: dict[str, str], log_dir: str) -> None:
        self.env = env
        self.log_dir = log_dir
        self.started: list[tuple[str, subprocess.Popen, IO[str]]] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(Path(self.log_dir) / f"{name}.log", "w+")  # noqa: SIM115 - closed in stop_all
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            argv,
            cwd=ROOT,
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started.append((name, process, log))
        return process

    def log_tail(self, name: str, lines: int = 30) -> str:
        for each, _, log in self.started:
            if each == name:
                log.flush()
                log.seek(0)
                return "".join(log.readlines()[-lines:])
        return ""

    def check(self) -> None:
        for name, process, _ in self.started:
            if process.poll() is not None:
                raise SystemExit(
                    f"{name} stopped (exit {process.returncode}):\n" + self.log_tail(name)
                )

    def stop_all(self) -> None:
        for _, process, _ in reversed(self.started):
            if process.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for _, process, log in reversed(self.started):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            # Pool processes left behind by a worker that died first: same group, gone too.
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            log.close()
        self.started.clear()


def until_up(base_url: str, processes: Processes, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        processes.check()
        try:
            with urllib.request.urlopen(f"{base_url}/admin/login/", timeout=2) as answer:  # noqa: S310
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise SystemExit(
        f"daphne did not answer within {timeout:.0f} s:\n" + processes.log_tail("daphne")
    )


def wait_for(check: Any, timeout: float, what: str, processes: Processes) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        processes.check()
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def percentile(values: list[float], fraction: float) -> float:
    """Nearest rank: the smallest value with at least `fraction` of the samples at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summary(values: list[float]) -> dict[str, float | None]:
    """Count, median, p95, p99, min and max (milliseconds, one decimal)."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "min": None, "max": None}
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 1),
        "p95": round(percentile(values, 0.95), 1),
        "p99": round(percentile(values, 0.99), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }
