"""Real processes for the reliability tests: Celery workers and beat, a daphne server, the
`run_entity` command, each in its own process group, against this test's database."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from runs.models import TERMINAL, Run

ROOT = Path(__file__).resolve().parents[2]
NEEDS = "needs PostgreSQL and a broker: run .ci/run or set DATABASE_URL/CELERY_BROKER_URL"

# Short enough that a test sees a dead worker's run come back within seconds.
LEASE_SECONDS = 5
SWEEP_SECONDS = 1


def require_real_services() -> None:
    """Skip without PostgreSQL and a broker (CI's run on every service fails a skip: a
    reliability test that silently does not run proves nothing; tests/conftest.py)."""
    postgres = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    broker = not str(settings.CELERY_BROKER_URL).startswith("memory://")
    if postgres and broker:
        return
    pytest.skip(NEEDS)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Processes:
    """Starts and kills the processes of one test; their output goes to files in tmp_path."""

    def __init__(self, directory: Path, env: dict[str, str]):
        self.directory = directory
        self.env = env
        self.started: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, *argv: str, **env: str) -> subprocess.Popen:
        log = (self.directory / f"{name}.log").open("wb")
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            [sys.executable, *argv],
            cwd=ROOT,
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a kill takes its children too
        )
        log.close()
        self.started.append((name, process))
        return process

    def worker(
        self, name: str, *, wait: bool = True, concurrency: int = 1, **env: str
    ) -> subprocess.Popen:
        """A Celery worker started as the README deploys it (WORKER_COMMAND: a pool of
        threads), with one slot unless told (a test sees which worker ran what)."""
        from config.celery import WORKER_COMMAND

        process = self.start(
            name,
            "-m",
            *WORKER_COMMAND,
            "-c",
            str(concurrency),
            "-n",
            f"{name}@%h",
            "--without-mingle",
            "--without-gossip",
            "-l",
            "info",
            **env,
        )
        if wait:
            self.wait_for_log(name, "ready.", timeout=30)
        return process

    def beat(self, **env: str) -> subprocess.Popen:
        """Celery beat: the sweeper every SWEEP_SECONDS."""
        return self.start(
            "beat",
            "-m",
            "celery",
            "-A",
            "config",
            "beat",
            "-s",
            str(self.directory / "beat-schedule"),
            "-l",
            "info",
            **env,
        )

    def kill(self, process: subprocess.Popen) -> None:
        """SIGKILL the process and every process of its group (a worker's pool children)."""
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def kill_all(self) -> None:
        for _, process in self.started:
            self.kill(process)

    def log(self, name: str) -> str:
        path = self.directory / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for_log(self, name: str, text: str, timeout: float) -> None:
        process = dict(self.started)[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log(name):
                return
            if process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{name} did not log {text!r}:\n{self.log(name)[-3000:]}")

    def wait_idle(self, timeout: float = 30) -> None:
        """Wait until every live worker has finished every task it received: a late duplicate
        hint must have done its worst before a test looks at the records."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = [
                name
                for name, process in self.started
                if process.poll() is None and _unfinished_tasks(self.log(name))
            ]
            if not busy:
                return
            time.sleep(0.1)
        raise AssertionError(f"workers {busy} still busy after {timeout:g} s\n{self.tails()}")

    def tails(self) -> str:
        return "\n".join(
            f"----- {name} (exit {process.poll()}) -----\n{self.log(name)[-4000:]}"
            for name, process in self.started
        )


_RECEIVED = re.compile(r"Task [\w.]+\[([0-9a-f-]+)\] received")
_DONE = re.compile(
    r"(?:Task [\w.]+\[([0-9a-f-]+)\] (?:succeeded|raised|failed|retry)"
    r"|Discarding revoked task: [\w.]+\[([0-9a-f-]+)\])"
)


def _unfinished_tasks(log: str) -> set[str]:
    done = {a or b for a, b in _DONE.findall(log)}
    return set(_RECEIVED.findall(log)) - done


def wait_until(
    condition: Callable[[], Any], *, timeout: float, what: str, processes: Processes
) -> Any:
    """Poll the database until `condition()` is truthy; fail with the processes' logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}\n{processes.tails()}")


def settled(trace_id: Any) -> bool:
    """Every run of the trace has ended."""
    return not Run.objects.filter(trace_id=trace_id).exclude(status__in=TERMINAL).exists()


def wait_for_the_end(run: Run, processes: Processes, *, timeout: float) -> Run:
    """Wait until every run of the trace has ended and the workers are idle; the run, fresh."""
    wait_until(lambda: settled(run.trace_id), timeout=timeout, what="the run", processes=processes)
    processes.wait_idle()
    run.refresh_from_db()
    return run
