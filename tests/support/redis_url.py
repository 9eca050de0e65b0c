"""Redis for the tests that need it: its URL, or a skip that names it."""

from __future__ import annotations

import pytest
from django.conf import settings


def require_redis() -> str:
    """REDIS_URL, or a skip without it (CI's run with Redis fails a skip: tests/conftest.py)."""
    url = settings.REDIS_URL
    if not url:
        pytest.skip("needs Redis: set REDIS_URL")
    return url
