"""A real server for the browser: daphne serving config.asgi (HTTP and websockets) against
the test database, and Debian's Chromium driven by Playwright.

pytest-django's `live_server` speaks WSGI only, so pages that listen on a websocket need this
one. It runs in its own process, as in production; the test and the server meet in the
database and the Redis channel layer, which is why it needs REDIS_URL.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.conf import settings
from django.db import connections

from tests.chromium import browser_context

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _database_url() -> str:
    db = connections["default"].settings_dict  # the test database by now
    auth = quote(db["USER"] or "")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"])
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _until_up(base_url: str, process: subprocess.Popen, log) -> str:
    deadline = time.monotonic() + 30
    while process.poll() is None:
        try:
            if httpx.get(f"{base_url}/admin/login/", timeout=1).status_code == 200:
                return base_url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            pytest.fail("daphne did not answer within 30 s")
        time.sleep(0.1)
    log.seek(0)
    pytest.fail(f"daphne stopped:\n{log.read()}")


@contextlib.contextmanager
def _daphne(**env_changes: str | None) -> Iterator[str]:
    """A daphne process serving the product against the test database, its base URL; each
    of `env_changes` set in its environment, or removed when None."""
    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": _database_url(),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "HIERARCH_EXECUTOR": "inline",
        "PYTHONPATH": str(ROOT),
    }
    for name, value in env_changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
            + ["tests.browser.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield _until_up(f"http://127.0.0.1:{port}", process, log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def asgi_server(transactional_db):
    """The base URL of a daphne process serving the product against the test database."""
    if connections["default"].vendor != "postgresql" or not settings.REDIS_URL:
        pytest.skip("the browser tests need PostgreSQL (DATABASE_URL) and Redis (REDIS_URL)")
    with _daphne() as base_url:
        yield base_url


# The embedded default's environment: no Redis, so the in-memory channel layer and the live
# relay (runs/relay.py); the Celery settings go too, as `make run` has none.
EMBEDDED = {"REDIS_URL": None, "CELERY_BROKER_URL": None, "CELERY_RESULT_BACKEND": None}


@pytest.fixture
def embedded_server(transactional_db):
    """The base URL of a daphne process as `make run` serves it: no Redis. PostgreSQL all
    the same: the test database of SQLite is in memory, which another process cannot open."""
    if connections["default"].vendor != "postgresql":
        pytest.skip("a server in its own process needs the PostgreSQL test database")
    # The server's sweeper looks only when it starts: what the page shows of a run another
    # process works on came from that process.
    with _daphne(**EMBEDDED, HIERARCH_SWEEP_SECONDS="3600") as base_url:
        yield base_url


def manage(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`manage.py <args>` in a process of its own, with the embedded default's environment,
    against the test database; fails the test with its output when it fails."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": _database_url(),
        "HIERARCH_EXECUTOR": "inline",
        "PYTHONPATH": str(ROOT),
    }
    for name in EMBEDDED:
        env.pop(name, None)
    done = subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"manage.py {args[0]} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done


@pytest.fixture
def failures() -> list[str]:
    """Server errors, static files that failed, and script errors, as the browser saw them."""
    return []


def _watch(response, failures: list[str]) -> None:
    path = response.url.split("//", 1)[-1].partition("/")[2]
    if response.status >= 500 or response.status in (400, 403, 404):
        failures.append(f"{response.status} /{path}")


def _console(message, failures: list[str]) -> None:
    # A refused decision answers 422 or 409 by design, and the browser logs every 4xx it
    # loads; the responses themselves are watched above.
    if message.type == "error" and not message.text.startswith("Failed to load resource"):
        failures.append(f"console error: {message.text}")


@contextlib.contextmanager
def _console_context(base_url: str, monkeypatch, failures: list[str]) -> Iterator:
    """A browser context whose pages say when their websocket opened (so a test knows when
    pushes can arrive) and record what failed in `failures`."""
    with browser_context(base_url, monkeypatch) as context:
        context.add_init_script(
            "document.addEventListener('htmx:wsOpen', () => { window.hierarchLive = true })"
        )

        def watched(page) -> None:
            page.on("response", lambda response: _watch(response, failures))
            page.on("pageerror", lambda error: failures.append(f"script error: {error}"))
            page.on("console", lambda message: _console(message, failures))

        context.on("page", watched)
        yield context


@pytest.fixture
def console_page(asgi_server, monkeypatch, failures):
    with _console_context(asgi_server, monkeypatch, failures) as context:
        yield context.new_page()


@pytest.fixture
def embedded_context(embedded_server, monkeypatch, failures):
    """A browser context on the embedded default's server (no Redis)."""
    with _console_context(embedded_server, monkeypatch, failures) as context:
        yield context
