"""Debian's Chromium through Playwright, as every browser test launches it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@contextlib.contextmanager
def browser_context(base_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A browser context on `base_url` with a 15 s default timeout; skips the test when
    Chromium is missing (CI's run on every service fails a skip: tests/conftest.py)."""
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed: apt-get install chromium")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # between browser steps are still synchronous and safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        context = browser.new_context(base_url=base_url)
        context.set_default_timeout(15_000)
        try:
            yield context
        finally:
            browser.close()
            # While Playwright's loop runs, Django keeps this thread's connections apart from
            # the test's own; close them, or PostgreSQL cannot drop the test database.
            connections.close_all()
