"""Fixtures for the tests with real processes. Each test starts its own processes and the
`processes` fixture always kills them, so a failing test leaves nothing running.

They need PostgreSQL (a worker process must see what the test committed, so the tests use
`transactional_db`) and a real broker (Redis or RabbitMQ).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from entities.models import Workspace
from tests.factories import WorkspaceFactory
from tests.reliability.processes import (
    LEASE_SECONDS,
    SWEEP_SECONDS,
    Processes,
    require_real_services,
)
from tests.support.database import database_url


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "reliability: real worker and server processes against PostgreSQL and a broker",
    )


@pytest.fixture
def processes(transactional_db, tmp_path, settings) -> Iterator[Processes]:
    """Processes for this test, all SIGKILLed at the end (before the database is flushed).

    This process hands runs to Celery, as the web server does with HIERARCH_EXECUTOR=celery;
    the broker's queue is emptied before and after, so no test sees another's hints."""
    require_real_services()
    from config.celery import app

    settings.HIERARCH_EXECUTOR = "celery"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": str(settings.CELERY_BROKER_URL),
        "HIERARCH_EXECUTOR": "celery",
        "HIERARCH_LEASE_SECONDS": str(LEASE_SECONDS),
        "HIERARCH_SWEEP_SECONDS": str(SWEEP_SECONDS),
        "HIERARCH_OFFLINE_LATENCY_MS": "0",
        "PYTHONUNBUFFERED": "1",
    }
    app.control.purge()
    running = Processes(tmp_path, env)
    try:
        yield running
    finally:
        running.kill_all()
        app.control.purge()
        # Shown only when the test failed: what each process said.
        print(running.tails())


@pytest.fixture
def workspace(processes) -> Workspace:
    return WorkspaceFactory(name="Reliability", slug="reliability")
